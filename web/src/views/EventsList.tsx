// The run's raw tape events as they arrive (virtualised: a run with 10,000 events scrolls smoothly).
import { useRef, useState } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { TapeEvent } from "../api";
import { when } from "../format";
import { JsonTree } from "../ui";

export function EventsList({ events }: { events: TapeEvent[] }) {
  const scroller = useRef<HTMLDivElement>(null);
  const [open, setOpen] = useState<number | null>(null);
  const virtual = useVirtualizer({
    count: events.length,
    getScrollElement: () => scroller.current,
    estimateSize: () => 26,
    overscan: 20,
  });
  const chosen = open === null ? null : events.find((e) => e.seq === open);
  return (
    <div className="events">
      <p className="muted" aria-live="polite">
        <span data-testid="event-count">{events.length}</span> events
      </p>
      <div ref={scroller} className="scroll events-scroll" role="list" aria-label="Tape events">
        <div style={{ height: virtual.getTotalSize(), position: "relative" }}>
          {virtual.getVirtualItems().map((item) => {
            const ev = events[item.index];
            return (
              <button
                type="button"
                role="listitem"
                key={ev.seq}
                className={`ev-row${open === ev.seq ? " selected" : ""}`}
                style={{ position: "absolute", top: 0, left: 0, right: 0, transform: `translateY(${item.start}px)` }}
                onClick={() => setOpen(open === ev.seq ? null : ev.seq)}
              >
                <span className="mono">{ev.seq}</span>
                <span>{ev.kind}</span>
                <span className="muted">{when(ev.ts)}</span>
                <span className="muted ev-brief">{brief(ev.data)}</span>
              </button>
            );
          })}
        </div>
      </div>
      {chosen && (
        <div className="panel">
          <JsonTree value={chosen.data} label={`event ${chosen.seq}`} />
        </div>
      )}
    </div>
  );
}

function brief(data: Record<string, unknown> | undefined): string {
  if (!data) return "";
  const parts = ["node", "name", "status", "step"].filter((k) => data[k] !== undefined && data[k] !== null);
  return parts.map((k) => `${k}=${String(data[k])}`).join(" ");
}
