// The runs list: every recorded run, replay and fork (branches under their parent), filtered by graph,
// status and text; the served graphs beside it. Filters live in the URL so a filtered list can be shared.
import { useMemo, useRef, useState } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { useVirtualizer } from "@tanstack/react-virtual";
import { api } from "../api";
import { count, seconds, shortId, when } from "../format";
import { runKind, runTree } from "../runTree";
import { ErrorLine, StatusBadge, useLoad } from "../ui";

const STATUSES = ["", "running", "finished", "failed", "interrupted", "paused"];
/** the time filter: started within the last ... */
const PERIODS: Record<string, [string, number]> = {
  "1h": ["last hour", 3600],
  "1d": ["last 24 hours", 86400],
  "7d": ["last 7 days", 7 * 86400],
};

export function RunsList() {
  const [params, setParams] = useSearchParams();
  const graph = params.get("graph") ?? "";
  const status = params.get("status") ?? "";
  const text = params.get("q") ?? "";
  const period = params.get("since") ?? "";
  // whole minutes, so that the list's key stays the same between renders
  const since = PERIODS[period] ? Math.floor(Date.now() / 60000) * 60 - PERIODS[period][1] : undefined;
  const assistants = useLoad(() => api.assistants(), "assistants");
  const runs = useLoad(
    () => api.runs({ graph, status, q: text, since, limit: 500 }),
    `${graph}|${status}|${text}|${since ?? ""}`,
  );
  const rows = useMemo(() => runTree(runs.data?.runs ?? []), [runs.data]);
  // from the address as it is now, not as this render saw it: two quick changes (a graph cleared,
  // then a status chosen) must not bring the first one back (the router's functional update reads
  // the render's parameters too)
  const set = (k: string, v: string) => {
    const next = new URLSearchParams(window.location.search);
    if (v) next.set(k, v);
    else next.delete(k);
    setParams(next, { replace: true });
  };
  const scroller = useRef<HTMLDivElement>(null);
  const [imported, setImported] = useState<string | null>(null);
  const [importError, setImportError] = useState<string | null>(null);
  const onImport = async (file: File | undefined) => {
    if (!file) return;
    setImportError(null);
    try {
      const res = await api.importTape(file);
      setImported(`imported ${res.run_ids.length} run(s) from ${file.name}`);
      runs.reload();
    } catch (e) {
      setImported(null);
      setImportError(e instanceof Error ? e.message : String(e));
    }
  };
  const virtual = useVirtualizer({
    count: rows.length,
    getScrollElement: () => scroller.current,
    estimateSize: () => 37,
    overscan: 10,
  });

  return (
    <div className="runs-page">
      <aside className="panel graphs" aria-label="Graphs">
        <h2>Graphs</h2>
        <ErrorLine error={assistants.error} />
        <ul>
          <li>
            <button type="button" className={graph === "" ? "active" : ""} onClick={() => set("graph", "")}>
              All graphs
            </button>
          </li>
          {(assistants.data ?? []).map((a) => (
            <li key={a.assistant_id}>
              <button
                type="button"
                className={graph === a.graph_id ? "active" : ""}
                aria-pressed={graph === a.graph_id}
                onClick={() => set("graph", a.graph_id)}
              >
                {a.graph_id}
              </button>
              <Link to={`/ui/new?graph=${encodeURIComponent(a.graph_id)}`} aria-label={`Start a run of ${a.graph_id}`}>
                ▶
              </Link>
            </li>
          ))}
        </ul>
      </aside>
      <section className="panel runs" aria-label="Runs">
        <div className="filters" role="search">
          <label>
            Status{" "}
            <select aria-label="Filter by status" value={status} onChange={(e) => set("status", e.target.value)}>
              {STATUSES.map((s) => (
                <option key={s} value={s}>
                  {s || "any"}
                </option>
              ))}
            </select>
          </label>
          <label>
            Started{" "}
            <select aria-label="Filter by time" value={period} onChange={(e) => set("since", e.target.value)}>
              <option value="">any time</option>
              {Object.entries(PERIODS).map(([k, [label]]) => (
                <option key={k} value={k}>
                  {label}
                </option>
              ))}
            </select>
          </label>
          <label>
            Search{" "}
            <input
              aria-label="Search runs"
              placeholder="run id, thread, graph, label"
              defaultValue={text}
              onKeyDown={(e) => e.key === "Enter" && set("q", (e.target as HTMLInputElement).value)}
              onBlur={(e) => set("q", e.target.value)}
            />
          </label>
          <button type="button" onClick={runs.reload} aria-label="Refresh the runs">
            Refresh
          </button>
          <label className="file-button">
            Import a tape file{" "}
            <input
              type="file"
              aria-label="Import a tape file"
              onChange={(e) => {
                void onImport(e.target.files?.[0]);
                e.target.value = "";
              }}
            />
          </label>
          <span className="muted">{runs.data ? `${runs.data.total} runs` : runs.loading ? "loading…" : ""}</span>
          {imported && <span role="status">{imported}</span>}
        </div>
        <ErrorLine error={runs.error ?? importError} />
        <div className="table-head run-row" aria-hidden="true">
          <span>run</span>
          <span>graph</span>
          <span>kind</span>
          <span>status</span>
          <span>calls llm / tool / effect</span>
          <span>tokens</span>
          <span>duration</span>
          <span>started</span>
          <span>label</span>
        </div>
        <div ref={scroller} className="scroll runs-scroll" role="list" aria-label="Run list">
          <div style={{ height: virtual.getTotalSize(), position: "relative" }}>
            {virtual.getVirtualItems().map((item) => {
              const { run, depth } = rows[item.index];
              return (
                <Link
                  role="listitem"
                  key={run.run_id}
                  ref={virtual.measureElement}
                  data-index={item.index}
                  to={`/ui/runs/${run.run_id}`}
                  className="run-row"
                  data-run-id={run.run_id}
                  style={{ position: "absolute", top: 0, left: 0, right: 0, transform: `translateY(${item.start}px)` }}
                >
                  <span className="mono" style={{ paddingLeft: depth * 16 }}>
                    {depth > 0 ? "└ " : ""}
                    {shortId(run.run_id)}
                  </span>
                  <span>{run.graph}</span>
                  <span>{runKind(run)}</span>
                  <span>
                    <StatusBadge status={run.status} />
                  </span>
                  <span
                    className="calls-cell"
                    title={`${run.llm_calls} llm, ${run.tool_calls} tool, ${run.effect_calls} effect calls`}
                    aria-label={`${run.llm_calls} llm, ${run.tool_calls} tool, ${run.effect_calls} effect calls`}
                  >
                    {run.llm_calls} / {run.tool_calls} / {run.effect_calls}
                  </span>
                  <span>{count(run.tokens)}</span>
                  <span>{seconds(run.duration)}</span>
                  <span>{when(run.started_at)}</span>
                  <span>{run.label ? <span className="label-chip">{run.label}</span> : ""}</span>
                </Link>
              );
            })}
          </div>
          {!runs.loading && rows.length === 0 && !runs.error && (
            <p className="muted">No runs yet. Start one, or record the examples (make demo).</p>
          )}
        </div>
      </section>
    </div>
  );
}
