// `pi-messages`: Pi's own message wire, spoken by model gateways for Pi clients (Radius), which
// this pi-ai release does not speak. `POST {baseUrl}/messages` with a Bearer key and
// `{model, context, options}` (pi-ai's own context); the reply is server-sent events of Pi's
// assistant-message stream: `start`, `text_*`, `thinking_*`, `toolcall_*`, then one `done` or
// `error`. Registered as a pi-ai API provider, so Pi's agent loop runs Radius models like any
// other. One attempt per request (the gateway retries upstream); the global fetch is metered.

import { createAssistantMessageEventStream, registerApiProvider } from "@mariozechner/pi-ai";

import { meterInFlight } from "./metering.mjs";

export const PI_MESSAGES = "pi-messages";
// Pi's thinking levels on the wire; the catalog's "max" is Pi's highest, "xhigh".
const LEVELS = { minimal: "minimal", low: "low", medium: "medium", high: "high", xhigh: "xhigh", max: "xhigh" };
const STOP_REASONS = new Set(["stop", "length", "toolUse"]);
const MAX_EVENT_CHARS = 32 << 20; // one event larger than this is not a model's stream
const MAX_ERROR_CHARS = 4096;
const EVENT_END = /\r\n\r\n|\n\n|\r\r/;

export function registerPiMessages() {
  registerApiProvider({ api: PI_MESSAGES, stream: streamPiMessages, streamSimple: streamPiMessages }, "brain");
}

function streamPiMessages(model, context, options = {}) {
  const stream = createAssistantMessageEventStream();
  const output = {
    role: "assistant",
    content: [],
    api: model.api,
    provider: model.provider,
    model: model.id,
    usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
    stopReason: "stop",
    timestamp: Date.now(),
  };
  run(stream, output, model, context, options).catch((error) => {
    output.stopReason = options.signal?.aborted ? "aborted" : "error";
    output.errorMessage = error instanceof Error ? error.message : String(error);
    stream.push({ type: "error", reason: output.stopReason, error: output });
    stream.end();
  });
  return stream;
}

function requestBody(model, context, options) {
  const wireContext = { systemPrompt: context.systemPrompt ?? "", messages: context.messages };
  if (context.tools?.length) wireContext.tools = context.tools.map(({ name, description, parameters }) => ({ name, description, parameters }));
  const wireOptions = {};
  if (options.reasoning && LEVELS[options.reasoning]) wireOptions.reasoning = LEVELS[options.reasoning];
  if (options.sessionId) wireOptions.sessionId = options.sessionId;
  if (options.maxTokens) wireOptions.maxTokens = options.maxTokens;
  if (options.temperature !== undefined) wireOptions.temperature = options.temperature;
  return { model: model.id, context: wireContext, options: wireOptions };
}

async function run(stream, output, model, context, options) {
  let body = requestBody(model, context, options);
  body = (await options.onPayload?.(body, model)) ?? body;
  const response = await fetch(`${model.baseUrl.replace(/\/+$/, "")}/messages`, {
    method: "POST",
    headers: { authorization: `Bearer ${options.apiKey ?? ""}`, "content-type": "application/json", accept: "text/event-stream", ...(options.headers ?? {}) },
    body: JSON.stringify(body),
    signal: options.signal,
  });
  if (!response.ok) throw new Error(`${response.status} ${await errorText(response)}`);
  await options.onResponse?.({ status: response.status, headers: Object.fromEntries(response.headers) }, model);
  stream.push({ type: "start", partial: output });
  let ended = false;
  for await (const event of sseEvents(response.body)) {
    ended = apply(stream, output, event);
    if (ended) break;
  }
  if (!ended) throw new Error("the stream ended without done or error");
  stream.end();
}

