// Time travel on a run's thread: the checkpoints (history), the state at the selected one (tree, raw JSON,
// copy), a diff against a second checkpoint, and a fork from the selected checkpoint with edited values.
import { useEffect, useMemo, useState } from "react";
import { create as createDiffer } from "jsondiffpatch";
import { format as htmlFormat } from "jsondiffpatch/formatters/html";
import "jsondiffpatch/formatters/styles/html.css";
import { api, type DiffResult } from "../api";
import { pretty, readable, shortId, when } from "../format";
import { CopyButton, ErrorLine, JsonEditor, JsonTree, useLoad } from "../ui";

export function StatePanel({
  runId,
  threadId,
  checkpoint,
  compare,
  onSelect,
  onFork,
}: {
  runId: string;
  threadId: string;
  checkpoint: string | null;
  compare: string | null;
  onSelect: (checkpoint: string | null, compare: string | null) => void;
  onFork: (runId: string) => void;
}) {
  const history = useLoad(() => api.history(runId), `history:${runId}`);
  const entries = useMemo(() => history.data?.entries ?? [], [history.data]);
  const current = checkpoint ?? entries[entries.length - 1]?.checkpoint_id ?? null;
  return (
    <div className="state-panel">
      <div className="checkpoints" aria-label="Checkpoints">
        <h3>Checkpoints</h3>
        <ErrorLine error={history.error} />
        <ol>
          {entries.map((e) => (
            <li key={e.checkpoint_id} className={e.checkpoint_id === current ? "active" : ""}>
              <button
                type="button"
                aria-label={`Checkpoint step ${e.step ?? "?"} ${shortId(e.checkpoint_id)}`}
                aria-current={e.checkpoint_id === current}
                onClick={() => onSelect(e.checkpoint_id, compare)}
              >
                <span className="mono">{e.step ?? "–"}</span> {e.source ?? ""}{" "}
                <span className="muted">{e.writers.join(", ") || (e.next ?? []).join(", ")}</span>
              </button>
              <label className="compare">
                <input
                  type="radio"
                  name="compare"
                  aria-label={`Compare with step ${e.step ?? "?"} ${shortId(e.checkpoint_id)}`}
                  checked={compare === e.checkpoint_id}
                  onChange={() => onSelect(current, e.checkpoint_id)}
                />
                diff
              </label>
            </li>
          ))}
        </ol>
      </div>
      <div className="state-main">
        {current && compare && compare !== current ? (
          <DiffView threadId={threadId} a={compare} b={current} onClose={() => onSelect(current, null)} />
        ) : null}
        {current && <Inspector threadId={threadId} checkpointId={current} onFork={onFork} />}
      </div>
    </div>
  );
}

function Inspector({
  threadId,
  checkpointId,
  onFork,
}: {
  threadId: string;
  checkpointId: string;
  onFork: (runId: string) => void;
}) {
  const state = useLoad(() => api.checkpoint(threadId, checkpointId), `cp:${threadId}:${checkpointId}`);
  const [view, setView] = useState<"tree" | "raw">("tree");
  const [forking, setForking] = useState(false);
  const raw = state.data ? pretty(state.data.values) : "";
  return (
    <section className="panel inspector" aria-label="State inspector">
      <header className="panel-head">
        <h3>
          State at <span className="mono">{shortId(checkpointId, 12)}</span>
          {state.data && (
            <span className="muted">
              {" "}
              step {state.data.step ?? "–"} · next: {state.data.next.join(", ") || "(end)"} ·{" "}
              {when((state.data.metadata?.created_at as string | undefined) ?? null)}
            </span>
          )}
        </h3>
        <div className="panel-actions">
          <button type="button" aria-pressed={view === "tree"} onClick={() => setView("tree")}>
            Tree
          </button>
          <button type="button" aria-pressed={view === "raw"} onClick={() => setView("raw")}>
            Raw JSON
          </button>
          <CopyButton text={raw} label="Copy state" />
          <button type="button" onClick={() => setForking(!forking)} aria-expanded={forking}>
            Fork from here
          </button>
        </div>
      </header>
      <ErrorLine error={state.error} />
      {state.data && forking && (
        <ForkEditor
          threadId={threadId}
          checkpointId={checkpointId}
          initial={raw}
          nodes={state.data.next}
          onFork={onFork}
        />
      )}
      {state.data &&
        (view === "tree" ? (
          <JsonTree value={readable(state.data.values)} label="state" />
        ) : (
          <JsonEditor value={raw} readOnly label="Raw state JSON" height="400px" />
        ))}
    </section>
  );
}

