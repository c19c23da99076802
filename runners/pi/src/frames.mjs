// RunnerFrame codec (runners/protocol.py is the reference): one JSON object per line, only the
// RunnerFrame fields, string fields as strings, at most MAX_FRAME bytes a line.

export const MAX_FRAME = 4 << 20; // spec: each line is capped at 4 MiB (MaxFrame = 4 << 20)
export const MAX_TOOL_CALLS = 32; // spec: up to 32 concurrent reverse tool calls per runner
export const BRAIN_METHODS = new Set(["open", "prompt", "steer", "interrupt", "checkpoint", "detach"]);
export const END_TURN = "end_turn";
export const MODEL_REQUEST = "model.request";

const FIELDS = new Set(["attachment", "turn", "id", "method", "params", "result", "error", "event", "data"]);
const STRING_FIELDS = ["attachment", "turn", "id", "method", "event"];

export class FrameError extends Error {}

/** A runner failure with the protocol's error code: brain_error or provider_error. */
export class RunnerFailure extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export const brainFailure = (message) => new RunnerFailure("brain_error", message);
export const providerFailure = (message) => new RunnerFailure("provider_error", message);

export function checkFrame(value) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new FrameError("frame is not a JSON object");
  }
  for (const key of Object.keys(value)) {
    if (!FIELDS.has(key)) throw new FrameError(`unknown frame field ${JSON.stringify(key)}`);
  }
  for (const name of STRING_FIELDS) {
    if (name in value && typeof value[name] !== "string") throw new FrameError(`frame field '${name}' must be a string`);
  }
  if (typeof value.attachment !== "string") throw new FrameError("frame has no attachment");
  const error = value.error;
  if (error !== undefined && error !== null) {
    const keys = typeof error === "object" ? Object.keys(error) : [];
    if (typeof error.code !== "string" || keys.some((key) => key !== "code" && key !== "message")) {
      throw new FrameError("frame error must be {code, message}");
    }
  }
  return value;
}

export function decodeFrame(line) {
  if (line.length > MAX_FRAME) throw new FrameError(`frame of ${line.length} bytes exceeds ${MAX_FRAME}`);
  let value;
  try {
    value = JSON.parse(line.toString("utf8"));
  } catch (error) {
    throw new FrameError(`frame is not JSON: ${error.message}`);
  }
  return checkFrame(value);
}

export function encodeFrame(frame) {
  checkFrame(frame);
  const line = Buffer.from(JSON.stringify(frame) + "\n", "utf8");
  if (line.length > MAX_FRAME) throw new FrameError(`frame of ${line.length} bytes exceeds ${MAX_FRAME}`);
  return line;
}
