"""`python -m tools_app.ingest.worker FILE NAME --title T --cpu-seconds N --memory-bytes M`: one
document read and chunked in a process of its own. Budgets come first (RLIMIT_CPU, RLIMIT_AS, a
lower priority), so they cover everything it does. It writes JSON lines on stdout: `progress`
frames, then one `document` or `error` frame. Imports no Django and never sees the database:
its parent (tools_app.providers.knowledge.jobs) stores what it returns, or records why it died.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import BinaryIO

import orjson

from tools_app.ingest.documents import MAX_DOCUMENT_BYTES, KnowledgeError, parse_document

# After the CPU budget's soft limit (SIGXCPU, turned into CpuBudgetExceeded) the process has this
# many more CPU seconds to report the failure before the hard limit kills it
CPU_GRACE_SECONDS = 5
# Below the server and its harness children: a document being parsed never slows a turn
WORKER_NICENESS = 10
PROGRESS_STEP_PERCENT = 5  # a progress frame at most once per step


class CpuBudgetExceeded(BaseException):  # noqa: N818  # named after the budget, as the failure reads
    """SIGXCPU: the job's CPU time budget is spent. A BaseException, as KeyboardInterrupt is, so
    the parsers' `except Exception` (an unreadable file) cannot swallow it."""


def _on_cpu_limit(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)  # one exception; the hard limit does the rest
    raise CpuBudgetExceeded()


def apply_budgets(*, cpu_seconds: int, memory_bytes: int) -> None:
    """This process's limits, before it reads anything: CPU seconds (then SIGXCPU, and SIGKILL
    CPU_GRACE_SECONDS later), address space (MemoryError past it), a lower priority."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + CPU_GRACE_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    signal.signal(signal.SIGXCPU, _on_cpu_limit)
    os.nice(WORKER_NICENESS)


def _write(out: BinaryIO, frame: dict[str, object]) -> None:
    out.write(orjson.dumps(frame) + b"\n")
    out.flush()


def run(path: Path, name: str, *, title: str, cpu_seconds: int, memory_bytes: int, out: BinaryIO) -> None:
    last = [-PROGRESS_STEP_PERCENT]

    def progress(percent: int, stage: str) -> None:
        if percent - last[0] >= PROGRESS_STEP_PERCENT:
            last[0] = percent
            _write(out, {"progress": percent, "stage": stage})

    error = ""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_DOCUMENT_BYTES + 1)
        document = parse_document(data, name, title=title, progress=progress)
        del data
        chunks = [[span.position, span.start, span.end, span.page, span.text] for span in document.chunks]
        meta = {"title": document.title, "media_type": document.media_type, "size": document.size}
        _write(out, {"document": meta, "chunks": chunks})
    except KnowledgeError as exc:
        error = str(exc)
    except CpuBudgetExceeded:
        error = f"stopped: CPU time budget of {cpu_seconds} s exceeded"
    except MemoryError:
        error = f"stopped: memory budget of {memory_bytes >> 20} MiB exceeded"
    except OSError as exc:
        error = f"the uploaded file could not be read ({exc.strerror})"
    if error:
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        _write(out, {"error": error})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="knowledge_worker")
    parser.add_argument("path", type=Path)
    parser.add_argument("name")
    parser.add_argument("--title", default="")
    parser.add_argument("--cpu-seconds", type=int, required=True)
    parser.add_argument("--memory-bytes", type=int, required=True)
    args = parser.parse_args(argv)
    apply_budgets(cpu_seconds=args.cpu_seconds, memory_bytes=args.memory_bytes)
    run(
        args.path,
        args.name,
        title=args.title,
        cpu_seconds=args.cpu_seconds,
        memory_bytes=args.memory_bytes,
        out=sys.stdout.buffer,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
