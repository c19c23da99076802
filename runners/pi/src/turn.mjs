// One prompt through Pi's agent loop (pi-agent-core's runAgentLoop):
//
//   1. resolve the model; refuse images the model cannot take (brain_error, before any call)
//   2. Pi appends the user message, streams the model (assistant.delta), records each message as
//      it ends (native state, assistant.message) and reports every model request (model.request);
//      before each call the context is compacted when it nears the window
//   3. Pi runs the generation's tool calls; each goes to Brain as a reverse tool.call (the only
//      tools there are); steers queued meanwhile join before the next call
//   4. the turn commits once the loop stops; a failure or an interrupt discards it
//
// A provider failure is provider_error, a failure on Brain's side (a tool call Brain refused to
// answer, native state that cannot be written) brain_error.

import { runAgentLoop } from "@mariozechner/pi-agent-core";
import { completeSimple, streamSimple } from "@mariozechner/pi-ai";

import { firstKeptTurn, needsCompaction, summaryContext } from "./compaction.mjs";
import { brainFailure, END_TURN, MODEL_REQUEST, providerFailure, RunnerFailure } from "./frames.mjs";
import { failureMessage, MAX_RETRIES, RequestMeter } from "./metering.mjs";
import { alternateRoles } from "./payload.mjs";
import { dispatch } from "./placement.mjs";
import { imageContent, mediaRefusal, mediaSupport, resolveModel } from "./settings.mjs";

// Note appended to a tool result whose remote side effect may or may not have happened.
const UNKNOWN_OUTCOME_NOTE = "(The tool call may or may not have taken effect.)";
const STOP_REASONS = { stop: "stop", toolUse: "tool_use", length: "length" };
// Pi validates a call's arguments against its tool's parameters before running it; Brain
// validates them against the real schema, so Pi's copy accepts any object.
const ANY_OBJECT = { type: "object" };

const textOf = (message) =>
  message.content.filter((part) => part.type === "text").map((part) => part.text).join("");

/**
 * Run one prompt for `attachment` ({settings, state, steers}). `io` talks to Brain: emit(event,
 * data), callTool({id, name, arguments}, signal). Resolves when the turn committed; rejects with a
 * RunnerFailure, or with the abort reason once `signal` aborted.
 */
