// Last touches to a request body before pi-ai sends it (its onPayload hook).
//
// Anthropic's Messages API and Bedrock's Converse want user and assistant turns to alternate;
// pi-ai sends a steer that follows tool results as a user message of its own, right after the
// user message that carries the results. Adjacent messages of one role become one message, their
// content in order (the loop harness's rule for these wires).

// The wires whose `messages` must alternate roles.
const ALTERNATING_APIS = new Set(["anthropic-messages", "bedrock-converse-stream"]);

const asBlocks = (content) => (typeof content === "string" ? [{ type: "text", text: content }] : content);

/** `params` with adjacent same-role messages merged; undefined when nothing changes. */
export function alternateRoles(params, model) {
  if (!ALTERNATING_APIS.has(model?.api) || !Array.isArray(params?.messages)) return undefined;
  const merged = [];
  let changed = false;
  for (const message of params.messages) {
    const previous = merged.at(-1);
    if (previous && previous.role === message.role && Array.isArray(asBlocks(message.content))) {
      merged[merged.length - 1] = { ...previous, content: [...asBlocks(previous.content), ...asBlocks(message.content)] };
      changed = true;
    } else {
      merged.push(message);
    }
  }
  return changed ? { ...params, messages: merged } : undefined;
}
