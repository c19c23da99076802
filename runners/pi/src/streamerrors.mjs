// Errors a provider reports inside a streamed response, surfaced as a failed read.
//
// The Gemini API and Vertex AI report a failure mid-stream as an SSE event whose JSON carries a
// top-level `error` object. @google/genai recognises such an error only when a network chunk is
// bare JSON, so an SSE-framed one passes as an empty chunk and pi-ai ends the response as if it
// had completed. The response body is passed through here: complete events go on unchanged and
// an error event fails the read, which pi-ai reports as a failed response.

// The wires whose streams carry their errors as events of their own.
export const STREAM_ERROR_APIS = new Set(["google-generative-ai", "google-vertex"]);
// One event larger than this is not a response a model streams; the stream fails instead of
// buffering without bound.
const MAX_EVENT_CHARS = 32 << 20;
// What ends an SSE event (the delimiters @google/genai splits on).
const EVENT_END = /\r\n\r\n|\n\n|\r\r/;

/** The failure an SSE event reports, or null. */
function eventFailure(event) {
  if (!event.includes('"error"')) return null;
  const data = event
    .split(/\r\n|\n|\r/)
    .filter((line) => line.startsWith("data:"))
    .map((line) => line.slice("data:".length).trim())
    .join("\n");
  let value;
  try {
    value = JSON.parse(data);
  } catch {
    return null;
  }
  const error = value?.error;
  if (error === null || typeof error !== "object" || Array.isArray(error)) return null;
  const status = [error.code, error.status].filter((part) => part !== undefined && part !== null).join(" ");
  const message = typeof error.message === "string" ? error.message : JSON.stringify(error);
  return new Error(`stream error${status ? ` ${status}` : ""}: ${message}`);
}

/** `response` with a body that fails at the first error event. */
export function surfaceStreamErrors(response) {
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let buffer = "";
  const drain = (controller) => {
    for (let match = EVENT_END.exec(buffer); match; match = EVENT_END.exec(buffer)) {
      const end = match.index + match[0].length;
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end);
      const failure = eventFailure(event);
      if (failure) return controller.error(failure);
      controller.enqueue(encoder.encode(event));
    }
    if (buffer.length > MAX_EVENT_CHARS) controller.error(new Error(`stream event over ${MAX_EVENT_CHARS} characters`));
  };
  const body = response.body.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        buffer += decoder.decode(chunk, { stream: true });
        drain(controller);
      },
      flush(controller) {
        buffer += decoder.decode();
        const failure = buffer ? eventFailure(buffer) : null;
        if (failure) controller.error(failure);
        else if (buffer) controller.enqueue(encoder.encode(buffer));
      },
    }),
  );
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
}
