// Native session state: Pi's session file format (JSONL, a tree of entries linked by parentId),
// appended to and never rewritten. A turn counts only once its `brain.turn_end` custom entry is
// written: the conversation is the path from the newest committed turn end back to the root, so
// an interrupted, failed or killed turn is a dead branch whether or not Brain truncated the file
// to the last checkpoint. A `compaction` entry on that path replaces the turns before its
// `firstKeptEntryId` with its summary.

import { randomBytes, randomUUID } from "node:crypto";
import fs from "node:fs";
import path from "node:path";

import { brainFailure } from "./frames.mjs";

export const SESSION_FILE = "session.jsonl";
export const SESSION_VERSION = 3; // Pi's session file format version
export const TURN_END = "brain.turn_end";
// A compaction summary enters the context as a user message that starts with this line.
export const SUMMARY_PREFIX = "Summary of the earlier conversation:\n";

// Pi's entry ids: 8 hex digits. Unique within a file (replay follows parentId through a map of
// ids, so a repeat would scramble the context after a reload): a drawn id already used is drawn
// again, this many times at most (32 bits: a second repeat in a row is all but impossible).
const randomId = () => randomBytes(4).toString("hex");
const ID_DRAWS = 64;

export function summaryMessage(summary) {
  return { role: "user", content: [{ type: "text", text: SUMMARY_PREFIX + summary }], timestamp: 0 };
}

export class NativeState {
  /** `newId` draws entry ids (tests force repeats with it). */
  constructor(directory, { newId = randomId } = {}) {
    this.directory = directory;
    this.newId = newId;
    this.knownIds = new Set(); // every entry id in the file, read or written
    this.file = path.join(directory, SESSION_FILE);
    this.fd = null;
    this.size = 0;
    this.needsNewline = false; // a torn last line (crash mid-write) must not swallow an entry
    this.cacheKey = randomUUID(); // the header's id: a restored copy keeps sending the same key
    this.headerWritten = false;
    this.leafId = null; // the newest committed turn end
    this.summary = null;
    this.turns = []; // committed turns still in the context: {firstId, messages}
    this.open = null; // the running turn: {headId, firstId, messages, summary?, keptFrom?}
  }

  /** Passive: read what is on disk; create the directory and an empty file if missing. */
  static load(directory, options = {}) {
    const state = new NativeState(directory, options);
    let data;
    try {
      fs.mkdirSync(directory, { recursive: true });
      if (!fs.existsSync(state.file)) fs.writeFileSync(state.file, "");
      data = fs.readFileSync(state.file);
    } catch (error) {
      throw brainFailure(`cannot read native state in ${directory}: ${error.message}`);
    }
    state.size = data.length;
    state.needsNewline = data.length > 0 && data[data.length - 1] !== 0x0a;
    state.replay(data);
    return state;
  }

