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

// Exactly the selector's keys.
const WRAPPER_KEYS = ["environment", "input"];
// What moves from the canonical input to the wrapper's root: JSON pointers start at the root.
const HOISTED_KEYS = ["$schema", "$defs", "definitions"];
const INPUT_POINTER = "#/properties/input"; // where the canonical input is in the wrapper
// Keywords whose values are data, not schemas: a `$ref` inside them is not a reference.
const DATA_KEYWORDS = new Set(["const", "enum", "default", "examples"]);

/** The parameters the model sees: with a selector, the canonical input wrapped. */
export function presentParameters(placed, name, parameters) {
  if (!placed.selector || !placed.environments.has(name)) return parameters;
  return wrapInput(parameters, [...placed.environments.get(name)]);
}

/**
 * `{environment, input}` with `schema` as `input`. Its `$defs` and `definitions` (and `$schema`)
 * move to the wrapper's root, where a pointer's `#` now is: a `$ref` into them stays as it was,
 * any other local `$ref` (`#`, `#/properties/...`) gains `/properties/input`. A schema with its
 * own `$id` is a resource of its own, its pointers resolved against it: it is nested unchanged.
 */
export function wrapInput(schema, environments) {
  let inner = schema;
  const hoisted = {};
  if (isObject(schema) && !("$id" in schema)) {
    for (const key of HOISTED_KEYS) if (key in schema) hoisted[key] = schema[key];
    const kept = Object.keys(hoisted)
      .filter((key) => key !== "$schema")
      .map((key) => `#/${key}/`);
    inner = movedRefs(Object.fromEntries(Object.entries(schema).filter(([key]) => !(key in hoisted))), kept);
    for (const key of Object.keys(hoisted)) if (key !== "$schema") hoisted[key] = movedRefs(hoisted[key], kept);
  }
  return {
    type: "object",
    properties: { environment: { type: "string", enum: environments }, input: inner },
    required: ["environment", "input"],
    additionalProperties: false,
    ...hoisted,
  };
}

// `node` with its local `$ref`s pointing where the nested schema now is.
function movedRefs(node, kept) {
  if (Array.isArray(node)) return node.map((item) => movedRefs(item, kept));
  if (!isObject(node)) return node;
  const moved = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === "$ref" && typeof value === "string" && (value === "#" || value.startsWith("#/"))) {
      moved[key] = kept.some((prefix) => value.startsWith(prefix)) ? value : INPUT_POINTER + value.slice(1);
    } else if (DATA_KEYWORDS.has(key)) {
      moved[key] = value;
    } else {
      moved[key] = movedRefs(value, kept);
    }
  }
  return moved;
}

const isWrapper = (args) =>
  isObject(args) &&
  Object.keys(args).length === WRAPPER_KEYS.length &&
  WRAPPER_KEYS.every((key) => key in args) &&
  typeof args.environment === "string" &&
  isObject(args.input);

/**
 * The call as Brain receives it ({environment, arguments}): the environment named, the canonical
 * input; a call that is not the wrapper goes as the model made it, naming no environment.
 */
export function dispatch(placed, name, args) {
  if (!placed.environments.has(name)) return { environment: "", arguments: args };
  if (!placed.selector) return { environment: placed.chosen.get(name) ?? "", arguments: args };
  if (!isWrapper(args)) return { environment: "", arguments: args };
  return { environment: args.environment, arguments: args.input };
}
