// One call: the request's messages as a chat, its parameters and tools, the response, tokens, cost and
// latency; an override of its output that re-runs from it; and, when the replay diverged here, the
// recorded and current requests side by side with the changed lines highlighted.
import { useEffect, useState } from "react";
import { api } from "../api";
import { count, money, noPriceHint, num, pretty, readable, seconds, shortId } from "../format";
import { splitUnifiedDiff } from "../waterfall";
import { ErrorLine, JsonEditor, JsonTree, SourceBadge, useLoad } from "../ui";

interface ChatMessage {
  role: string;
  text: string;
  toolCalls: unknown[];
}

/** A LangChain message dict ({type, content, tool_calls}) or an OpenAI-style one ({role, content}). */
export function chatMessage(m: unknown): ChatMessage {
  const o = (m && typeof m === "object" ? m : { content: m }) as Record<string, unknown>;
  // LangChain's serialised form {lc, type: "constructor", id, kwargs}, or the message dict {type, data}
  const inner = o.lc !== undefined && o.kwargs && typeof o.kwargs === "object" ? o.kwargs : o.data;
  const data = (inner && typeof inner === "object" ? inner : o) as Record<string, unknown>;
  if (data === o.kwargs && data.type === undefined && Array.isArray(o.id)) {
    const cls = String(o.id[o.id.length - 1] ?? "");
    return chatMessage({ ...data, type: cls.replace(/Message(Chunk)?$/, "").toLowerCase() || "message" });
  }
  const role = String(data.type ?? data.role ?? o.type ?? "message");
  const content = data.content;
  let text: string;
  if (typeof content === "string") text = content;
  else if (Array.isArray(content))
    text = content
      .map((p) => (typeof p === "string" ? p : (p as { text?: string })?.text ?? JSON.stringify(p)))
      .join("\n");
  else text = content === undefined ? "" : JSON.stringify(content);
  const toolCalls = Array.isArray(data.tool_calls) ? data.tool_calls : [];
  return { role, text, toolCalls };
}

export function CallPanel({
  runId,
  callId,
  divergence,
  onClose,
  onStarted,
}: {
  runId: string;
  callId: string;
  divergence: Record<string, unknown> | null;
  onClose: () => void;
  onStarted: (runId: string) => void;
}) {
  const call = useLoad(() => api.call(runId, callId), `call:${runId}:${callId}`);
  const d = call.data;
  const req = (d?.request ?? {}) as Record<string, unknown>;
  const messages = Array.isArray(req.messages) ? req.messages.map(chatMessage) : null;
  const responseMsgs =
    d && d.call.kind === "llm" && d.response && typeof d.response === "object"
      ? (Array.isArray(d.response) ? d.response : [d.response]).map(chatMessage)
      : null;
  const diverged =
    divergence && (divergence.recorded_call_id === callId || d?.call.source === "diverged") ? divergence : null;
  return (
    <aside className="panel call-panel" aria-label="Call detail">
      <header className="panel-head">
        <h2>
          {d ? `${d.call.kind} ${d.call.name}` : "Call"} <span className="mono muted">{shortId(callId)}</span>
        </h2>
        <div className="panel-actions">
          {d && <SourceBadge source={d.call.source} />}
          <button type="button" aria-label="Close the call detail" onClick={onClose}>
            ✕
          </button>
        </div>
      </header>
      <ErrorLine error={call.error} />
      {d && (
        <>
          <dl className="facts">
            <dt>node</dt>
            <dd>{d.call.node_path}</dd>
            <dt>tokens</dt>
            <dd aria-label="tokens">
              {d.usage
                ? `${count(num(d.usage.input_tokens))} in · ${count(num(d.usage.output_tokens))} out · ${count(d.call.tokens)} total`
                : count(d.call.tokens)}
            </dd>
            <dt>cost</dt>
            <dd>
              {d.call.cost == null && d.call.kind === "llm" ? (
                <span className="no-price" tabIndex={0} title={noPriceHint(d.call.name)} aria-label={`cost unknown: ${noPriceHint(d.call.name)}`}>
                  – <span className="muted">(no price known)</span>
                </span>
              ) : (
                money(d.call.cost)
              )}
            </dd>
            <dt>latency</dt>
            <dd>{seconds(d.latency ?? d.call.duration)}</dd>
            {d.recorded_in && d.recorded_in !== runId && (
              <>
                <dt>recorded in</dt>
                <dd className="mono">{shortId(d.recorded_in)}</dd>
              </>
            )}
          </dl>
          {d.call.error && <p className="error">{d.call.error}</p>}
          {diverged && <DivergenceView divergence={diverged} />}
          {messages && (
            <div className="chat" aria-label="Messages">
              <h3>Messages</h3>
              {messages.map((m, i) => (
                <ChatBubble key={i} m={m} />
              ))}
              {responseMsgs && (
                <>
                  <h3>Response</h3>
                  {responseMsgs.map((r, i) => (
                    <ChatBubble key={i} m={{ ...r, role: r.role === "message" ? "ai" : r.role }} />
                  ))}
                </>
              )}
            </div>
          )}
          {req.params !== undefined && (
            <details open>
              <summary>Parameters</summary>
              <JsonTree value={req.params} label="parameters" />
            </details>
          )}
          {Array.isArray(req.tools) && req.tools.length > 0 && (
            <details>
              <summary>Tools ({req.tools.length})</summary>
              <JsonTree value={req.tools} label="tools" />
            </details>
          )}
          {!messages && (
            <details open>
              <summary>Request</summary>
              <JsonTree value={d.request} label="request" />
            </details>
          )}
          <details open={!responseMsgs}>
            <summary>Response (JSON)</summary>
            <JsonTree value={readable(d.response)} label="response" />
          </details>
          <OverrideForm
            runId={runId}
            callId={callId}
            initial={
              responseMsgs && responseMsgs.length === 1 && !responseMsgs[0].toolCalls.length
                ? JSON.stringify(responseMsgs[0].text)
                : pretty(d.response)
            }
            onStarted={onStarted}
          />
        </>
      )}
    </aside>
  );
}