function ForkEditor({
  threadId,
  checkpointId,
  initial,
  nodes,
  onFork,
}: {
  threadId: string;
  checkpointId: string;
  initial: string;
  nodes: string[];
  onFork: (runId: string) => void;
}) {
  const [text, setText] = useState(initial);
  const [asNode, setAsNode] = useState("");
  const [mode, setMode] = useState<"flight" | "strict">("flight");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => setText(initial), [initial]);
  const submit = async () => {
    let values: unknown;
    try {
      values = JSON.parse(text);
    } catch (e) {
      setError(`the state is not valid JSON: ${e instanceof Error ? e.message : e}`);
      return;
    }
    setBusy(true);
    try {
      const edited = text.trim() === initial.trim() ? null : values;
      const res = await api.fork(threadId, checkpointId, edited, asNode || null, mode);
      onFork(res.run_id);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="fork-editor" aria-label="Fork editor">
      <p className="muted">
        Edit the state, then fork: a new run continues from this checkpoint with these values (checked against the
        graph's state schema).
      </p>
      <JsonEditor value={text} onChange={setText} label="Fork state editor" height="240px" />
      <div className="row">
        <label>
          as node{" "}
          <input aria-label="As node" list="fork-nodes" value={asNode} onChange={(e) => setAsNode(e.target.value)} />
          <datalist id="fork-nodes">
            {nodes.map((n) => (
              <option key={n} value={n} />
            ))}
          </datalist>
        </label>
        <label>
          mode{" "}
          <select aria-label="Fork mode" value={mode} onChange={(e) => setMode(e.target.value as "flight" | "strict")}>
            <option value="flight">flight</option>
            <option value="strict">strict</option>
          </select>
        </label>
        <button type="button" disabled={busy} onClick={submit}>
          Start fork
        </button>
      </div>
      <ErrorLine error={error} />
    </div>
  );
}

function DiffView({ threadId, a, b, onClose }: { threadId: string; a: string; b: string; onClose: () => void }) {
  const diff = useLoad<DiffResult>(() => api.diff(threadId, a, b), `diff:${a}:${b}`);
  const left = useLoad(() => api.checkpoint(threadId, a), `cp:${threadId}:${a}`);
  const right = useLoad(() => api.checkpoint(threadId, b), `cp:${threadId}:${b}`);
  const [visual, setVisual] = useState(false);
  const html = useMemo(() => {
    if (!visual || !left.data || !right.data) return "";
    const delta = createDiffer({ objectHash: (o: object) => JSON.stringify(o) }).diff(left.data.values, right.data.values);
    return delta ? htmlFormat(delta, left.data.values) ?? "" : "<p>no differences</p>";
  }, [visual, left.data, right.data]);
  return (
    <section className="panel diff" aria-label="Checkpoint diff">
      <header className="panel-head">
        <h3>
          Diff <span className="mono">{shortId(a, 12)}</span> → <span className="mono">{shortId(b, 12)}</span>
        </h3>
        <div className="panel-actions">
          <button type="button" aria-pressed={visual} onClick={() => setVisual(!visual)}>
            {visual ? "Changes" : "Side by side"}
          </button>
          <button type="button" onClick={onClose} aria-label="Close the diff">
            Close
          </button>
        </div>
      </header>
      <ErrorLine error={diff.error} />
      {diff.data && !visual && (
        <>
          {diff.data.equal && <p>No differences.</p>}
          <ul className="changes">
            {diff.data.changes.map((c, i) => (
              <li key={i} className={`chg chg-${c.op}`}>
                <span className="op">{c.op === "removed" ? "−" : c.op === "changed" ? "~" : "+"}</span>
                <span className="mono">{c.path}</span>
                {c.op === "changed" && (
                  <span>
                    : <del>{JSON.stringify(c.old)}</del> → <ins>{JSON.stringify(c.new)}</ins>
                  </span>
                )}
                {c.op === "removed" && (
                  <span>
                    : <del>{JSON.stringify(c.old)}</del>
                  </span>
                )}
                {(c.op === "added" || c.op === "appended") && (
                  <span>
                    : <ins>{JSON.stringify(c.new)}</ins>
                  </span>
                )}
              </li>
            ))}
          </ul>
        </>
      )}
      {/* jsondiffpatch's HTML formatter escapes every value it prints */}
      {visual && <div className="jdp" dangerouslySetInnerHTML={{ __html: html }} />}
    </section>
  );
}
