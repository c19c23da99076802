// What one model request cost and how it went: the `model.request` record (runners/accounting.py
// holds the shape and Brain's checks). HTTP attempts are counted by a wrapper around the global
// fetch that pi-ai's provider SDKs call, finding the request in flight through async context, so
// the SDKs' own retries are seen; the provider's request id comes from pi-ai's onResponse hook.

import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";

import { STREAM_ERROR_APIS, surfaceStreamErrors } from "./streamerrors.mjs";

// Retries pi-ai's SDK clients make after the first attempt (their default, set explicitly).
export const MAX_RETRIES = 2;
// Attempts per request where pi-ai's client does not take maxRetries: its Codex client retries on
// its own, up to 3 times; its Gemini, Vertex AI and Mistral clients never retry.
const ATTEMPTS_BY_API = {
  "openai-codex-responses": 4,
  "google-generative-ai": 1,
  "google-vertex": 1,
  "mistral-conversations": 1,
  "pi-messages": 1, // pimessages.mjs makes one
};
// Response headers that carry the provider's id of a request: OpenAI and Azure, Anthropic, Bedrock.
const REQUEST_ID_HEADERS = ["x-request-id", "request-id", "x-amzn-requestid"];
const PROVIDER_ID = /^[\x21-\x7e]{1,256}$/;
// pi-ai reports input without the cached tokens and cache reads and writes on top; output counts
// reasoning too, and no provider's reasoning count is kept apart.
const COUNTS = [
  ["input_tokens", "input"],
  ["output_tokens", "output"],
  ["cache_read_tokens", "cacheRead"],
  ["cache_write_tokens", "cacheWrite"],
];
const MAX_TOKENS = Number.MAX_SAFE_INTEGER;

const currentMeter = new AsyncLocalStorage();

export class RequestMeter {
  constructor(api) {
    this.api = api;
    this.attempts = 0;
    this.providerRequestId = null;
    this.status = null; // the HTTP status of the last response
  }

  /** Note what a response tells: its status and the provider's id of the request. */
  noteResponse(response) {
    this.status = response.status;
    this.noteHeaders(response.headers);
  }

  /** Keep the provider's request id from response headers (a plain object or a fetch Headers). */
  noteHeaders(headers) {
    for (const name of REQUEST_ID_HEADERS) {
      const value = typeof headers?.get === "function" ? headers.get(name) : headers?.[name];
      if (typeof value === "string" && PROVIDER_ID.test(value)) {
        this.providerRequestId = value;
        return;
      }
    }
  }

  /** Run `fn` with this meter as the request in flight. */
  run(fn) {
    return currentMeter.run(this, fn);
  }

  /** The runner's `model.request` data; null when no attempt reached the wire. */
  record({ purpose, message, provider, model, api }) {
    if (this.attempts === 0) return null;
    const allowed = ATTEMPTS_BY_API[api] ?? MAX_RETRIES + 1;
    const reason = message?.stopReason;
    const state = reason === "aborted" ? "interrupted" : reason === "error" || !message ? "failed" : "completed";
    const usage = message?.usage;
    const counts = {};
    for (const [name, key] of COUNTS) {
      const value = usage?.[key];
      if (Number.isInteger(value) && value >= 0 && value <= MAX_TOKENS) counts[name] = value;
    }
    // pi-ai fills every count with 0 until the provider reports usage: all zero is none reported
    const reported = Object.keys(counts).length === COUNTS.length && usage.totalTokens > 0;
    // a stream cut short never sent its final output count (the one pi-ai holds is a placeholder):
    // what it did send is partial usage, as runners/accounting.py defines it
    if (reported && state !== "completed") delete counts.output_tokens;
    const record = {
      request_id: randomUUID().replaceAll("-", ""),
      purpose,
      state,
      provider,
      model,
      attempts: `${Math.min(this.attempts, allowed)}/${allowed}`,
      usage: {
        availability: !reported ? "unavailable" : state === "completed" ? "reported" : "partial",
        semantics: `pi-ai.${message?.api || "unknown"}`.toLowerCase(),
        input_cache: "separate",
        output_reasoning: "unreported",
        ...(reported ? counts : {}),
      },
      unmeasured: ["reasoning_tokens"],
    };
    if (this.providerRequestId !== null) record.provider_request_id = this.providerRequestId;
    return record;
  }
}

/** The turn's provider_error message: the provider, the HTTP status when it refused, pi-ai's text. */
export function failureMessage(provider, text, status) {
  const detail = String(text || "the provider failed");
  if (!Number.isInteger(status) || status < 400) return `${provider}: ${detail}`;
  // the OpenAI and Anthropic SDKs already start their text with the status
  const rest = detail.startsWith(`${status} `) ? detail.slice(String(status).length + 1) : detail;
  return `${provider} HTTP ${status}: ${rest}`;
}

/** The meter of the model request in flight here, if any (for a client that does not use fetch). */
export function meterInFlight() {
  return currentMeter.getStore();
}

/** Count every fetch made while a meter is current (pi-ai's SDK clients use the global fetch), and
 * keep each response's status and request id (pi-ai's onResponse hook is not called for an error
 * status); a Gemini or Vertex AI stream fails at an error event (streamerrors.mjs). */
export function installFetchCounter() {
  const original = globalThis.fetch;
  globalThis.fetch = function countedFetch(...args) {
    const meter = currentMeter.getStore();
    if (!meter) return original.apply(this, args);
    meter.attempts += 1;
    return original.apply(this, args).then((response) => {
      meter.noteResponse(response);
      return STREAM_ERROR_APIS.has(meter.api) && response.ok && response.body ? surfaceStreamErrors(response) : response;
    });
  };
}
