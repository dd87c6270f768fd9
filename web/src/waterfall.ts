// The run timeline as flat rows for a virtualised waterfall (super-steps, node tasks, calls), and a unified
// diff split into two sides for the divergence view.
import type { CallSummary, Timeline } from "./api";

export interface WaterfallRow {
  key: string;
  type: "step" | "task" | "call";
  depth: number;
  label: string;
  start: number | null;
  end: number | null;
  call?: CallSummary;
  status?: string;
  checkpointId?: string | null;
  node?: string;
}

export function waterfallRows(t: Timeline): WaterfallRow[] {
  const rows: WaterfallRow[] = [];
  t.steps.forEach((s, si) => {
    const starts = s.tasks.map((x) => x.started_at).filter((x): x is number => x !== null);
    const ends = s.tasks.map((x) => x.ended_at).filter((x): x is number => x !== null);
    rows.push({
      key: `s${si}`,
      type: "step",
      depth: 0,
      label: s.step === null ? "input" : `step ${s.step}`,
      start: starts.length ? Math.min(...starts) : null,
      end: ends.length ? Math.max(...ends) : null,
      checkpointId: s.checkpoint_id,
    });
    s.tasks.forEach((task) => {
      rows.push({
        key: `t${task.task_id}`,
        type: "task",
        depth: 1,
        label: task.node_path || task.node,
        start: task.started_at,
        end: task.ended_at,
        status: task.status,
        node: task.node,
        checkpointId: s.checkpoint_id,
      });
      for (const c of task.calls) {
        rows.push({
          key: `c${c.call_id}`,
          type: "call",
          depth: 2,
          label: `${c.kind} ${c.name}`,
          start: c.started_at,
          end: c.ended_at,
          call: c,
          node: task.node,
          checkpointId: s.checkpoint_id,
        });
      }
    });
  });
  return rows;
}

/** Every call of the timeline, in order (for next/previous call shortcuts). */
export function callsOf(t: Timeline | null): CallSummary[] {
  if (!t) return [];
  return t.steps.flatMap((s) => s.tasks.flatMap((x) => x.calls));
}

/** A bar's left offset and width, as fractions of the run's span (a minimum width keeps it visible). */
export function barGeometry(
  start: number | null,
  end: number | null,
  span: [number, number],
): { left: number; width: number } | null {
  if (start === null) return null;
  const [t0, t1] = span;
  const total = Math.max(t1 - t0, 1e-6);
  const left = Math.min(Math.max((start - t0) / total, 0), 1);
  const right = Math.min(Math.max(((end ?? t1) - t0) / total, left), 1);
  return { left, width: Math.max(right - left, 0.004) };
}

export interface DiffLine {
  text: string;
  changed: boolean;
}

/** A unified diff (recorded against current) as its two sides, the changed lines flagged. */
export function splitUnifiedDiff(diff: string): { recorded: DiffLine[]; current: DiffLine[] } {
  const recorded: DiffLine[] = [];
  const current: DiffLine[] = [];
  for (const line of diff.split("\n")) {
    if (line.startsWith("---") || line.startsWith("+++")) continue;
    if (line.startsWith("@@")) {
      recorded.push({ text: line, changed: false });
      current.push({ text: line, changed: false });
    } else if (line.startsWith("-")) recorded.push({ text: line.slice(1), changed: true });
    else if (line.startsWith("+")) current.push({ text: line.slice(1), changed: true });
    else {
      const text = line.startsWith(" ") ? line.slice(1) : line;
      // keep both sides aligned on context lines
      while (recorded.length < current.length) recorded.push({ text: "", changed: false });
      while (current.length < recorded.length) current.push({ text: "", changed: false });
      recorded.push({ text, changed: false });
      current.push({ text, changed: false });
    }
  }
  return { recorded, current };
}
