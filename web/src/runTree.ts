// The runs list shows replays, forks and recoveries as branches under the run they came from.
import type { RunSummary } from "./api";

export interface RunRow {
  run: RunSummary;
  depth: number;
}

export function parentOf(r: RunSummary): string | null {
  return r.replay_of ?? r.parent_run_id ?? null;
}

/** Order runs as a tree: each root (newest first) followed by its descendants (oldest first), indented. */
export function runTree(runs: RunSummary[]): RunRow[] {
  const byId = new Map(runs.map((r) => [r.run_id, r]));
  const children = new Map<string, RunSummary[]>();
  const roots: RunSummary[] = [];
  for (const r of runs) {
    const p = parentOf(r);
    if (p && byId.has(p) && p !== r.run_id) {
      const list = children.get(p) ?? [];
      list.push(r);
      children.set(p, list);
    } else roots.push(r);
  }
  roots.sort((a, b) => b.started_at - a.started_at);
  const out: RunRow[] = [];
  const seen = new Set<string>();
  const walk = (r: RunSummary, depth: number) => {
    if (seen.has(r.run_id)) return;
    seen.add(r.run_id);
    out.push({ run: r, depth });
    const kids = (children.get(r.run_id) ?? []).slice().sort((a, b) => a.started_at - b.started_at);
    for (const k of kids) walk(k, depth + 1);
  };
  for (const r of roots) walk(r, 0);
  return out;
}

/** The kind of a run as a word: recording, replay, fork, override, continued, ... */
export function runKind(r: RunSummary): string {
  const meta = r.meta ?? {};
  const mode = r.mode && r.mode !== "record" ? ` (${r.mode})` : "";
  if (meta.fork_of) return `fork${mode}`;
  if (meta.override_of) return `override${mode}`;
  if (meta.invalidate_from) return `invalidate${mode}`;
  if (r.mode === "recover" || meta.recovers) return "recovery";
  if (r.replay_of) return `replay${mode}`;
  if (r.parent_run_id) return "continued";
  return r.mode || "record";
}

/** A run whose calls may be served from a tape (a replay in any mode): only then do "served" and "live" say
 * something; every call of a recording (or of the recovery that finished one) was made live. */
export function isReplay(r: RunSummary): boolean {
  return Boolean(r.mode) && r.mode !== "record" && r.mode !== "recover";
}
