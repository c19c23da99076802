"""Example client: create a session, send messages, print the streamed reply of each turn.

    BRAIN_API_KEY=... python examples/session.py [--url http://127.0.0.1:8080] [--model openai/gpt-4.1-mini]

Uses the published client (`pip install aex-brain`), exactly as an application backend would.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from queue import Queue
from typing import Any

from brain import Brain

DEFAULT_MESSAGES = [
    "Hello! What can you do?",
    "Tell me a fun fact about octopuses.",
    "What was my first message?",
]


def _follow(brain: Brain, session_id: str, events: Queue[Any]) -> None:
    try:
        for event in brain.observe(session_id):
            events.put(event)
    except Exception:  # the stream ends when the demo exits
        pass
    events.put(None)


def run_conversation(
    brain: Brain, *, harness: str, model: str, messages: list[str], tools: list[str] | None = None
) -> str:
    session = brain.create({"harness": harness, "config": {"model": model, "tools": tools or []}})
    print(f"session {session['id']} ({harness}, {model})\n")
    events: Queue[dict[str, Any] | None] = Queue()
    threading.Thread(target=_follow, args=(brain, session["id"], events), daemon=True).start()
    for text in messages:
        print(f"you> {text}")
        message = brain.send(session["id"], {"type": "user.message", "text": text})
        print("agent> ", end="", flush=True)
        while (event := events.get(timeout=120)) is not None:
            if event.get("input_id") != message["id"]:
                continue
            if event["type"] == "assistant.delta":
                print(event["data"]["text"], end="", flush=True)
            elif event["type"] == "tool.call":
                print(f"\n  [tool.call {event['data']['name']} {event['data']['arguments']}]", flush=True)
            elif event["type"] == "tool.result":
                print(f"  [tool.result {event['data']['result']}]", flush=True)
            elif event["type"] == "session.error":
                print(f"\n[error {event['data']['code']}: {event['data']['message']}]")
                break
            elif event["type"] == "session.status" and event["data"]["status"] == "idle":
                print("\n")
                break
    return str(session["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--harness", default="loop")
    parser.add_argument("--model", default="openai/gpt-4.1-mini")
    parser.add_argument("message", nargs="*", help="messages to send (default: a short demo)")
    arguments = parser.parse_args()
    token = os.environ.get("BRAIN_API_KEY")
    if not token:
        sys.exit("set BRAIN_API_KEY to a token from the host config")
    brain = Brain(arguments.url, token)
    run_conversation(
        brain, harness=arguments.harness, model=arguments.model, messages=arguments.message or DEFAULT_MESSAGES
    )


if __name__ == "__main__":
    main()
