// The run's timeline as a waterfall: super-steps, node tasks and their calls, each a bar on the run's time
// axis with its duration; every call carries a badge saying where its answer came from. Virtualised.
import { useEffect, useMemo, useRef } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { Timeline } from "../api";
import { seconds } from "../format";
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
    estimateSize: () => 30,
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
                  {row.label}
                  {row.call && <SourceBadge source={row.call.source} />}
                  {row.status && row.status !== "finished" && <StatusBadge status={row.status} />}
                  {row.call?.error && <span className="badge status-failed">error</span>}
                </span>
                <span className="wf-track">
                  {bar && (
                    <span
                      className={`wf-bar bar-${row.call?.source ?? row.type}`}
                      style={{ left: `${bar.left * 100}%`, width: `${bar.width * 100}%` }}
                    />
                  )}
                </span>
                <span className="wf-dur">{seconds(dur)}</span>
              </div>
            );
          })}
        </div>
      </div>
    </div>
  );
}
