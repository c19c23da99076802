// The runner host: frames on stdin/stdout, dispatch to attachments (many per process), reverse
// tool.call correlation (at most MAX_TOOL_CALLS outstanding). Requests are handled in arrival
// order; `prompt` starts a turn so the reader keeps serving tool results, steers and interrupts.

import {
  BRAIN_METHODS,
  brainFailure,
  decodeFrame,
  encodeFrame,
  FrameError,
  MAX_FRAME,
  MAX_TOOL_CALLS,
  RunnerFailure,
} from "./frames.mjs";
import path from "node:path";

import { mediaSupport, parseOpenParams, readMedia } from "./settings.mjs";
import { NativeState } from "./state.mjs";
import { runTurn } from "./turn.mjs";

// Exit status when Brain breaks the framing: the stream cannot be trusted any more.
export const EXIT_FRAMING_ERROR = 2;
// Brain answers every tool.call within the binding's timeout_seconds (at most 86,400 s); a reply
// later than that plus a margin is never coming, and the turn fails instead of hanging.
const TOOL_REPLY_MS = (86_400 + 60) * 1000;
// Frames waiting for the end of the event-loop iteration are written at once beyond this many bytes.
const MAX_PENDING_BYTES = 64 * 1024;

const log = (message) => process.stderr.write(`pi: ${message}\n`);

class Interrupted extends Error {}

/** Frames to stdout; lines sent within one event-loop iteration leave in one write. */
class FrameWriter {
  constructor(stream) {
    this.stream = stream;
    this.pending = [];
    this.pendingBytes = 0;
  }

  async send(frame) {
    let line;
    try {
      line = encodeFrame(frame);
    } catch (error) {
      throw brainFailure(error.message);
    }
    if (this.pending.length === 0) setImmediate(() => this.flush());
    this.pending.push(line);
    this.pendingBytes += line.length;
    if (this.pendingBytes >= MAX_PENDING_BYTES) await this.flush();
  }

  flush() {
    if (this.pending.length === 0) return Promise.resolve();
    const data = Buffer.concat(this.pending);
    this.pending = [];
    this.pendingBytes = 0;
    return new Promise((resolve) => {
      if (this.stream.write(data)) resolve();
      else this.stream.once("drain", resolve); // back-pressure
    });
  }
}

class Attachment {
  constructor(id, settings, state) {
    this.id = id;
    this.settings = settings;
    this.state = state;
    this.turnId = null;
    this.turn = null; // {promise, controller, frame}
    this.steers = [];
  }

  get running() {
    return this.turn !== null;
  }

  takeSteers() {
    const steers = this.steers;
    this.steers = [];
    return steers;
  }
}

export class Host {
  constructor(out) {
    this.out = new FrameWriter(out);
    this.attachments = new Map();
    this.pendingCalls = new Map();
    this.nextCall = 1;
    this.toolSlots = MAX_TOOL_CALLS;
    this.waitingForSlot = [];
  }

  // Reading ---------------------------------------------------------------------------------

  /** Serve frames from `input` until it closes; resolves with the exit status. */
  serve(input) {
    return new Promise((resolve) => {
      let buffered = [];
      let bufferedBytes = 0;
      let stopped = false;
      let queue = Promise.resolve();
      const stop = (status) => {
        if (stopped) return;
        stopped = true;
        input.pause();
        queue.then(() => this.shutdown()).then(() => resolve(status));
      };
      input.on("data", (chunk) => {
        let start = 0;
        for (let index = chunk.indexOf(10); index >= 0 && !stopped; index = chunk.indexOf(10, start)) {
          const piece = chunk.subarray(start, index);
          const line = buffered.length ? Buffer.concat([...buffered, piece]) : piece;
          buffered = [];
          bufferedBytes = 0;
          start = index + 1;
          if (line.length > MAX_FRAME) {
            log(`frame over ${MAX_FRAME} bytes; stopping`);
            return stop(EXIT_FRAMING_ERROR);
          }
          if (line.toString("latin1").trim() === "") continue;
          let frame;
          try {
            frame = decodeFrame(line);
          } catch (error) {
            if (!(error instanceof FrameError)) throw error;
            log(`broken frame: ${error.message}; stopping`);
            return stop(EXIT_FRAMING_ERROR);
          }
          queue = queue.then(() => this.dispatch(frame));
        }
        if (stopped || start >= chunk.length) return;
        buffered.push(chunk.subarray(start));
        bufferedBytes += chunk.length - start;
        if (bufferedBytes > MAX_FRAME) {
          log(`frame over ${MAX_FRAME} bytes; stopping`);
          stop(EXIT_FRAMING_ERROR);
        }
      });
      input.on("end", () => stop(0));
      input.on("error", () => stop(0));
    });
  }

