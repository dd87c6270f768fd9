// The debugger over a replay of this run: breakpoints on nodes (click the diagram) and on calls, then step,
// continue, or answer a paused call with an edited output. Keys: n = step, c = continue.
import { useCallback, useEffect, useMemo, useState } from "react";
import { api, type Breakpoint, type DebugSession, type RunSummary } from "../api";
import { pretty, readable } from "../format";
import { ErrorLine, JsonEditor, JsonTree, StatusBadge } from "../ui";
import { GraphDiagram } from "./GraphDiagram";
import { chatMessage } from "./CallPanel";

/** A recorded output as editable JSON: a model's single plain answer as its text, anything else as is. */
function editableOutput(value: unknown): string {
  if (value === undefined || value === null) return "";
  const list = Array.isArray(value) ? value : [value];
  if (list.length === 1 && list[0] && typeof list[0] === "object" && "lc" in (list[0] as object)) {
    const m = chatMessage(list[0]);
    if (!m.toolCalls.length) return JSON.stringify(m.text);
  }
  return pretty(value);
}

export function DebuggerPanel({ run, onOpenRun }: { run: RunSummary; onOpenRun: (runId: string) => void }) {
  const [nodes, setNodes] = useState<string[]>([]);
  const [callKind, setCallKind] = useState<"" | "llm" | "tool" | "effect">("llm");
  const [callName, setCallName] = useState("");
  const [callNode, setCallNode] = useState("");
  const [callBreak, setCallBreak] = useState(false);
  const [mode, setMode] = useState<"strict" | "flight">("strict");
  const [session, setSession] = useState<DebugSession | null>(null);
  const [answer, setAnswer] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const breakpoints = useMemo<Breakpoint[]>(() => {
    const out: Breakpoint[] = nodes.map((n) => ({ type: "before", node: n }));
    if (callBreak) out.push({ type: "call", kind: callKind || null, name: callName || null, node: callNode || null });
    return out;
  }, [nodes, callBreak, callKind, callName, callNode]);

  const run_ = useCallback(async (fn: () => Promise<DebugSession>) => {
    setBusy(true);
    setError(null);
    try {
      const s = await fn();
      setSession(s);
      setAnswer(editableOutput(s.pause?.recorded_output));
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  }, []);

  const active = session && (session.status === "paused" || session.status === "running");
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if ((e.target as HTMLElement).closest("input, textarea, select, .cm-editor") || !session || !active || busy) return;
      if (e.key === "n") void run_(() => api.debugAct(session.session_id, "step"));
      if (e.key === "c") void run_(() => api.debugAct(session.session_id, "continue"));
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [session, active, busy, run_]);

  const toggle = (n: string) => {
    const next = nodes.includes(n) ? nodes.filter((x) => x !== n) : [...nodes, n];
    setNodes(next);
    if (session && active) {
      const specs: Breakpoint[] = next.map((x) => ({ type: "before", node: x }));
      if (callBreak) specs.push({ type: "call", kind: callKind || null, name: callName || null, node: callNode || null });
      void run_(() => api.debugBreakpoints(session.session_id, specs));
    }
  };

  const pause = session?.pause;
  const pausedNode = pause?.node ?? null;
  const running = useMemo(() => new Set(pausedNode ? [pausedNode] : []), [pausedNode]);
  const nodeSet = useMemo(() => new Set(nodes), [nodes]);
  return (
    <div className="debugger">
      <div className="debug-graph">
        <GraphDiagram graph={run.graph} running={running} breakpoints={nodeSet} onToggleBreakpoint={toggle} />
      </div>
      <div className="debug-side">
        <fieldset disabled={Boolean(active)}>
          <legend>Breakpoints</legend>
          <p>
            Nodes: {nodes.length ? nodes.join(", ") : <span className="muted">none (click a node)</span>}
          </p>
          <label>
            <input type="checkbox" checked={callBreak} onChange={(e) => setCallBreak(e.target.checked)} /> Break on
            calls
          </label>
          <label>
            kind{" "}
            <select aria-label="Call breakpoint kind" value={callKind} onChange={(e) => setCallKind(e.target.value as typeof callKind)}>
              <option value="">any</option>
              <option value="llm">llm</option>
              <option value="tool">tool</option>
              <option value="effect">effect</option>
            </select>
          </label>
          <label>
            name <input aria-label="Call breakpoint name" value={callName} onChange={(e) => setCallName(e.target.value)} />
          </label>
          <label>
            in node <input aria-label="Call breakpoint node" value={callNode} onChange={(e) => setCallNode(e.target.value)} />
          </label>
          <label>
            mode{" "}
            <select aria-label="Debug replay mode" value={mode} onChange={(e) => setMode(e.target.value as "strict" | "flight")}>
              <option value="strict">strict</option>
              <option value="flight">flight</option>
            </select>
          </label>
          <button type="button" disabled={busy} onClick={() => run_(() => api.debugStart(run.run_id, mode, breakpoints))}>
            Start debugging
          </button>
        </fieldset>
        <ErrorLine error={error} />
        {session && (
          <section className="panel" aria-label="Debug session">
            <p>
              Session <StatusBadge status={session.status} />{" "}
              {session.run_id && (
                <button type="button" className="link" onClick={() => onOpenRun(session.run_id!)}>
                  open the replay run
                </button>
              )}
            </p>
            {pause && (
              <div className="pause" role="status">
                <strong>Paused</strong>: {pause.description}
              </div>
            )}
            <div className="row" role="toolbar" aria-label="Debugger controls">
              {(["step", "step_node", "step_call", "continue", "live", "stop"] as const).map((a) => (
                <button
                  key={a}
                  type="button"
                  disabled={!active || busy}
                  onClick={() => run_(() => api.debugAct(session.session_id, a))}
                  title={a === "step" ? "n" : a === "continue" ? "c" : undefined}
                >
                  {a.replace("_", " ")}
                </button>
              ))}
            </div>
            {pause?.call && (
              <>
                <h4>Request</h4>
                {typeof pause.request === "string" ? (
                  <pre className="request-text">{pause.request}</pre>
                ) : (
                  <JsonTree value={pause.request} label="paused request" />
                )}
                <h4>Answer (recorded output, editable)</h4>
                <JsonEditor value={answer} onChange={setAnswer} label="Paused call answer editor" height="160px" />
                <button
                  type="button"
                  disabled={busy}
                  onClick={() => {
                    try {
                      const output = JSON.parse(answer);
                      void run_(() => api.debugUse(session.session_id, output));
                    } catch {
                      setError("the answer is not valid JSON");
                    }
                  }}
                >
                  Use this answer
                </button>
              </>
            )}
            {pause?.state !== undefined && pause?.state !== null && (
              <details>
                <summary>State</summary>
                <JsonTree value={readable(pause.state)} label="paused state" />
              </details>
            )}
            {session.result && (
              <details open>
                <summary>Result</summary>
                <JsonTree value={readable(session.result)} label="debug result" />
              </details>
            )}
          </section>
        )}
      </div>
    </div>
  );
}
