// How the model sees a session's placed tools (config.placement) and how its calls name their
// environment: the rules of runners/loop/placement.py, read from the same `config.placement`
// data Brain sends in `open`. By the session's explicit policy (ordinary tools; each call goes to
// the environment the policy names) or by an environment selector (the model's input is
// `{environment, input}`, unwrapped on dispatch). Never a ranking or a fallback: a call the model
// did not place exactly goes to Brain as the model made it, and Brain refuses it.

import { brainFailure } from "./frames.mjs";

const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

/** {environments: Map(tool -> [env]), selector, chosen: Map(tool -> env)} of `config.placement`. */
export function parsePlacement(config) {
  const placement = config.placement;
  const placed = { environments: new Map(), selector: false, chosen: new Map() };
  if (placement === undefined || placement === null) return placed;
  if (!isObject(placement)) throw brainFailure("config.placement must be an object");
  for (const item of placement.tools || []) {
    const tool = isObject(item) ? item.tool : null;
    if (!isObject(tool) || typeof tool.name !== "string" || typeof item.env !== "string") {
      throw brainFailure("config.placement.tools must be {tool: {name}, env}");
    }
    placed.environments.set(tool.name, [...(placed.environments.get(tool.name) ?? []), item.env]);
  }
  const presentation = placement.presentation || {};
  if (isObject(presentation)) {
    placed.selector = presentation.mode === "selector";
    if (isObject(presentation.choose)) {
      for (const [name, env] of Object.entries(presentation.choose)) placed.chosen.set(String(name), String(env));
    }
  }
  return placed;
}

/** The parameters the model sees: with a selector, the canonical input wrapped. */
export function presentParameters(placed, name, parameters) {
  if (!placed.selector || !placed.environments.has(name)) return parameters;
  return {
    type: "object",
    properties: {
      environment: { type: "string", enum: [...placed.environments.get(name)] },
      input: parameters,
    },
    required: ["environment", "input"],
    additionalProperties: false,
  };
}

/** The call as Brain receives it ({environment, arguments}): the environment named, the canonical input. */
export function dispatch(placed, name, args) {
  if (!placed.environments.has(name)) return { environment: "", arguments: args };
  if (!placed.selector) return { environment: placed.chosen.get(name) ?? "", arguments: args };
  const environment = isObject(args) ? args.environment : undefined;
  const given = isObject(args) ? args.input : undefined;
  return { environment: typeof environment === "string" ? environment : "", arguments: isObject(given) ? given : {} };
}
