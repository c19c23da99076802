// Session settings from an `open` request, and the session's model from Pi's model registry.

import { getApiProviders, getModel, getSupportedThinkingLevels } from "@mariozechner/pi-ai";

import { catalogModel } from "./catalog.mjs";
import { brainFailure } from "./frames.mjs";
import { parsePlacement, presentParameters } from "./placement.mjs";

// spec (reference-models, "Prompt caching"): the system prompt when config.instructions is absent.
export const DEFAULT_INSTRUCTIONS = "You are a helpful assistant. Use the available tools when needed.";
export const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
// Levels Pi's registry offers that a provider refuses: OpenAI's o-series reasoning models take
// low, medium and high only ("minimal" came with GPT-5), whatever pi-ai would send.
const REFUSED_LEVELS = [{ apis: new Set(["openai-responses", "azure-openai-responses"]), id: /^o\d/, levels: ["minimal"] }];
// Pi's thinking levels, lowest first (pi-ai's EXTENDED_THINKING_LEVELS).
const LEVEL_ORDER = ["off", "minimal", "low", "medium", "high", "xhigh"];
// spec (reference-models): "max" requests the corresponding level from Pi, whose highest is xhigh.
const LEVEL_ALIASES = { max: "xhigh" };

export function parseOpenParams(params) {
  if (params === null || typeof params !== "object" || Array.isArray(params)) throw brainFailure("open params must be an object");
  const { config, dir } = params;
  if (!config || typeof config !== "object" || typeof config.model !== "string") throw brainFailure("open params need config.model");
  if (typeof dir !== "string" || !dir) throw brainFailure("open params need dir");
  const provider = params.provider ?? {};
  if (typeof provider !== "object" || Array.isArray(provider)) throw brainFailure("open params provider must be an object");
  const placed = parsePlacement(config);
  return {
    sessionId: String(params.session_id ?? ""),
    directory: dir,
    model: config.model,
    instructions: String(config.instructions || DEFAULT_INSTRUCTIONS),
    reasoningEffort: String(config.reasoning_effort || ""), // "" when unset: see resolveModel
    tools: toolSpecs(params.tools ?? []).map((tool) => ({ ...tool, parameters: presentParameters(placed, tool.name, tool.parameters) })),
    placed,
    provider: { apiKey: String(provider.api_key ?? ""), baseUrl: String(provider.base_url ?? ""), api: String(provider.api ?? "") },
  };
}

/** Exactly the tools Brain described, in its order: the only tools the model is offered. */
function toolSpecs(descriptors) {
  if (!Array.isArray(descriptors)) throw brainFailure("open params tools must be a list");
  const seen = new Set();
  return descriptors.map((descriptor) => {
    if (!descriptor || typeof descriptor.name !== "string") throw brainFailure("each tool needs a name");
    if (seen.has(descriptor.name)) throw brainFailure(`tool '${descriptor.name}' is described twice`);
    seen.add(descriptor.name);
    const schema = descriptor.input_schema;
    return {
      name: descriptor.name,
      description: String(descriptor.description || ""),
      parameters: schema && typeof schema === "object" && !Array.isArray(schema) ? schema : { type: "object" },
    };
  });
}

/** The pi-ai model of `provider/id`, pointed at the host's endpoint; null when Pi has no such model. */
export function lookupModel(settings) {
  const slash = settings.model.indexOf("/");
  if (slash <= 0) return null;
  const [provider, id] = [settings.model.slice(0, slash), settings.model.slice(slash + 1)];
  const found = getModel(provider, id) ?? catalogModel(provider, id);
  if (!found) return null;
  const model = { ...found };
  if (settings.provider.baseUrl) model.baseUrl = settings.provider.baseUrl;
  if (settings.provider.api) model.api = settings.provider.api;
  return model;
}

/** The model and reasoning level a turn runs with; brain_error for what cannot run. */
export function resolveModel(settings) {
  const model = lookupModel(settings);
  if (!model) throw brainFailure(`model '${settings.model}' is neither in Pi's model registry nor in Brain's catalog`);
  if (!getApiProviders().some((provider) => provider.api === model.api)) {
    throw brainFailure(`transport '${model.api}' of model '${settings.model}' is not supported by Pi`);
  }
  if (!model.baseUrl) {
    throw brainFailure(`provider '${model.provider}' has no default endpoint; set base_url in the host config`);
  }
  const levels = supportedLevels(model);
  const requested = settings.reasoningEffort;
  const effort = requested ? (LEVEL_ALIASES[requested] ?? requested) : defaultLevel(levels);
  if (!levels.includes(effort)) {
    throw brainFailure(
      `requested reasoning effort is unsupported by the model ('${settings.model}' accepts ${levels.join(", ")}; got '${requested}')`,
    );
  }
  return { model, reasoning: effort === "off" ? undefined : effort };
}

/**
 * The level of a session that set no reasoning effort: "off" (spec), or, for a model that cannot
 * turn reasoning off (GPT-5, Gemini 3), its lowest level, as pi-ai's clampThinkingLevel(model, "off").
 */
function defaultLevel(levels) {
  return LEVEL_ORDER.find((level) => levels.includes(level)) ?? "off";
}

/** The reasoning levels `model` runs with: Pi's, less those its provider refuses. */
function supportedLevels(model) {
  if (!model.reasoning) return ["off"];
  if (model.levels) return model.levels; // a catalog model: the levels the specification lists
  const rules = REFUSED_LEVELS.filter((rule) => rule.apis.has(model.api) && rule.id.test(model.id));
  const refused = new Set(rules.flatMap((rule) => rule.levels));
  return getSupportedThinkingLevels(model).filter((level) => !refused.has(level));
}

/** The open result's `media` (runners/media.py MediaSupport): pi-ai sends images inline only. */
export function mediaSupport(settings) {
  const model = lookupModel(settings);
  return model && model.input.includes("image") ? { types: [...IMAGE_TYPES], https: false } : null;
}

/** Why the model cannot take these images ("" when it can). */
export function mediaRefusal(media, support, model) {
  if (media.length === 0) return "";
  if (!support) return `model '${model}' does not take images`;
  for (const [index, item] of media.entries()) {
    if (!support.types.includes(item.type)) return `media[${index}]: model '${model}' does not take ${item.type} images`;
    if (!item.url.toLowerCase().startsWith("data:")) {
      return `media[${index}]: model '${model}' cannot fetch image URLs; send the image as a data: URL`;
    }
  }
  return "";
}

/** Checked media items ({type, url}) of a prompt; throws brain_error naming the item. */
export function readMedia(items) {
  if (!Array.isArray(items)) throw brainFailure("prompt params: media must be a list");
  return items.map((item, index) => {
    if (!item || typeof item.type !== "string" || typeof item.url !== "string") {
      throw brainFailure(`prompt params: media[${index}]: each item is an object with type and url`);
    }
    return { type: item.type.trim().toLowerCase(), url: item.url };
  });
}

/** A data: URL image as pi-ai's ImageContent. */
export function imageContent(item) {
  const [head, data] = item.url.slice("data:".length).split(";base64,", 2);
  return { type: "image", data: data ?? "", mimeType: (head || item.type).toLowerCase() };
}
