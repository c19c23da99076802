// Bedrock on Pi with the session's key. pi-ai's Bedrock client takes an API key only as
// `bearerToken` (which its simple stream options drop) or from AWS_BEARER_TOKEN_BEDROCK in the
// environment, which Brain gives no child. So Pi's Bedrock module is registered through pi-ai's
// own override, wrapped: each simple stream puts the call's key in that variable, starts the
// real stream (whose first, synchronous step reads it) and removes it again before anything
// else runs, so no other session's call, and nothing after the call, can see it. The same step
// is told to speak HTTP/1.1 (AWS_BEDROCK_FORCE_HTTP1), as the loop harness's client does: the
// default HTTP/2 handler fails against endpoints that speak only HTTP/1.1 (proxies, gateways).
// That handler does not use fetch, so its attempts, statuses and request ids are metered here.

import { setBedrockProviderModule } from "@mariozechner/pi-ai";
import { bedrockProviderModule } from "@mariozechner/pi-ai/bedrock-provider";
import { NodeHttpHandler } from "@smithy/node-http-handler";

import { meterInFlight } from "./metering.mjs";

const TOKEN_VARIABLE = "AWS_BEARER_TOKEN_BEDROCK";
const HTTP1_VARIABLE = "AWS_BEDROCK_FORCE_HTTP1";

function withVariables(values, start) {
  const previous = Object.fromEntries(Object.keys(values).map((name) => [name, process.env[name]]));
  for (const [name, value] of Object.entries(values)) if (value) process.env[name] = value;
  try {
    return start();
  } finally {
    for (const [name, value] of Object.entries(previous)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
}

function meterHttpHandler() {
  const handle = NodeHttpHandler.prototype.handle;
  NodeHttpHandler.prototype.handle = async function meteredHandle(request, options) {
    const meter = meterInFlight();
    if (!meter) return handle.call(this, request, options);
    meter.attempts += 1;
    const result = await handle.call(this, request, options);
    meter.noteResponse({ status: result.response.statusCode, headers: result.response.headers });
    return result;
  };
}

export function installBedrock() {
  meterHttpHandler();
  const { streamBedrock, streamSimpleBedrock } = bedrockProviderModule;
  setBedrockProviderModule({
    streamBedrock: (model, context, options = {}) =>
      withVariables({ [HTTP1_VARIABLE]: "1" }, () =>
        streamBedrock(model, context, { ...options, bearerToken: options.bearerToken || options.apiKey }),
      ),
    streamSimpleBedrock: (model, context, options = {}) =>
      withVariables({ [TOKEN_VARIABLE]: options.apiKey, [HTTP1_VARIABLE]: "1" }, () =>
        streamSimpleBedrock(model, context, options),
      ),
  });
}
