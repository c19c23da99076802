"""Tool-call overhead: registry + HTTP transport against a direct httpx call to the same echo
service (median per call, ratio), and echo calls per second with 32 calls in flight.

    .venv/bin/python bench/tool_bench.py [--calls 2000]

The echo service is the example tool service under uvicorn in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "brainsite.settings")

TOOLS_KEY = "bench-tools-key-0123456789abcdef"
PARALLEL = 32  # issue bar: calls/s with 32 parallel calls
OVERHEAD_BAR = 2.0  # issue bar: within 2x of a direct httpx call
THROUGHPUT_BAR = 1000  # issue bar: at least 1,000 echo calls/s


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_service(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BRAIN_TOOLS_KEY": TOOLS_KEY, "BRAIN_APPROVAL_KEY": TOOLS_KEY + "-approval"}
    process = subprocess.Popen(
        [sys.executable, "-m", "examples.tools", "--port", str(port)], cwd=ROOT, env=env, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("the example tool service did not start")


async def _bench(url: str, calls: int) -> dict[str, float]:
    from examples.tools.app import tool_bindings
    from foundation.hostconfig import ToolBindingConfig
    from tools_app.invocation import CallContext
    from tools_app.registry import ToolRegistry
    from tools_app.tool_path import assemble_tool_path

    echo = ToolBindingConfig.model_validate({**tool_bindings(url, tenant="bench")[0], "token_env": "BENCH_TOOLS_KEY"})
    registry = assemble_tool_path(ToolRegistry([echo], tool_tokens={"echo": TOOLS_KEY}))
    context = CallContext(
        tenant="bench", session_id="5" * 32, call_id="c" * 32, tools=("echo",), progress=lambda data: None
    )
    arguments = {"text": "hello"}
    envelope = {"tenant_id": "bench", "session_id": "5" * 32, "call_id": "c" * 32, "arguments": arguments}
    headers = {"Authorization": f"Bearer {TOOLS_KEY}", "Accept": "application/json, text/event-stream"}

    async with httpx.AsyncClient(timeout=30) as direct:

        async def direct_call() -> None:
            response = await direct.post(f"{url}/tools/echo", json=envelope, headers=headers)
            response.json()

        async def brain_call() -> None:
            result = await registry.invoke(context, "echo", arguments)
            assert "is_error" not in result, result

        for _ in range(200):  # warm both pools and the interpreter
            await direct_call()
            await brain_call()
        direct_times: list[float] = []
        brain_times: list[float] = []
        for _ in range(calls):  # interleaved, so drift hits both alike
            started = time.perf_counter()
            await direct_call()
            direct_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            await brain_call()
            brain_times.append(time.perf_counter() - started)

        async def throughput(call: object, total: int) -> float:
            queue = iter(range(total))

            async def worker() -> None:
                for _ in queue:
                    await call()  # type: ignore[operator]

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(PARALLEL)))
            return total / (time.perf_counter() - started)

        direct_rate = await throughput(direct_call, calls * 2)
        brain_rate = await throughput(brain_call, calls * 2)
    await registry.aclose()
    return {
        "direct_median_ms": statistics.median(direct_times) * 1000,
        "brain_median_ms": statistics.median(brain_times) * 1000,
        "direct_rate": direct_rate,
        "brain_rate": brain_rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    arguments = parser.parse_args()
    import django

    django.setup()
    port = _free_port()
    service = _start_service(port)
    try:
        figures = asyncio.run(_bench(f"http://127.0.0.1:{port}", arguments.calls))
    finally:
        service.terminate()
        service.wait(timeout=10)
    ratio = figures["brain_median_ms"] / figures["direct_median_ms"]
    print(
        f"echo call, median of {arguments.calls}: direct httpx {figures['direct_median_ms']:.3f} ms, "
        f"registry + transport {figures['brain_median_ms']:.3f} ms, ratio {ratio:.2f}x (bar {OVERHEAD_BAR:g}x)"
    )
    print(
        f"{PARALLEL} in flight: direct httpx {figures['direct_rate']:.0f} calls/s, "
        f"through the registry {figures['brain_rate']:.0f} calls/s (bar {THROUGHPUT_BAR})"
    )


if __name__ == "__main__":
    main()
