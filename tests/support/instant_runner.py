"""A protocol-conformant harness runner for tests: answers at once, driven by the prompt text.

Stdlib only (runs with Brain's whitelisted environment). Prompts:
  anything        -> deltas + assistant.message "echo: <text>"
  history         -> assistant.message listing the user texts this attachment remembers
  env             -> assistant.message with the sorted names of the environment variables
  tool:NAME {json}-> a reverse tool.call, then a message quoting the result
  tools:N NAME {json} -> N concurrent tool.calls (N <= 32), then a message counting the results
  sleep:SECONDS   -> wait (interruptible), then echo
  provider_error / brain_error -> error reply with that code
  crash           -> exit at once;  garbage -> write a non-JSON line
  badcheckpoint   -> the next checkpoint reports a wrong size
  badevent        -> an event frame with an unknown name for this attachment, then echo
A prompt that raises (its native file cannot be written, say) gets a brain_error reply.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

CONVERSATION = "conversation.jsonl"


class AttachedSession:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / CONVERSATION
        self.path.touch()
        self.task: asyncio.Task[None] | None = None
        self.bad_checkpoint = False

    def remember(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")

    def user_texts(self) -> list[str]:
        return [json.loads(line)["text"] for line in self.path.read_text().splitlines() if '"user"' in line]


class Runner:
    def __init__(self) -> None:
        self.attachments: dict[str, AttachedSession] = {}
        self.calls: dict[str, asyncio.Future[Any]] = {}
        self.next_call = 0
        self.out = sys.stdout.buffer

    def write(self, frame: dict[str, Any]) -> None:
        self.out.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
        self.out.flush()

    def reply(self, request: dict[str, Any], **payload: Any) -> None:
        frame = {"attachment": request["attachment"], "id": request["id"], **payload}
        if "turn" in request:
            frame["turn"] = request["turn"]
        self.write(frame)

    async def prompt(self, request: dict[str, Any], attachment: AttachedSession) -> None:
        text: str = request["params"]["text"]
        turn = request["turn"]
        base = {"attachment": request["attachment"], "turn": turn}
        try:
            attachment.remember({"role": "user", "text": text})
            if text == "provider_error":
                self.reply(request, error={"code": "provider_error", "message": "upstream rate limit exceeded"})
                return
            if text == "brain_error":
                self.reply(request, error={"code": "brain_error", "message": "model not in catalog"})
                return
            if text == "crash":
                os._exit(3)
            if text == "garbage":
                self.out.write(b"this is not a frame\n")
                self.out.flush()
                return
            if text == "badcheckpoint":
                attachment.bad_checkpoint = True
            if text == "badevent":  # a well-formed frame with an event name the protocol lacks
                self.write({**base, "event": "assistant.bogus", "data": {"text": "?"}})
            answer = f"echo: {text}"
            if text == "history":
                answer = "history: " + " | ".join(attachment.user_texts())
            elif text == "env":
                answer = "env: " + ",".join(sorted(os.environ))
            elif text.startswith("sleep:"):
                await asyncio.sleep(float(text.split(":", 1)[1]))
            elif text.startswith("tools:"):
                count, _, rest = text[6:].partition(" ")
                name, _, arguments = rest.partition(" ")
                results = await asyncio.gather(
                    *(self.call_tool(base, name, json.loads(arguments or "{}")) for _ in range(int(count)))
                )
                answer = f"tools said: {sum(1 for r in results if not r.get('is_error'))} ok of {len(results)}"
            elif text.startswith("tool:"):
                name, _, arguments = text[5:].partition(" ")
                self.next_call += 1
                call_id = f"c{self.next_call}"
                future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                self.calls[call_id] = future
                self.write(
                    {
                        **base,
                        "id": call_id,
                        "method": "tool.call",
                        "params": {
                            "id": f"tc{self.next_call}",
                            "name": name,
                            "arguments": json.loads(arguments or "{}"),
                        },
                    }
                )
                result = await future
                answer = "tool said: " + json.dumps(result)
            for chunk in (answer[: len(answer) // 2], answer[len(answer) // 2 :]):
                self.write({**base, "event": "assistant.delta", "data": {"text": chunk}})
            self.write(
                {
                    **base,
                    "event": "assistant.message",
                    "data": {
                        "text": answer,
                        "usage": {"input": len(text), "output": len(answer)},
                        "stop_reason": "stop",
                    },
                }
            )
            attachment.remember({"role": "assistant", "text": answer})
            self.reply(request, result={})
        except asyncio.CancelledError:
            self.reply(request, result={"interrupted": True})
        except Exception as exc:  # e.g. its native file cannot grow (a full disk): fail the turn, never hang it
            self.reply(request, error={"code": "brain_error", "message": f"runner failed: {exc}"})

    async def call_tool(self, base: dict[str, Any], name: str, arguments: Any) -> Any:
        self.next_call += 1
        call_id = f"c{self.next_call}"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.calls[call_id] = future
        params = {"id": f"tc{self.next_call}", "name": name, "arguments": arguments}
        self.write({**base, "id": call_id, "method": "tool.call", "params": params})
        return await future

    def handle(self, request: dict[str, Any]) -> None:
        if "result" in request or "error" in request:
            future = self.calls.pop(request.get("id", ""), None)
            if future is not None and not future.done():
                future.set_result(request.get("result") or request.get("error"))
            return
        method, name = request.get("method"), request["attachment"]
        if method == "open":
            self.attachments[name] = AttachedSession(Path(request["params"]["dir"]))
            self.reply(request, result={})
        elif method == "prompt":
            attachment = self.attachments[name]
            attachment.task = asyncio.get_running_loop().create_task(self.prompt(request, attachment))
        elif method == "interrupt":
            attachment = self.attachments[name]
            if attachment.task is not None:
                attachment.task.cancel()
            self.reply(request, result={})
        elif method == "checkpoint":
            attachment = self.attachments[name]
            size = attachment.path.stat().st_size + (7 if attachment.bad_checkpoint else 0)
            attachment.bad_checkpoint = False
            self.reply(request, result=[{"path": CONVERSATION, "size": size, "append_only": True}])
        elif method == "detach":
            self.attachments.pop(name, None)
            self.reply(request, result={})
        else:
            self.reply(request, error={"code": "brain_error", "message": f"unknown method {method}"})


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=(4 << 20) + 1)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    runner = Runner()
    while True:
        line = await reader.readline()
        if not line:
            return
        runner.handle(json.loads(line))


if __name__ == "__main__":
    asyncio.run(main())
