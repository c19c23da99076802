// Models of Brain's catalog (runners/loop/models.json: the model registry of the Pi release the
// specification pins) that the pi-ai release installed here does not list, as pi-ai models: the
// catalog's transport, context window, reasoning levels, image input and default endpoint.

import { readFileSync } from "node:fs";

const CATALOG = JSON.parse(readFileSync(new URL("../../loop/models.json", import.meta.url), "utf8"));
const TEXT_ONLY = new Set(CATALOG.text_only);
// The catalog has no output cap; pi-ai sends a third of maxTokens where a request needs one.
const MAX_OUTPUT_TOKENS = 32000;

/** The pi-ai model of catalog entry `provider/id`, with `levels` (its reasoning levels); null when the catalog has none. */
export function catalogModel(provider, id) {
  const entry = CATALOG.models[`${provider}/${id}`];
  if (!entry) return null;
  const [api, contextWindow, profile] = entry;
  const levels = CATALOG.reasoning_profiles[profile] ?? ["off"];
  return {
    id,
    name: id,
    api,
    provider,
    baseUrl: CATALOG.base_urls[provider]?.[api] ?? "",
    reasoning: levels.some((level) => level !== "off"),
    input: TEXT_ONLY.has(`${provider}/${id}`) ? ["text"] : ["text", "image"],
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    contextWindow,
    maxTokens: Math.min(MAX_OUTPUT_TOKENS, contextWindow),
    levels,
  };
}
