// The run's timeline as a waterfall: super-steps (named by their nodes), node tasks (a subgraph's tasks nested
// under the task that ran it) and their calls, each a bar on the run's time axis with its duration. A call row
// says what the call was (the tool and its arguments, the model and the last message it was sent), previews
// the answer, and shows its tokens and a badge saying where the answer came from. Virtualised, rows measured.
import { useEffect, useMemo, useRef } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { CallSummary, Timeline } from "../api";
import { count, seconds } from "../format";
import { barGeometry, waterfallRows } from "../waterfall";
import { ErrorLine, SourceBadge, StatusBadge } from "../ui";

export function TimelineView({
  timeline,
  error,
  selected,
  onSelect,
  onCheckpoint,
}: {
  timeline: Timeline | null;
  error: string | null;
  selected: string | null;
  onSelect: (callId: string) => void;
  onCheckpoint: (checkpointId: string) => void;
}) {
  const rows = useMemo(() => (timeline ? waterfallRows(timeline) : []), [timeline]);
  const span = useMemo<[number, number]>(() => {
    if (!timeline) return [0, 1];
    const ends = rows.map((r) => r.end ?? r.start ?? 0);
    const end = timeline.ended_at ?? Math.max(timeline.started_at, ...ends, Date.now() / 1000);
    return [timeline.started_at, end];
  }, [timeline, rows]);
  const scroller = useRef<HTMLDivElement>(null);
  const virtual = useVirtualizer({
    count: rows.length,
    getScrollElement: () => scroller.current,
    estimateSize: (i) => (rows[i]?.detail ? 44 : 30),
    overscan: 12,
  });
  const selectedIndex = rows.findIndex((r) => r.call?.call_id === selected);
  useEffect(() => {
    if (selectedIndex >= 0) virtual.scrollToIndex(selectedIndex, { align: "auto" });
  }, [selectedIndex, virtual]);

  return (
    <div className="timeline">
      <ErrorLine error={error} />
      {!timeline && !error && <p className="muted">loading…</p>}
      {timeline && rows.length === 0 && <p className="muted">No steps recorded yet.</p>}
      <div ref={scroller} className="scroll timeline-scroll" role="tree" aria-label="Timeline">
        <div style={{ height: virtual.getTotalSize(), position: "relative" }}>
          {virtual.getVirtualItems().map((item) => {
            const row = rows[item.index];
            const bar = barGeometry(row.start, row.end, span);
            const dur = row.start !== null && row.end !== null ? row.end - row.start : null;
            const isSel = row.call && row.call.call_id === selected;
            const onClick = () => {
              if (row.call) onSelect(row.call.call_id);
              else if (row.checkpointId) onCheckpoint(row.checkpointId);
            };
            return (
              <div
                key={row.key}
                ref={virtual.measureElement}
                data-index={item.index}
                role="treeitem"
                aria-level={row.depth + 1}
                aria-selected={Boolean(isSel)}
                tabIndex={0}
                className={`wf-row wf-${row.type}${isSel ? " selected" : ""}`}
                data-call-id={row.call?.call_id}
                style={{ position: "absolute", top: 0, left: 0, right: 0, transform: `translateY(${item.start}px)` }}
                onClick={onClick}
                onKeyDown={(e) => e.key === "Enter" && onClick()}
              >
                <span className="wf-label" style={{ paddingLeft: row.depth * 14 }}>
                  <span className="wf-line">
                    {row.call && <span className={`kind kind-${row.call.kind}`}>{row.call.kind}</span>}
                    {row.type === "checkpoint" && <span className="kind kind-checkpoint">checkpoint</span>}
                    <span className="wf-name" title={row.label}>
                      {row.label}
                    </span>
                    {row.call && <SourceBadge source={row.call.source} />}
                    {row.status && row.status !== "finished" && <StatusBadge status={row.status} />}
                    {row.call?.error && <span className="badge status-failed">error</span>}
                  </span>
                  {(row.detail || row.call?.error) && (
                    <span className="wf-detail" title={row.call?.error ?? row.detail}>
                      {row.call ? "→ " : ""}
                      {row.call?.error ?? row.detail}
                    </span>
                  )}
                </span>
                <span className="wf-track">
                  {bar && (
                    <span
                      className={`wf-bar bar-${row.call?.source ?? row.type}`}
                      style={{ left: `${bar.left * 100}%`, width: `${bar.width * 100}%` }}
                    />
                  )}
                </span>
                <span className="wf-tokens">{row.call ? tokensOf(row.call) : ""}</span>
                <span className="wf-dur">{seconds(dur)}</span>
              </div>
            );
          })}
        </div>
      </div>
    </div>
  );
}

/** A call's tokens: input and output when its answer reported them, else the total. */
function tokensOf(c: CallSummary): string {
  const p = c.preview;
  if (p && (p.input_tokens != null || p.output_tokens != null)) {
    return `${count(p.input_tokens ?? 0)} in · ${count(p.output_tokens ?? 0)} out`;
  }
  return c.tokens ? `${count(c.tokens)} tok` : "";
}
