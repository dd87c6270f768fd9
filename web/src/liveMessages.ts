// Model output as it streams: the LangGraph stream's `messages` parts ([message chunk, metadata]) merged
// into one growing message per id, in the order they started.

export interface LiveMessage {
  id: string;
  node: string;
  type: string;
  text: string;
  toolCalls: string[];
}

function chunkText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content))
    return content.map((p) => (typeof p === "string" ? p : ((p as { text?: string })?.text ?? ""))).join("");
  return "";
}

/** `messages` with one streamed part added (a new message, or more text for one already started). */
export function addPart(messages: LiveMessage[], data: unknown): LiveMessage[] {
  if (!Array.isArray(data) || !data[0] || typeof data[0] !== "object") return messages;
  const chunk = data[0] as Record<string, unknown>;
  const meta = (data[1] ?? {}) as Record<string, unknown>;
  const id = String(chunk.id ?? `m${messages.length}`);
  const text = chunkText(chunk.content);
  const calls = Array.isArray(chunk.tool_call_chunks)
    ? (chunk.tool_call_chunks as { name?: string | null }[]).map((c) => c.name).filter((n): n is string => !!n)
    : [];
  const i = messages.findIndex((m) => m.id === id);
  const type = String(chunk.type ?? "ai").replace(/MessageChunk$|Message$/, "").toLowerCase() || "ai";
  if (i < 0) {
    const node = String(meta.langgraph_node ?? "");
    return [...messages, { id, node, type, text, toolCalls: calls }];
  }
  const next = messages.slice();
  const prev = next[i];
  // a whole message (not a chunk) replaces the text; a chunk adds to it
  const whole = !String(chunk.type ?? "").endsWith("Chunk");
  next[i] = { ...prev, text: whole ? text : prev.text + text, toolCalls: [...prev.toolCalls, ...calls] };
  return next;
}
