// The model's output as it streams, for a run started over HTTP: the run's LangGraph stream (joined from
// the start, so a late viewer sees everything) with `messages` parts grown into chat bubbles per node.
import { useEffect, useState } from "react";
import { follow } from "../sse";
import { addPart, type LiveMessage } from "../liveMessages";

export function LiveMessages({ threadId, runId }: { threadId: string; runId: string }) {
  const [messages, setMessages] = useState<LiveMessage[]>([]);
  const [state, setState] = useState<string>("connecting");
  useEffect(() => {
    setMessages([]);
    const stop = follow(`/threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}/stream`, {
      onMessage: (m) => {
        if (m.event !== "messages" && !m.event.startsWith("messages|")) return;
        try {
          const data = JSON.parse(m.data) as unknown;
          setMessages((prev) => addPart(prev, data));
        } catch {
          // not JSON: skip
        }
      },
      onState: (s, detail) => setState(s === "closed" && detail ? `not available (${detail})` : s),
    });
    return stop;
  }, [threadId, runId]);
  return (
    <div className="chat live-chat" aria-label="Streamed messages">
      <p className="muted" role="status">
        {state === "open" ? "● streaming" : state === "closed" ? "stream ended" : state}
        {" · "}model output of runs started over HTTP, token by token
      </p>
      {messages.length === 0 && <p className="muted">No streamed messages.</p>}
      {messages.map((m) => (
        <div key={m.id} className={`bubble role-${m.type}`} data-message-id={m.id}>
          <div className="role">
            {m.type} · {m.node}
          </div>
          {m.text && <div className="text">{m.text}</div>}
          {m.toolCalls.length > 0 && <div className="mono">→ {m.toolCalls.join(", ")}</div>}
        </div>
      ))}
    </div>
  );
}