  async dispatch(frame) {
    const method = frame.method;
    if (method === undefined) {
      if ("id" in frame && ("result" in frame || "error" in frame)) this.resolveCall(frame);
      else log("ignoring a frame that is neither a request nor a reply");
      return;
    }
    if (!BRAIN_METHODS.has(method)) {
      await this.replyError(frame, brainFailure(`unknown method '${method}'`));
      return;
    }
    let result;
    try {
      result = await this[`on_${method}`](frame);
    } catch (error) {
      if (!(error instanceof RunnerFailure)) log(error.stack || String(error));
      const failure = error instanceof RunnerFailure ? error : brainFailure(`runner failure: ${error.message}`);
      await this.replyError(frame, failure);
      return;
    }
    if (result !== undefined) await this.reply(frame, result);
  }

  async reply(request, result) {
    const reply = { attachment: request.attachment, id: request.id ?? "", result };
    if ("turn" in request) reply.turn = request.turn;
    await this.out.send(reply);
  }

  async replyError(request, failure) {
    const reply = { attachment: request.attachment, id: request.id ?? "", error: { code: failure.code, message: failure.message } };
    if ("turn" in request) reply.turn = request.turn;
    await this.out.send(reply);
  }

  attachment(frame) {
    const attachment = this.attachments.get(frame.attachment);
    if (!attachment) throw brainFailure(`unknown attachment '${frame.attachment}'`);
    return attachment;
  }

  // Requests (a handler returns the result to send, or undefined when the turn replies later) --

  async on_open(frame) {
    if (this.attachments.has(frame.attachment)) throw brainFailure(`attachment '${frame.attachment}' is already open`);
    const settings = parseOpenParams(frame.params);
    const directory = path.resolve(settings.directory);
    for (const other of this.attachments.values()) {
      if (path.resolve(other.settings.directory) === directory) throw brainFailure(`native directory ${directory} is already attached`);
    }
    const state = NativeState.load(settings.directory);
    this.attachments.set(frame.attachment, new Attachment(frame.attachment, settings, state));
    const media = mediaSupport(settings);
    return media ? { media } : {};
  }

  async on_prompt(frame) {
    const attachment = this.attachment(frame);
    const params = frame.params;
    if (!params || typeof params.text !== "string") throw brainFailure("prompt params need text");
    const media = readMedia(params.media ?? []);
    if (attachment.running) throw brainFailure("a turn is already running on this attachment");
    const controller = new AbortController();
    const turnId = frame.turn ?? "";
    attachment.turnId = turnId;
    attachment.steers = [];
    const io = {
      emit: (event, data) => this.out.send({ attachment: attachment.id, turn: turnId, event, data }),
      callTool: (call, signal) => this.callTool(attachment.id, turnId, call, signal),
    };
    const promise = runTurn(attachment, { text: params.text, media }, io, controller).then(
      () => ({ result: {} }),
      (error) => {
        if (error instanceof RunnerFailure) return { error: { code: error.code, message: error.message } };
        if (controller.signal.aborted) return { result: { interrupted: true } };
        log(error.stack || String(error));
        return { error: { code: "brain_error", message: `runner failure: ${error.message}` } };
      },
    );
    attachment.turn = { promise, controller };
    promise.then(async (outcome) => {
      attachment.turn = null;
      attachment.turnId = null;
      attachment.steers = [];
      const reply = { attachment: attachment.id, turn: turnId, id: frame.id ?? "", ...outcome };
      await this.out.send(reply).catch((error) => log(`cannot send prompt reply: ${error.message}`));
    });
    return undefined;
  }

