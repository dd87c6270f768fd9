// One run: its header and actions, and tabs for the timeline, graph, state (with fork and diff), events and
// the debugger; the selected call's detail beside them. The run follows its tape stream while it executes.
// The URL holds the tab, the checkpoint and the call: /ui/runs/<id>?tab=state&checkpoint=<id>&call=<id>.
import { Suspense, lazy, useCallback, useEffect, useMemo, useRef, useState } from "react";
import { Link, useNavigate, useParams, useSearchParams } from "react-router-dom";
import { api, type TapeEvent } from "../api";
import { count, money, seconds, shortId, when } from "../format";
import { follow } from "../sse";
import { runKind } from "../runTree";
import { callsOf } from "../waterfall";
import { isReplay } from "../runTree";
import { ErrorLine, StatusBadge, useLoad } from "../ui";
import { TimelineView } from "./TimelineView";

import { CallPanel } from "./CallPanel";
import { EventsList } from "./EventsList";
import { InterruptForm } from "./InterruptForm";

import { LiveMessages } from "./LiveMessages";

// the diagram (React Flow), the state tab (jsondiffpatch) and the debugger load when first opened
const GraphDiagram = lazy(() => import("./GraphDiagram").then((m) => ({ default: m.GraphDiagram })));
const StatePanel = lazy(() => import("./StatePanel").then((m) => ({ default: m.StatePanel })));
const DebuggerPanel = lazy(() => import("./DebuggerPanel").then((m) => ({ default: m.DebuggerPanel })));

const TABS = ["timeline", "graph", "state", "messages", "events", "debugger"] as const;
type Tab = (typeof TABS)[number];