export async function runTurn(attachment, { text, media }, io, controller) {
  const { settings, state } = attachment;
  const { model, reasoning } = resolveModel(settings);
  const refusal = mediaRefusal(media, mediaSupport(settings), settings.model);
  if (refusal) throw brainFailure(refusal);
  const signal = controller.signal;
  const realTools = new Map(settings.tools.map((tool) => [tool.name, tool]));
  let fatal = null; // a failure that ends the turn, not just one tool result
  let endTurn = false;
  let meter = null;
  let failedStatus = null; // the HTTP status of the request whose failure ends the turn

  const fail = (failure) => {
    fatal ??= failure;
    controller.abort(failure);
  };
  const report = async (purpose, message, requestMeter) => {
    const record = requestMeter?.record({ purpose, message, provider: model.provider, model: model.id, api: model.api });
    if (record) await io.emit(MODEL_REQUEST, record);
  };
  const options = { apiKey: settings.provider.apiKey, sessionId: state.cacheKey, maxRetries: MAX_RETRIES, reasoning };

  const tools = settings.tools.map((tool) => ({
    name: tool.name,
    label: tool.name,
    description: tool.description,
    parameters: ANY_OBJECT,
    execute: async (callId, args, toolSignal) => {
      const call = { id: callId, name: tool.name, ...dispatch(settings.placed, tool.name, args) };
      const result = await io.callTool(call, toolSignal).catch((error) => {
        if (error instanceof RunnerFailure) fail(error);
        throw error;
      });
      const parts = [];
      for (const item of result.content ?? []) {
        parts.push(item && item.type === "text" ? String(item.text ?? "") : JSON.stringify(item));
      }
      if (parts.length === 0 && result.structured_content != null) parts.push(JSON.stringify(result.structured_content));
      if (result.unknown_outcome) parts.push(UNKNOWN_OUTCOME_NOTE);
      if (result[END_TURN] === true) endTurn = true;
      const joined = parts.join("\n");
      if (result.is_error) throw new Error(joined);
      return { content: [{ type: "text", text: joined }], details: {} };
    },
  }));

  // the model sees the real schemas; Pi's own copies only accept (see ANY_OBJECT)
  const streamFn = (streamModel, context, streamOptions) => {
    meter = new RequestMeter(streamModel.api);
    const offered = context.tools?.map((tool) => ({ ...tool, parameters: realTools.get(tool.name).parameters }));
    const requestMeter = meter;
    return requestMeter.run(() =>
      streamSimple(streamModel, { ...context, tools: offered }, {
        ...streamOptions,
        onResponse: (response) => requestMeter.noteHeaders(response.headers),
        onPayload: alternateRoles,
      }),
    );
  };

  state.beginTurn();
  const prefix = state.prefix();
  const prefixLength = prefix.length;
  const transformContext = async (messages) => {
    const own = messages.slice(prefixLength);
    let request = { systemPrompt: settings.instructions, tools: settings.tools, messages: [...state.prefix(), ...own] };
    if (needsCompaction(request, model.contextWindow)) {
      await compact(state, model, options, signal, report, request);
      request = { ...request, messages: [...state.prefix(), ...own] };
    }
    return request.messages;
  };

  const emit = async (event) => {
    if (event.type === "message_update" && event.assistantMessageEvent.type === "text_delta") {
      await io.emit("assistant.delta", { text: event.assistantMessageEvent.delta });
    } else if (event.type === "message_end") {
      const message = event.message;
      if (message.role === "assistant") {
        const requestMeter = meter;
        meter = null;
        await report("turn", message, requestMeter);
        if (message.stopReason === "error") failedStatus = requestMeter?.status ?? null;
        if (message.stopReason === "error" || message.stopReason === "aborted") return; // never recorded
        state.addMessage(message);
        const usage = message.usage;
        await io.emit("assistant.message", {
          text: textOf(message),
          usage: { input: usage.input + usage.cacheRead + usage.cacheWrite, output: usage.output },
          stop_reason: STOP_REASONS[message.stopReason] ?? message.stopReason,
        });
      } else {
        state.addMessage(message);
      }
    }
  };

  const content = [{ type: "text", text }, ...media.map(imageContent)];
  const prompt = { role: "user", content: media.length ? content : text, timestamp: Date.now() };
  const context = { systemPrompt: settings.instructions, messages: prefix, tools };
  const config = {
    model,
    ...options,
    toolExecution: "parallel",
    convertToLlm: (messages) => messages,
    transformContext,
    getSteeringMessages: async () =>
      attachment.takeSteers().map((steer) => ({ role: "user", content: steer, timestamp: Date.now() })),
    // a tool showed the user something: their next message continues, unless they answered already
    shouldStopAfterTurn: async () => endTurn && attachment.steers.length === 0,
  };
  try {
    const messages = await runAgentLoop([prompt], context, config, emit, signal, streamFn);
    if (fatal) throw fatal;
    if (signal.aborted) throw signal.reason ?? new Error("interrupted");
    const last = messages.at(-1);
    if (last?.role === "assistant" && last.stopReason === "error") {
      throw providerFailure(failureMessage(model.provider, last.errorMessage, failedStatus));
    }
    state.commit();
  } catch (error) {
    state.discard();
    throw fatal ?? error;
  }
}

/** Summarise the oldest committed turns into a compaction entry of the running turn. */
async function compact(state, model, options, signal, report, request) {
  const { summary, turns } = state.view();
  if (turns.length === 0) return;
  const kept = firstKeptTurn(turns, model.contextWindow);
  const meter = new RequestMeter(model.api);
  const message = await meter.run(() =>
    completeSimple(model, summaryContext(summary, turns.slice(0, kept), model.contextWindow), {
      ...options,
      reasoning: undefined,
      signal,
      onResponse: (response) => meter.noteHeaders(response.headers),
    }),
  );
  await report("compaction", message, meter);
  if (message.stopReason === "aborted") throw signal.reason ?? new Error("interrupted");
  if (message.stopReason === "error") throw providerFailure(failureMessage(model.provider, message.errorMessage, meter.status));
  const tokensBefore = Math.floor(JSON.stringify(request.messages).length / 4);
  state.addCompaction(textOf(message).trim(), kept < turns.length ? turns[kept].firstId : null, tokensBefore);
}