/** Apply one wire event to `output` and push its pi-ai event; true once the message ended. */
function apply(stream, output, event) {
  const index = event.contentIndex;
  const block = Number.isInteger(index) ? output.content[index] : undefined;
  switch (event.type) {
    case "text_start":
      output.content[index] = { type: "text", text: "" };
      stream.push({ type: "text_start", contentIndex: index, partial: output });
      return false;
    case "thinking_start":
      output.content[index] = { type: "thinking", thinking: "" };
      stream.push({ type: "thinking_start", contentIndex: index, partial: output });
      return false;
    case "toolcall_start": {
      const call = event.partial?.content?.[index] ?? {};
      output.content[index] = { type: "toolCall", id: String(event.id ?? call.id ?? ""), name: String(event.toolName ?? call.name ?? ""), arguments: {} };
      output.content[index].partialJson = "";
      stream.push({ type: "toolcall_start", contentIndex: index, partial: output });
      return false;
    }
    case "text_delta":
    case "thinking_delta":
    case "toolcall_delta":
      if (!block) throw new Error(`${event.type} for content ${index}, which has not started`);
      if (block.type === "text") block.text += String(event.delta ?? "");
      else if (block.type === "thinking") block.thinking += String(event.delta ?? "");
      else block.partialJson += String(event.delta ?? "");
      stream.push({ type: event.type, contentIndex: index, delta: String(event.delta ?? ""), partial: output });
      return false;
    case "text_end":
      if (block?.type !== "text") throw new Error(`text_end for content ${index}, which is not text`);
      if (typeof event.content === "string") block.text = event.content;
      stream.push({ type: "text_end", contentIndex: index, content: block.text, partial: output });
      return false;
    case "thinking_end": {
      if (block?.type !== "thinking") throw new Error(`thinking_end for content ${index}, which is not thinking`);
      if (typeof event.content === "string") block.thinking = event.content;
      const signature = event.contentSignature ?? event.partial?.content?.[index]?.thinkingSignature;
      if (typeof signature === "string") block.thinkingSignature = signature;
      stream.push({ type: "thinking_end", contentIndex: index, content: block.thinking, partial: output });
      return false;
    }
    case "toolcall_end": {
      if (block?.type !== "toolCall") throw new Error(`toolcall_end for content ${index}, which is not a tool call`);
      const call = event.toolCall ?? {};
      block.id = String(call.id ?? block.id);
      block.name = String(call.name ?? block.name);
      block.arguments = call.arguments && typeof call.arguments === "object" ? call.arguments : parseArguments(block.partialJson);
      delete block.partialJson;
      stream.push({ type: "toolcall_end", contentIndex: index, toolCall: block, partial: output });
      return false;
    }
    case "done": {
      const message = event.message ?? {};
      const usage = event.usage ?? message.usage;
      if (usage && typeof usage === "object") output.usage = { ...output.usage, ...usage };
      const responseId = event.responseId ?? message.responseId;
      if (typeof responseId === "string") {
        output.responseId = responseId;
        const meter = meterInFlight();
        if (meter && meter.providerRequestId === null) meter.providerRequestId = responseId;
      }
      output.stopReason = STOP_REASONS.has(event.reason) ? event.reason : output.content.some((b) => b.type === "toolCall") ? "toolUse" : "stop";
      stream.push({ type: "done", reason: output.stopReason, message: output });
      return true;
    }
    case "error":
      throw new Error(String(event.errorMessage ?? event.error?.errorMessage ?? "the gateway reported an error"));
    default:
      return false; // `start` and events of later wire versions
  }
}

function parseArguments(json) {
  try {
    const value = JSON.parse(json || "{}");
    return value && typeof value === "object" && !Array.isArray(value) ? value : {};
  } catch {
    return {};
  }
}

async function errorText(response) {
  const text = (await response.text()).slice(0, MAX_ERROR_CHARS);
  try {
    const message = JSON.parse(text)?.error?.message;
    if (typeof message === "string") return message;
  } catch {
    // not JSON: the text as it came
  }
  return text || response.statusText;
}

/** The JSON data of each server-sent event of `body`. */
async function* sseEvents(body) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    for (let match = EVENT_END.exec(buffer); match; match = EVENT_END.exec(buffer)) {
      const event = buffer.slice(0, match.index);
      buffer = buffer.slice(match.index + match[0].length);
      const data = event
        .split(/\r\n|\n|\r/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data) yield JSON.parse(data);
    }
    if (buffer.length > MAX_EVENT_CHARS) throw new Error(`stream event over ${MAX_EVENT_CHARS} characters`);
  }
}