function ChatBubble({ m }: { m: ChatMessage }) {
  return (
    <div className={`bubble role-${m.role}`}>
      <div className="role">{m.role}</div>
      {m.text && <div className="text">{m.text}</div>}
      {m.toolCalls.length > 0 && (
        <div className="tool-calls">
          {m.toolCalls.map((tc, i) => {
            const t = tc as { name?: string; args?: unknown };
            return (
              <div key={i} className="mono">
                → {t.name ?? "tool"}({JSON.stringify(t.args ?? {})})
              </div>
            );
          })}
        </div>
      )}
    </div>
  );
}

function OverrideForm({
  runId,
  callId,
  initial,
  onStarted,
}: {
  runId: string;
  callId: string;
  initial: string;
  onStarted: (runId: string) => void;
}) {
  const [open, setOpen] = useState(false);
  const [text, setText] = useState(initial);
  const [mode, setMode] = useState<"flight" | "strict">("flight");
  const [error, setError] = useState<string | null>(null);
  useEffect(() => setText(initial), [initial]);
  return (
    <div className="override">
      <button type="button" aria-expanded={open} onClick={() => setOpen(!open)}>
        Override output and re-run
      </button>
      {open && (
        <>
          <p className="muted">
            The output as JSON: for a model call, its answer as a string (or an AI message dict).
          </p>
          <JsonEditor value={text} onChange={setText} label="Override output editor" height="200px" />
          <label>
            mode{" "}
            <select aria-label="Override mode" value={mode} onChange={(e) => setMode(e.target.value as "flight" | "strict")}>
              <option value="flight">flight (calls after it go live)</option>
              <option value="strict">strict</option>
            </select>
          </label>
          <button
            type="button"
            onClick={async () => {
              try {
                const res = await api.override(runId, callId, JSON.parse(text), mode);
                onStarted(res.run_id);
              } catch (e) {
                setError(e instanceof Error ? e.message : String(e));
              }
            }}
          >
            Re-run with this output
          </button>
          <ErrorLine error={error} />
        </>
      )}
    </div>
  );
}

export function DivergenceView({ divergence }: { divergence: Record<string, unknown> }) {
  const diff = typeof divergence.diff === "string" ? divergence.diff : "";
  const { recorded, current } = splitUnifiedDiff(diff);
  return (
    <section className="divergence" aria-label="Divergence">
      <h3>Divergence</h3>
      <p>{String(divergence.message ?? divergence.reason ?? "the request differs from the recording")}</p>
      {diff && (
        <div className="sbs">
          <div>
            <h4>recorded</h4>
            <pre>
              {recorded.map((l, i) => (
                <div key={i} className={l.changed ? "line-del" : ""}>
                  {l.text || " "}
                </div>
              ))}
            </pre>
          </div>
          <div>
            <h4>current</h4>
            <pre>
              {current.map((l, i) => (
                <div key={i} className={l.changed ? "line-add" : ""}>
                  {l.text || " "}
                </div>
              ))}
            </pre>
          </div>
        </div>
      )}
    </section>
  );
}