  replay(data) {
    const byId = new Map();
    let leaf = null;
    for (const line of data.toString("utf8").split("\n")) {
      if (!line.trim()) continue;
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        process.stderr.write(`pi: skipping unreadable native entry in ${this.file}\n`);
        continue;
      }
      if (entry === null || typeof entry !== "object") continue;
      if (entry.type === "session") {
        this.headerWritten = true;
        if (typeof entry.id === "string" && entry.id) this.cacheKey = entry.id;
        continue;
      }
      if (typeof entry.id !== "string") continue;
      this.knownIds.add(entry.id);
      byId.set(entry.id, entry);
      if (entry.type === "custom" && entry.customType === TURN_END) leaf = entry;
    }
    const branch = [];
    for (let entry = leaf; entry; entry = byId.get(entry.parentId)) {
      branch.push(entry);
      if (branch.length > byId.size) break; // a cycle in a damaged file
    }
    branch.reverse();
    this.leafId = leaf ? leaf.id : null;
    let current = null;
    for (const entry of branch) {
      current ??= { firstId: entry.id, messages: [] };
      if (entry.type === "message" && entry.message && typeof entry.message === "object") {
        current.messages.push(entry.message);
      } else if (entry.type === "compaction") {
        this.summary = String(entry.summary ?? "");
        this.turns = this.turnsFrom(entry.firstKeptEntryId ?? null);
      } else if (entry.type === "custom" && entry.customType === TURN_END) {
        this.turns.push(current);
        current = null;
      }
    }
  }

  turnsFrom(firstId, turns = this.turns) {
    const index = turns.findIndex((turn) => turn.firstId === firstId);
    return index < 0 ? [] : turns.slice(index);
  }

  // The context -----------------------------------------------------------------------------

  /** Summary and committed turns as the running turn sees them (after its own compaction). */
  view() {
    const open = this.open;
    if (open && open.compacted) return { summary: open.summary, turns: this.turnsFrom(open.keptFrom) };
    return { summary: this.summary, turns: this.turns };
  }

  /** The messages before the running turn's own: summary and committed turns. */
  prefix() {
    const { summary, turns } = this.view();
    const messages = summary ? [summaryMessage(summary)] : [];
    for (const turn of turns) messages.push(...turn.messages);
    return messages;
  }

  // Writing ---------------------------------------------------------------------------------

  beginTurn() {
    if (this.open) throw brainFailure("a turn is already running");
    this.open = { headId: this.leafId, firstId: null, messages: [], compacted: false };
    return this.open;
  }

  appendEntry(entry) {
    const open = this.open;
    const full = { type: entry.type, id: this.uniqueId(), parentId: open.headId, timestamp: new Date().toISOString(), ...entry };
    let text = JSON.stringify(full) + "\n";
    if (!this.headerWritten) {
      const header = { type: "session", version: SESSION_VERSION, id: this.cacheKey, timestamp: full.timestamp };
      text = JSON.stringify(header) + "\n" + text;
    }
    if (this.needsNewline) text = "\n" + text;
    try {
      this.fd ??= fs.openSync(this.file, "a");
      const bytes = Buffer.from(text, "utf8");
      fs.writeSync(this.fd, bytes); // in the OS page cache from here on: survives a kill -9
      this.size += bytes.length;
    } catch (error) {
      throw brainFailure(`cannot write native state ${this.file}: ${error.message}`);
    }
    this.headerWritten = true;
    this.needsNewline = false;
    this.knownIds.add(full.id);
    open.headId = full.id;
    open.firstId ??= full.id;
    return full;
  }

  uniqueId() {
    for (let draw = 0; draw < ID_DRAWS; draw++) {
      const id = this.newId();
      if (!this.knownIds.has(id)) return id;
    }
    throw brainFailure(`cannot draw a new native entry id in ${this.file}`);
  }

  addMessage(message) {
    this.appendEntry({ type: "message", message });
    this.open.messages.push(message);
  }

  addCompaction(summary, keptFrom, tokensBefore) {
    this.appendEntry({ type: "compaction", summary, firstKeptEntryId: keptFrom, tokensBefore });
    Object.assign(this.open, { compacted: true, summary, keptFrom });
  }

  commit() {
    const open = this.open;
    const end = this.appendEntry({ type: "custom", customType: TURN_END, data: {} });
    if (open.compacted) {
      this.summary = open.summary;
      this.turns = this.turnsFrom(open.keptFrom);
    }
    this.turns.push({ firstId: open.firstId, messages: open.messages });
    this.leafId = end.id;
    this.open = null;
  }

  /** Forget the running turn; its entries stay on disk as a branch nobody continues. */
  discard() {
    this.open = null;
  }

  checkpoint() {
    if (this.open) throw brainFailure("checkpoint requested while a turn is running");
    try {
      if (this.fd !== null) fs.fsyncSync(this.fd);
      const size = fs.statSync(this.file).size;
      return [{ path: SESSION_FILE, size, append_only: true }];
    } catch (error) {
      throw brainFailure(`cannot checkpoint native state ${this.file}: ${error.message}`);
    }
  }

  close() {
    if (this.fd !== null) {
      fs.closeSync(this.fd);
      this.fd = null;
    }
  }
}
