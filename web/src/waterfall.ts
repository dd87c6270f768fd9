// The run timeline as flat rows for a virtualised waterfall (super-steps, node tasks with their subgraphs'
// tasks nested under them, calls), and a unified diff split into two sides for the divergence view.
import type { CallSummary, StepEntry, TaskEntry, Timeline } from "./api";

export interface WaterfallRow {
  key: string;
  /** a checkpoint row is a step that ran no task: the run's input, or the input applied to the state */
  type: "step" | "checkpoint" | "task" | "call";
  depth: number;
  label: string;
  /** under the label: a call's answer, a checkpoint's meaning */
  detail?: string;
  start: number | null;
  end: number | null;
  call?: CallSummary;
  status?: string;
  checkpointId?: string | null;
  node?: string;
}

/** What a step's row says: a super-step names its nodes; a step without tasks says what its checkpoint holds. */
export function stepLabel(s: StepEntry): { type: "step" | "checkpoint"; label: string; detail?: string } {
  if (s.step === null) return { type: "step", label: "calls outside any step" };
  if (s.tasks.length > 0) {
    const nodes = [...new Set(s.tasks.map((t) => t.node || "?"))].join(", ");
    return { type: "step", label: `step ${s.step} · ${nodes}` };
  }
  if (s.source === "input" || s.step < 0) {
    return { type: "checkpoint", label: "input", detail: "checkpoint of the run's input, before any node ran" };
  }
  if (s.source === "loop" && s.step === 0) {
    return { type: "checkpoint", label: "input applied", detail: "checkpoint with the input written to the state" };
  }
  return { type: "checkpoint", label: `checkpoint ${s.step}`, detail: s.source ? `written by ${s.source}` : undefined };
}

/** A call's row label: the tool's name and arguments, or the model and the last message it was sent. */
export function callLabel(c: CallSummary): string {
  return c.preview?.request || c.name || c.kind;
}

export function waterfallRows(t: Timeline): WaterfallRow[] {
  const rows: WaterfallRow[] = [];
  const addTask = (task: TaskEntry, depth: number, checkpointId: string | null) => {
    rows.push({
      key: `t${task.task_id}|${rows.length}`,
      type: "task",
      depth,
      label: task.node || task.node_path || "(no node)",
      start: task.started_at,
      end: task.ended_at,
      status: task.status,
      node: task.node,
      checkpointId,
    });
    for (const c of task.calls) {
      rows.push({
        key: `c${c.call_id}`,
        type: "call",
        depth: depth + 1,
        label: callLabel(c),
        detail: c.error ? undefined : (c.preview?.answer ?? undefined),
        start: c.started_at,
        end: c.ended_at,
        call: c,
        node: task.node,
        checkpointId,
      });
    }
    for (const sub of task.subtasks ?? []) addTask(sub, depth + 1, checkpointId);
  };
  t.steps.forEach((s, si) => {
    const starts = s.tasks.map((x) => x.started_at).filter((x): x is number => x !== null);
    const ends = s.tasks.map((x) => x.ended_at).filter((x): x is number => x !== null);
    const head = stepLabel(s);
    rows.push({
      key: `s${si}`,
      ...head,
      depth: 0,
      start: starts.length ? Math.min(...starts) : null,
      end: ends.length ? Math.max(...ends) : null,
      checkpointId: s.checkpoint_id,
    });
    s.tasks.forEach((task) => addTask(task, 1, s.checkpoint_id));
  });
  return rows;
}

function tasksCalls(task: TaskEntry): CallSummary[] {
  return [...task.calls, ...(task.subtasks ?? []).flatMap(tasksCalls)];
}

/** Every call of the timeline, in row order (for next/previous call shortcuts). */
export function callsOf(t: Timeline | null): CallSummary[] {
  if (!t) return [];
  return t.steps.flatMap((s) => s.tasks.flatMap(tasksCalls));
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
