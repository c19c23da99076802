"""A harness runner that writes frames outside the JSON rules of the frame protocol.

Stdlib only, like the instant runner it extends (Brain runs it with the project on
PYTHONPATH). A prompt `hostile:KIND` writes one such line
during the turn, then carries on as if nothing happened (an answer, the prompt's reply), so a
Brain that let the line through would be seen to. KIND is one of HOSTILE_KINDS:

  event-int         assistant.message whose usage holds 2**64
  delta-negative    assistant.delta carrying -(2**63) - 1
  event-digits      assistant.message holding an integer of 5,000 digits
  delta-surrogate   assistant.delta whose text is a lone high surrogate
  message-surrogate assistant.message whose text holds a lone low surrogate
  key-surrogate     assistant.message data with a lone surrogate as an object key
  event-infinity    assistant.message whose usage holds 1e999 (read as infinity)
  event-utf8        assistant.delta holding an encoded surrogate: bytes that are not UTF-8
  call-int          tool.call whose arguments hold 2**64
  call-surrogate    tool.call whose arguments hold a lone surrogate
  reply-int         the prompt's reply with 2**64 in its result

A prompt `record:KIND` sends one `model.request` record (RECORD_KINDS: `valid`, or one broken
in the way its name says), then an answer and the prompt's reply.

Any other prompt behaves as in the instant runner.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from tests.support.instant_runner import AttachedSession, Runner  # Brain puts the project on PYTHONPATH

HUGE = 2**64
HOSTILE_KINDS = (
    "event-int",
    "delta-negative",
    "event-digits",
    "delta-surrogate",
    "message-surrogate",
    "key-surrogate",
    "event-infinity",
    "event-utf8",
    "call-int",
    "call-surrogate",
    "reply-int",
)


# A record the loop would send for an OpenAI Responses request, and the ways to break it.
VALID_RECORD: dict[str, Any] = {
    "request_id": "0123456789abcdef0123456789abcdef",
    "purpose": "turn",
    "unmeasured": ["cache_write_tokens"],
    "state": "completed",
    "provider": "openai",
    "model": "gpt-4.1-mini",
    "provider_request_id": "req_abc",
    "attempts": "2/3",
    "usage": {
        "availability": "reported",
        "semantics": "openai-responses",
        "input_tokens": 120,
        "output_tokens": 30,
        "cache_read_tokens": 100,
        "reasoning_tokens": 8,
        "input_cache": "included",
        "output_reasoning": "included",
    },
}


def _usage(**changes: Any) -> dict[str, Any]:
    return {**VALID_RECORD, "usage": {**VALID_RECORD["usage"], **changes}}


RECORD_KINDS: dict[str, Any] = {
    "valid": VALID_RECORD,
    "not-an-object": ["model.request"],
    "unknown-field": {**VALID_RECORD, "cost_usd": 0.01},
    "harness-claimed": {**VALID_RECORD, "harness": "loop"},
    "string-count": _usage(input_tokens="120"),
    "boolean-count": _usage(output_tokens=True),
    "negative-count": _usage(cache_read_tokens=-1),
    "float-count": _usage(reasoning_tokens=8.0),
    "huge-count": _usage(input_tokens=2**60),
    "long-id": {**VALID_RECORD, "request_id": "r" * 100_000},
    "unknown-state": {**VALID_RECORD, "state": "exploded"},
    "missing-usage": {key: value for key, value in VALID_RECORD.items() if key != "usage"},
    "unmeasured-but-present": {**VALID_RECORD, "unmeasured": ["cache_write_tokens", "input_tokens"]},
    "availability-lies": {
        **VALID_RECORD,
        "usage": {k: v for k, v in VALID_RECORD["usage"].items() if k != "output_tokens"},
    },
    "attempts-beyond-allowed": {**VALID_RECORD, "attempts": "4/3"},
    "unknown-usage-field": _usage(cost=3),
}


def _message(text: str, **usage: Any) -> dict[str, Any]:
    return {"text": text, "usage": {"input": 1, "output": 1, **usage}, "stop_reason": "stop"}


class HostileRunner(Runner):
    def line(self, raw: bytes) -> None:
        self.out.write(raw + b"\n")
        self.out.flush()

    async def prompt(self, request: dict[str, Any], attachment: AttachedSession) -> None:
        text: str = request["params"]["text"]
        if text.startswith("record:"):
            kind = text.removeprefix("record:")
            base = {"attachment": request["attachment"], "turn": request["turn"]}
            attachment.remember({"role": "user", "text": text})
            self.write({**base, "event": "model.request", "data": RECORD_KINDS[kind]})
            answer = f"survived {kind}"
            self.write({**base, "event": "assistant.message", "data": _message(answer)})
            attachment.remember({"role": "assistant", "text": answer})
            self.reply(request, result={})
            return
        if not text.startswith("hostile:"):
            await super().prompt(request, attachment)
            return
        kind = text.removeprefix("hostile:")
        base = {"attachment": request["attachment"], "turn": request["turn"]}
        attachment.remember({"role": "user", "text": text})
        if kind == "event-int":
            self.write({**base, "event": "assistant.message", "data": _message("big", input=HUGE)})
        elif kind == "delta-negative":
            self.write({**base, "event": "assistant.delta", "data": {"text": "x", "n": -(2**63) - 1}})
        elif kind == "event-digits":
            self.write({**base, "event": "assistant.message", "data": _message("long", input=10**5000)})
        elif kind == "delta-surrogate":
            self.write({**base, "event": "assistant.delta", "data": {"text": "\ud800"}})
        elif kind == "message-surrogate":
            self.write({**base, "event": "assistant.message", "data": _message("a\udfffb")})
        elif kind == "key-surrogate":
            self.write({**base, "event": "assistant.message", "data": {**_message("k"), "\ud83d": 1}})
        elif kind == "event-infinity":
            frame = json.dumps(
                {**base, "event": "assistant.message", "data": _message("inf", input=7)}, separators=(",", ":")
            )
            self.line(frame.replace('"input":7', '"input":1e999').encode())
        elif kind == "event-utf8":
            head = json.dumps(base, separators=(",", ":"))[:-1].encode()
            self.line(head + b',"event":"assistant.delta","data":{"text":"\xed\xa0\x80"}}')
        elif kind in ("call-int", "call-surrogate"):
            self.next_call += 1
            call_id = f"c{self.next_call}"
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.calls[call_id] = future
            arguments: dict[str, Any] = {"n": HUGE} if kind == "call-int" else {"s": "\udc00"}
            params = {"id": f"tc{self.next_call}", "name": "echo", "arguments": arguments}
            self.write({**base, "id": call_id, "method": "tool.call", "params": params})
            await future
        elif kind == "reply-int":  # the hostile line ends the turn: nothing can follow it
            self.reply(request, result={"n": HUGE})
            return
        else:
            self.reply(request, error={"code": "brain_error", "message": f"unknown hostile kind {kind}"})
            return
        answer = f"survived {kind}"
        self.write({**base, "event": "assistant.message", "data": _message(answer)})
        attachment.remember({"role": "assistant", "text": answer})
        self.reply(request, result={})


async def main() -> None:
    sys.set_int_max_str_digits(0)  # let json.dumps write the 5,000-digit integer
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=(4 << 20) + 1)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    runner = HostileRunner()
    while True:
        line = await reader.readline()
        if not line:
            return
        runner.handle(json.loads(line))


if __name__ == "__main__":
    asyncio.run(main())