  async on_steer(frame) {
    const attachment = this.attachment(frame);
    if (!frame.params || typeof frame.params.text !== "string") throw brainFailure("steer params need text");
    if (!attachment.running || (frame.turn ?? attachment.turnId) !== attachment.turnId) throw brainFailure("no running turn to steer");
    attachment.steers.push(frame.params.text);
    return {};
  }

  async on_interrupt(frame) {
    const attachment = this.attachment(frame);
    if (!attachment.running || (frame.turn ?? attachment.turnId) !== attachment.turnId) return {};
    // the prompt's own reply ({"interrupted": true}) goes first; the reader goes on meanwhile
    this.stopTurn(attachment).then(() => this.reply(frame, {}));
    return undefined;
  }

  async stopTurn(attachment) {
    const turn = attachment.turn;
    if (!turn) return;
    turn.controller.abort(new Interrupted("interrupted"));
    await turn.promise;
    await new Promise((resolve) => setImmediate(resolve)); // the prompt reply is queued first
  }

  async on_checkpoint(frame) {
    const attachment = this.attachment(frame);
    if (attachment.running) throw brainFailure("checkpoint requested while a turn is running");
    return attachment.state.checkpoint();
  }

  async on_detach(frame) {
    const attachment = this.attachment(frame);
    await this.stopTurn(attachment);
    attachment.state.close();
    this.attachments.delete(attachment.id);
    return {};
  }

  // Reverse tool calls ------------------------------------------------------------------------

  async acquireSlot() {
    if (this.toolSlots > 0) {
      this.toolSlots -= 1;
      return;
    }
    await new Promise((resolve) => this.waitingForSlot.push(resolve));
  }

  releaseSlot() {
    const next = this.waitingForSlot.shift();
    if (next) next();
    else this.toolSlots += 1;
  }

  async callTool(attachmentId, turnId, call, signal) {
    await this.acquireSlot();
    const frameId = `tool-${this.nextCall++}`;
    let timer;
    let onAbort;
    try {
      if (signal?.aborted) throw signal.reason ?? new Interrupted("interrupted");
      const reply = new Promise((resolve, reject) => {
        this.pendingCalls.set(frameId, resolve);
        timer = setTimeout(
          () => reject(brainFailure(`tool call '${call.name}' got no reply from Brain within ${TOOL_REPLY_MS / 1000} s`)),
          TOOL_REPLY_MS,
        );
        onAbort = () => reject(signal.reason ?? new Interrupted("interrupted"));
        signal?.addEventListener("abort", onAbort, { once: true });
      });
      const params = { id: call.id, name: call.name, arguments: call.arguments };
      if (call.environment) params.environment = call.environment; // a placed tool's
      await this.out.send({ attachment: attachmentId, turn: turnId, id: frameId, method: "tool.call", params });
      const frame = await reply;
      if (frame.error) throw brainFailure(`tool call '${call.name}' failed in Brain: ${frame.error.message ?? ""}`);
      if (!frame.result || typeof frame.result !== "object" || Array.isArray(frame.result)) {
        throw brainFailure(`tool call '${call.name}' got a malformed result`);
      }
      return frame.result;
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener("abort", onAbort);
      this.pendingCalls.delete(frameId); // a late reply after an interrupt is dropped
      this.releaseSlot();
    }
  }

  resolveCall(frame) {
    const resolve = this.pendingCalls.get(frame.id ?? "");
    if (!resolve) log(`dropping reply to unknown or abandoned call '${frame.id}'`);
    else resolve(frame);
  }

  // Shutdown --------------------------------------------------------------------------------

  async shutdown() {
    for (const attachment of this.attachments.values()) {
      await this.stopTurn(attachment);
      attachment.state.close();
    }
    this.attachments.clear();
    await this.out.flush(); // the last replies, before the process exits
  }
}
