"""The `pi` harness's native entry ids stay unique within a session file.

Pi's entries are linked by `parentId` and replay follows them through a map of ids, so one
repeated id would scramble the context after a reload. The id generator is forced to repeat
(runners/pi/src/state.mjs takes it as `newId`), with ids drawn in the same run and ids read
back from the file, and the conversation must read back whole.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from conftest import PROJECT_ROOT

NODE_SECONDS = 30
STATE_MODULE = PROJECT_ROOT / "runners" / "pi" / "src" / "state.mjs"
# Runs turns on NativeState with ids drawn from argv[3], then reloads it with Pi's own generator
# and prints the texts of the context it rebuilds.
SCRIPT = """
import { NativeState } from %s;
const [directory, texts, ids] = [process.argv[2], JSON.parse(process.argv[3]), JSON.parse(process.argv[4])];
const newId = () => { if (!ids.length) throw new Error("ran out of ids"); return ids.shift(); };
const state = NativeState.load(directory, { newId });
for (const [question, answer] of texts) {
  state.beginTurn();
  state.addMessage({ role: "user", content: [{ type: "text", text: question }], timestamp: 0 });
  state.addMessage({ role: "assistant", content: [{ type: "text", text: answer }], timestamp: 0 });
  state.commit();
}
state.close();
const reloaded = NativeState.load(directory);
console.log(JSON.stringify(reloaded.prefix().map((message) => message.content[0].text)));
"""


def _run_turns(directory: Path, texts: list[list[str]], ids: list[str]) -> list[str]:
    completed = subprocess.run(
        ["node", "--input-type=module", "-e", SCRIPT % json.dumps(STATE_MODULE.as_uri()), "x", str(directory)]
        + [json.dumps(texts), json.dumps(ids)],
        capture_output=True,
        text=True,
        timeout=NODE_SECONDS,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result: list[str] = json.loads(completed.stdout)
    return result


def _entry_ids(directory: Path) -> list[str]:
    entries: list[dict[str, Any]] = [
        json.loads(line) for line in (directory / "session.jsonl").read_text().splitlines()
    ]
    return [entry["id"] for entry in entries if entry["type"] != "session"]


def test_an_id_drawn_twice_in_one_run_is_drawn_again_and_the_context_reads_back_whole(tmp_path: Path) -> None:
    # given a generator that repeats each id once
    ids = [f"{n:08x}" for n in range(1, 7) for _ in range(2)]
    # when
    context = _run_turns(tmp_path, [["one", "first"], ["two", "second"]], ids)
    # then
    assert _entry_ids(tmp_path) == [f"{n:08x}" for n in range(1, 7)]
    assert context == ["one", "first", "two", "second"]


def test_an_id_already_in_the_file_is_drawn_again_after_a_reload(tmp_path: Path) -> None:
    # given a first turn written with ids 1 to 3
    _run_turns(tmp_path, [["one", "first"]], ["00000001", "00000002", "00000003"])
    # when the next run's generator offers those ids again first
    context = _run_turns(
        tmp_path, [["two", "second"]], ["00000003", "00000001", "00000004", "00000002", "00000005", "00000006"]
    )
    # then
    assert _entry_ids(tmp_path) == [f"{n:08x}" for n in range(1, 7)]
    assert context == ["one", "first", "two", "second"]
