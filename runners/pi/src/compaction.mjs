// Keep the context inside the model's window: summarise the oldest committed turns with one model
// call (the loop harness's rule: characters / 4, computed from native state only, so a restored
// session decides the same at the same point).

// Characters per token: a deliberately rough estimate, fine for a trigger with headroom.
const CHARS_PER_TOKEN = 4;
// Compact when the next request would fill this share of the window: leaves room for the reply.
const TRIGGER_SHARE = 0.8;
// After compaction the newest turns kept verbatim take at most this share of the window.
const KEEP_RECENT_SHARE = 0.3;
// The transcript sent for summarising stays under this share of the window.
const TRANSCRIPT_SHARE = 0.5;
// A single tool result is quoted up to this many characters in the transcript.
const TOOL_RESULT_QUOTE = 2000;
// What one image costs in context, in tokens (about a 1,000-pixel-square image at any provider).
const IMAGE_TOKENS = 1600;

export const COMPACTION_INSTRUCTIONS =
  "You summarize conversations between a user and an AI assistant so the assistant can continue " +
  "without the full history. Keep facts, decisions, open tasks, names, numbers and tool outcomes. " +
  "Write plain text, no preamble.";
const SUMMARY_REQUEST = "Summarize the conversation above for the assistant's future reference.";

const sizes = new WeakMap();

function messageChars(message) {
  let chars = sizes.get(message);
  if (chars !== undefined) return chars;
  chars = 0;
  const content = typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content;
  for (const part of content || []) {
    if (part.type === "text") chars += part.text.length;
    else if (part.type === "thinking") chars += (part.thinking || "").length;
    else if (part.type === "toolCall") chars += part.name.length + JSON.stringify(part.arguments ?? {}).length;
    else if (part.type === "image") chars += IMAGE_TOKENS * CHARS_PER_TOKEN;
  }
  sizes.set(message, chars);
  return chars;
}

export function estimateTokens({ systemPrompt, tools, messages }) {
  let chars = systemPrompt.length;
  for (const tool of tools) chars += tool.description.length + JSON.stringify(tool.parameters).length;
  for (const message of messages) chars += messageChars(message);
  return Math.floor(chars / CHARS_PER_TOKEN);
}

export const needsCompaction = (request, contextWindow) => estimateTokens(request) > contextWindow * TRIGGER_SHARE;

/** Index of the oldest turn kept verbatim; everything before it is summarised (at least one turn). */
export function firstKeptTurn(turns, contextWindow) {
  const budget = contextWindow * KEEP_RECENT_SHARE * CHARS_PER_TOKEN;
  let kept = turns.length;
  let used = 0;
  while (kept > 1) {
    used += turns[kept - 1].messages.reduce((sum, message) => sum + messageChars(message), 0);
    if (used > budget) break;
    kept -= 1;
  }
  return kept;
}

const textOf = (message) =>
  typeof message.content === "string"
    ? message.content
    : (message.content || []).filter((part) => part.type === "text").map((part) => part.text).join("");

function transcript(summary, turns, limit) {
  const lines = summary ? [`Earlier summary: ${summary}`] : [];
  for (const turn of turns) {
    for (const message of turn.messages) {
      if (message.role === "user") lines.push(`User: ${textOf(message)}`);
      else if (message.role === "toolResult") {
        const status = message.isError ? "error" : "result";
        lines.push(`Tool ${message.toolName} ${status}: ${textOf(message).slice(0, TOOL_RESULT_QUOTE)}`);
      } else if (message.role === "assistant") {
        const text = textOf(message);
        if (text) lines.push(`Assistant: ${text}`);
        for (const part of message.content.filter((p) => p.type === "toolCall")) {
          lines.push(`Assistant called ${part.name}(${JSON.stringify(part.arguments ?? {})})`);
        }
      }
    }
  }
  const text = lines.join("\n");
  return text.length > limit ? text.slice(text.length - limit) : text; // the newest part matters most
}

/** The pi-ai context that summarises `turns` (and the earlier summary). */
export function summaryContext(summary, turns, contextWindow) {
  const limit = Math.floor(contextWindow * TRANSCRIPT_SHARE * CHARS_PER_TOKEN);
  const text = `${transcript(summary, turns, limit)}\n\n${SUMMARY_REQUEST}`;
  return {
    systemPrompt: COMPACTION_INSTRUCTIONS,
    messages: [{ role: "user", content: [{ type: "text", text }], timestamp: 0 }],
    tools: [],
  };
}