export function RunView() {
  const { runId = "" } = useParams();
  const [params, setParams] = useSearchParams();
  const navigate = useNavigate();
  const tab = (TABS as readonly string[]).includes(params.get("tab") ?? "") ? (params.get("tab") as Tab) : "timeline";
  const callId = params.get("call");
  const detail = useLoad(() => api.run(runId), `run:${runId}`);
  const timeline = useLoad(() => api.timeline(runId), `timeline:${runId}`);
  const [events, setEvents] = useState<TapeEvent[]>([]);
  const [live, setLive] = useState<string>("");
  const [actionError, setActionError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const reloadTimer = useRef<number | null>(null);
  const { reload: reloadDetail } = detail;
  const { reload: reloadTimeline } = timeline;
  // an ended run's stream replays its history: the views already show it, so only a running run reloads
  const ended = useRef(false);
  ended.current = Boolean(detail.data && detail.data.run.run_id === runId && detail.data.run.status !== "running");

  // from the parameters as they are now (two quick changes must not undo each other)
  const setParam = useCallback(
    (updates: Record<string, string | null>) => {
      const next = new URLSearchParams(window.location.search);
      for (const [k, v] of Object.entries(updates)) {
        if (v) next.set(k, v);
        else next.delete(k);
      }
      setParams(next);
    },
    [setParams],
  );

  // follow the run's tape events once the timeline is shown (a long run's history would compete with it);
  // refresh the views (at most every 300 ms) as they arrive
  const ready = timeline.data?.run_id === runId || timeline.error !== null;
  useEffect(() => {
    if (!ready) return;
    setEvents([]);
    const seen = new Set<number>();
    const batch: TapeEvent[] = [];
    let flush: number | null = null;
    const stop = follow(`/graphtape/runs/${encodeURIComponent(runId)}/stream`, {
      isLast: (m) => m.event === "run_finished" || m.event === "run_failed" || m.event === "error",
      onMessage: (m) => {
        let ev: TapeEvent;
        try {
          ev = JSON.parse(m.data) as TapeEvent;
        } catch {
          return;
        }
        const seq = typeof ev.seq === "number" ? ev.seq : Number(m.id);
        if (seen.has(seq)) return;
        seen.add(seq);
        batch.push({ ...ev, seq, kind: ev.kind ?? m.event });
        if (flush === null)
          flush = window.setTimeout(() => {
            flush = null;
            const add = batch.splice(0);
            setEvents((prev) => prev.concat(add));
          }, 100);
        if (reloadTimer.current === null && !ended.current)
          reloadTimer.current = window.setTimeout(() => {
            reloadTimer.current = null;
            reloadDetail();
            reloadTimeline();
          }, 300);
      },
      onState: (s, d) => {
        setLive(s === "open" ? "live" : s === "reconnecting" ? `reconnecting (${d ?? ""})` : "");
        if (s === "closed") {
          reloadDetail();
          reloadTimeline();
        }
      },
    });
    return () => {
      stop();
      if (flush !== null) window.clearTimeout(flush);
    };
  }, [runId, ready, reloadDetail, reloadTimeline]);

  const calls = useMemo(() => callsOf(timeline.data), [timeline.data]);
  const running = useMemo(() => {
    const s = new Set<string>();
    for (const step of timeline.data?.steps ?? []) for (const t of step.tasks) if (t.status === "running") s.add(t.node);
    return s;
  }, [timeline.data]);

  // keyboard: j/k next/previous call, t/g/s/e/d tabs, Escape closes the call
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const target = e.target as HTMLElement;
      if (target.closest("input, textarea, select, .cm-editor") || e.metaKey || e.ctrlKey || e.altKey) return;
      if (e.key === "j" || e.key === "k") {
        if (!calls.length) return;
        const i = calls.findIndex((c) => c.call_id === callId);
        const next = e.key === "j" ? Math.min(i + 1, calls.length - 1) : Math.max(i - 1, 0);
        setParam({ call: calls[i < 0 ? 0 : next].call_id });
      } else if (e.key === "Escape") setParam({ call: null });
      else {
        const tabKey: Record<string, Tab> = {
          t: "timeline",
          g: "graph",
          s: "state",
          m: "messages",
          e: "events",
          d: "debugger",
        };
        if (tabKey[e.key]) setParam({ tab: tabKey[e.key] });
      }
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [calls, callId, setParam]);

  const act = async (fn: () => Promise<{ run_id: string } | unknown>, go = true) => {
    setBusy(true);
    setActionError(null);
    try {
      const res = (await fn()) as { run_id?: string } | null;
      if (go && res && typeof res.run_id === "string") navigate(`/ui/runs/${res.run_id}`);
      else {
        detail.reload();
        timeline.reload();
      }
    } catch (e) {
      setActionError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };

  const run = detail.data?.run;
  const parent = run ? run.replay_of ?? run.parent_run_id : null;
  return (
    <div className="run-page">
      <ErrorLine error={detail.error} />
      {run && (
        <section className="panel run-head" aria-label="Run">
          <div className="run-title">
            <h1>
              <span className="mono">{shortId(run.run_id)}</span> · {run.graph}
            </h1>
            <StatusBadge status={run.status} />
            <span className="muted">{runKind(run)}</span>
            {live && (
              <span className="live" role="status">
                ● {live}
              </span>
            )}
            {parent && (
              <span>
                from <Link to={`/ui/runs/${parent}`}>{shortId(parent)}</Link>
              </span>
            )}
          </div>
          <dl className="facts">
            <dt>thread</dt>
            <dd className="mono">{run.thread_id}</dd>
            <dt>started</dt>
            <dd>{when(run.started_at)}</dd>
            <dt>duration</dt>
            <dd>{seconds(run.duration)}</dd>
            <dt>calls</dt>
            <dd>
              {run.llm_calls} llm · {run.tool_calls} tool · {run.effect_calls} effect
              {isReplay(run) && ` (${run.served_calls} served, ${run.live_calls} live)`}
            </dd>
            <dt>tokens</dt>
            <dd>{count(run.tokens)}</dd>
          </dl>
          {run.error && <p className="error">{run.error}</p>}
          {typeof run.meta?.recovered_by === "string" && (
            <p className="recovery-note" role="note">
              This run crashed and was finished by its recovery{" "}
              <Link to={`/ui/runs/${run.meta.recovered_by}`}>{shortId(run.meta.recovered_by)}</Link>: replaying or
              exporting it takes both.
            </p>
          )}
          <div className="actions" role="toolbar" aria-label="Run actions">
            <button type="button" disabled={busy} onClick={() => act(() => api.replay(run.run_id, "strict"))}>
              Replay strict
            </button>
            <button type="button" disabled={busy} onClick={() => act(() => api.replay(run.run_id, "flight"))}>
              Replay flight
            </button>
            {run.status === "running" && (
              <button type="button" disabled={busy} onClick={() => act(() => api.cancel(run.thread_id, run.run_id), false)}>
                Cancel run
              </button>
            )}
            <InvalidateForm graph={run.graph} onSubmit={(node, live) => act(() => api.invalidate(run.run_id, node, live))} busy={busy} />
            <LabelEditor runId={run.run_id} label={run.label} onSaved={detail.reload} />
            <a href={`/graphtape/runs/${run.run_id}/export`} download>
              Export tape
            </a>
          </div>
          <ErrorLine error={actionError} />
          {detail.data?.savings && (
            <div className="savings" aria-label="Savings">
              <strong>Savings</strong>: {detail.data.savings.served} calls served from the tape,{" "}
              {detail.data.savings.live} live · {count(detail.data.savings.tokens_saved)} tokens ·{" "}
              {money(detail.data.savings.cost_saved)} · {seconds(detail.data.savings.time_saved)} saved
            </div>
          )}
          {detail.data?.divergence && (
            <div className="divergence-note" role="alert">
              Diverged: {String(detail.data.divergence.message ?? detail.data.divergence.reason ?? "")}
            </div>
          )}
          {detail.data && detail.data.interrupts.length > 0 && run.status !== "running" && (
            <InterruptForm
              run={run}
              interrupts={detail.data.interrupts}
              onStarted={(id) => navigate(`/ui/runs/${id}`)}
            />
          )}
          {detail.data && detail.data.children.length > 0 && (
            <div className="children">
              Branches:{" "}
              {detail.data.children.map((c) => (
                <Link key={c.run_id} to={`/ui/runs/${c.run_id}`} className="chip">
                  {runKind(c)} {shortId(c.run_id)} <StatusBadge status={c.status} />
                  {c.label ? ` ${c.label}` : ""}
                </Link>
              ))}
            </div>
          )}
        </section>
      )}
      <div className="run-body">
        <div className="run-main">
          <div role="tablist" aria-label="Run views" className="tabs">
            {TABS.map((t) => (
              <button
                key={t}
                role="tab"
                type="button"
                aria-selected={tab === t}
                className={tab === t ? "active" : ""}
                onClick={() => setParam({ tab: t })}
              >
                {t[0].toUpperCase() + t.slice(1)}
              </button>
            ))}
          </div>
          <div role="tabpanel" aria-label={tab} className="tab-panel">
            <Suspense fallback={<p className="muted">loading…</p>}>
            {tab === "timeline" && (
              <TimelineView
                timeline={timeline.data}
                error={timeline.error}
                selected={callId}
                onSelect={(id) => setParam({ call: id })}
                onCheckpoint={(cp) => setParam({ tab: "state", checkpoint: cp })}
              />
            )}
            {tab === "graph" && run && <GraphDiagram graph={run.graph} running={running} />}
            {tab === "state" && run && (
              <StatePanel
                runId={run.run_id}
                threadId={run.thread_id}
                checkpoint={params.get("checkpoint")}
                compare={params.get("compare")}
                onSelect={(cp, cmp) => setParam({ checkpoint: cp, compare: cmp })}
                onFork={(id) => navigate(`/ui/runs/${id}`)}
              />
            )}
            {tab === "messages" && run && <LiveMessages threadId={run.thread_id} runId={run.run_id} />}
            {tab === "events" && <EventsList events={events} />}
            {tab === "debugger" && run && <DebuggerPanel run={run} onOpenRun={(id) => navigate(`/ui/runs/${id}`)} />}
            </Suspense>
          </div>
        </div>
        {callId && run && (
          <CallPanel
            runId={run.run_id}
            callId={callId}
            divergence={detail.data?.divergence ?? null}
            onClose={() => setParam({ call: null })}
            onStarted={(id) => navigate(`/ui/runs/${id}`)}
          />
        )}
      </div>
    </div>
  );
}

function LabelEditor({ runId, label, onSaved }: { runId: string; label: string | null; onSaved: () => void }) {
  const [text, setText] = useState(label ?? "");
  const [error, setError] = useState<string | null>(null);
  useEffect(() => setText(label ?? ""), [label]);
  return (
    <form
      className="inline"
      onSubmit={(e) => {
        e.preventDefault();
        api.label(runId, text.trim() || null).then(
          () => {
            setError(null);
            onSaved();
          },
          (err: unknown) => setError(String(err instanceof Error ? err.message : err)),
        );
      }}
    >
      <input aria-label="Run label" placeholder="label" value={text} onChange={(e) => setText(e.target.value)} />
      <button type="submit">Save label</button>
      {error && <span className="error">{error}</span>}
    </form>
  );
}

/** Re-run from a node: its recorded outputs and everything after it are computed again (flight). */
function InvalidateForm({
  graph,
  busy,
  onSubmit,
}: {
  graph: string;
  busy: boolean;
  onSubmit: (node: string, allowLiveEffects: boolean) => void;
}) {
  const shape = useLoad(() => api.graph(graph), `graph:${graph}`);
  const nodes = (shape.data?.nodes ?? []).map((n) => n.id).filter((id) => !id.startsWith("__"));
  const [node, setNode] = useState("");
  const [live, setLive] = useState(false);
  return (
    <form
      className="inline"
      onSubmit={(e) => {
        e.preventDefault();
        if (node) onSubmit(node, live);
      }}
    >
      <select aria-label="Node to re-run from" value={node} onChange={(e) => setNode(e.target.value)}>
        <option value="">node…</option>
        {nodes.map((n) => (
          <option key={n}>{n}</option>
        ))}
      </select>
      <label title="effects (payments, mail...) whose request changed may run for real">
        <input type="checkbox" checked={live} onChange={(e) => setLive(e.target.checked)} /> allow live effects
      </label>
      <button type="submit" disabled={busy || !node}>
        Re-run from node
      </button>
    </form>
  );
}
