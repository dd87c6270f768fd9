// The HTTP client of the Studio UI: the LangGraph API and graphtape's tape API (see /work docs/server.md,
// docs/server-api.md). Every error becomes an ApiError carrying the server's one-line message.

export interface RunSummary {
  run_id: string;
  thread_id: string;
  graph: string;
  status: string;
  started_at: number;
  ended_at: number | null;
  parent_run_id: string | null;
  replay_of: string | null;
  mode: string;
  llm_calls: number;
  tool_calls: number;
  effect_calls: number;
  served_calls: number;
  live_calls: number;
  tokens: number;
  error: string | null;
  meta: Record<string, unknown>;
  label: string | null;
  duration: number | null;
}

export interface Savings {
  served: number;
  live: number;
  tokens_saved: number;
  cost_saved: number;
  time_saved: number;
}

export interface PendingInterrupt {
  id: string;
  value: unknown;
  node: string | null;
}

export interface RunDetail {
  run: RunSummary;
  input: unknown;
  output: unknown;
  children: RunSummary[];
  savings: Savings | null;
  interrupts: PendingInterrupt[];
  divergence: Record<string, unknown> | null;
}

export type CallSource = "tape" | "live" | "override" | "diverged" | "recorded";

export interface CallSummary {
  call_id: string;
  kind: "llm" | "tool" | "effect";
  name: string;
  node_path: string;
  started_at: number | null;
  ended_at: number | null;
  duration: number | null;
  source: CallSource;
  tokens: number | null;
  cost: number | null;
  error: string | null;
  /** in a timeline (the run's first 1,000 calls): clipped lines saying what was asked and answered */
  preview?: CallPreview | null;
}

export interface CallPreview {
  /** the tool's or effect's name and arguments, or the model and the last message it was sent */
  request: string | null;
  /** the first line of the answer */
  answer: string | null;
  input_tokens: number | null;
  output_tokens: number | null;
}

export interface TaskEntry {
  task_id: string;
  node: string;
  node_path: string;
  started_at: number | null;
  ended_at: number | null;
  status: "finished" | "failed" | "interrupted" | "running";
  error: string | null;
  calls: CallSummary[];
  /** the tasks of the subgraph this task ran */
  subtasks?: TaskEntry[];
}

export interface StepEntry {
  step: number | null;
  checkpoint_id: string | null;
  /** what wrote the checkpoint: input (step -1), loop (a super-step; step 0 applied the input), update, fork */
  source?: string | null;
  tasks: TaskEntry[];
}

export interface Timeline {
  run_id: string;
  started_at: number;
  ended_at: number | null;
  steps: StepEntry[];
}

export interface TapeEvent {
  seq: number;
  kind: string;
  ts: number;
  data: Record<string, unknown>;
}

export interface CallDetail {
  call: CallSummary;
  request: Record<string, unknown> | null;
  response: unknown;
  usage: Record<string, unknown> | null;
  latency: number | null;
  recorded_in: string | null;
}

export interface HistoryEntry {
  checkpoint_id: string;
  parent_id: string | null;
  thread_id: string;
  step: number | null;
  source: string | null;
  created_at: number | string | null;
  run_id: string | null;
  writers: string[];
  calls: Record<string, unknown>[];
  next?: string[];
}

export interface History {
  target: string;
  kind: string;
  thread_id: string;
  run_id: string | null;
  entries: HistoryEntry[];
  branches: Record<string, unknown>[];
}

export interface CheckpointState {
  checkpoint_id: string;
  thread_id: string;
  values: unknown;
  next: string[];
  metadata: Record<string, unknown>;
  parent_id: string | null;
  step: number | null;
}

export interface DiffChange {
  op: "added" | "removed" | "changed" | "appended";
  path: string;
  pointer: string;
  old?: unknown;
  new?: unknown;
  at?: number;
  count?: number;
}

export interface DiffResult {
  a: string;
  b: string;
  equal: boolean;
  changes: DiffChange[];
  patch: Record<string, unknown>[];
}

export interface Assistant {
  assistant_id: string;
  graph_id: string;
  name?: string;
}

export interface GraphNode {
  id: string;
  type?: string;
  data?: unknown;
}

export interface GraphEdge {
  source: string;
  target: string;
  conditional?: boolean;
  data?: unknown;
}

export interface GraphShape {
  nodes: GraphNode[];
  edges: GraphEdge[];
}

export interface Breakpoint {
  type: "before" | "after" | "call";
  node?: string | null;
  kind?: "llm" | "tool" | "effect" | null;
  name?: string | null;
}

export interface DebugPause {
  kind: "before" | "after" | "call" | "checkpoint" | "end";
  node: string | null;
  node_path: string | null;
  step: number | null;
  call: CallSummary | null;
  request: unknown;
  recorded_output: unknown;
  state: unknown;
  description: string;
}

export interface DebugSession {
  session_id: string;
  run_id: string | null;
  status: "paused" | "running" | "finished" | "stopped" | "failed";
  pause: DebugPause | null;
  breakpoints: Breakpoint[];
  result: Record<string, unknown> | null;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const TOKEN_KEY = "graphtape.token";

/** The bearer token for a server that asks for one (`?token=` in the address, kept in localStorage). */
export function token(): string | null {
  const fromUrl = new URLSearchParams(window.location.search).get("token");
  if (fromUrl) {
    localStorage.setItem(TOKEN_KEY, fromUrl);
    return fromUrl;
  }
  return localStorage.getItem(TOKEN_KEY);
}

export function authHeaders(): Record<string, string> {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

/** The server's message from an error body `{"error", "detail", "status"}`, else the status line. */
export function errorMessage(status: number, body: string): string {
  try {
    const parsed = JSON.parse(body) as { detail?: unknown; error?: unknown };
    const text = parsed.detail ?? parsed.error;
    if (typeof text === "string" && text) return text;
  } catch {
    // not JSON: fall through
  }
  return body.trim().slice(0, 300) || `HTTP ${status}`;
}

export async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json", ...authHeaders() };
  const init: RequestInit = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  if (!res.ok) throw new ApiError(res.status, errorMessage(res.status, text));
  return (text ? JSON.parse(text) : null) as T;
}

const q = (params: Record<string, string | number | boolean | null | undefined>): string => {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") s.set(k, String(v));
  const text = s.toString();
  return text ? `?${text}` : "";
};

const enc = encodeURIComponent;

/** What runs started here stream: the state after each step, node updates, and model tokens. */
export const STREAM_MODES = ["values", "updates", "messages-tuple"];

export const api = {
  assistants: () => request<Assistant[]>("POST", "/assistants/search", { limit: 100 }),
  graph: (assistant: string, xray = false) =>
    request<GraphShape>("GET", `/assistants/${enc(assistant)}/graph?xray=${xray}`),
  schemas: (assistant: string) =>
    request<{ input_schema: Record<string, unknown> | null; state_schema: Record<string, unknown> | null }>(
      "GET",
      `/assistants/${enc(assistant)}/schemas`,
    ),
  runs: (filter: { graph?: string; status?: string; q?: string; since?: number; limit?: number; offset?: number }) =>
    request<{ runs: RunSummary[]; total: number }>("GET", `/graphtape/runs${q({ limit: 200, ...filter })}`),
  run: (id: string) => request<RunDetail>("GET", `/graphtape/runs/${enc(id)}`),
  timeline: (id: string) => request<Timeline>("GET", `/graphtape/runs/${enc(id)}/timeline`),
  events: (id: string, after = 0, limit = 1000) =>
    request<{ events: TapeEvent[]; done: boolean }>("GET", `/graphtape/runs/${enc(id)}/events${q({ after, limit })}`),
  call: (id: string, callId: string) => request<CallDetail>("GET", `/graphtape/runs/${enc(id)}/calls/${enc(callId)}`),
  label: (id: string, label: string | null) =>
    request<RunSummary>("PUT", `/graphtape/runs/${enc(id)}/label`, { label, note: null }),
  history: (target: string) => request<History>("GET", `/graphtape/history/${enc(target)}`),
  checkpoint: (threadId: string, checkpointId: string) =>
    request<CheckpointState>("GET", `/graphtape/threads/${enc(threadId)}/checkpoints/${enc(checkpointId)}`),
  diff: (threadId: string, a: string, b: string) =>
    request<DiffResult>("GET", `/graphtape/diff${q({ a, b, thread_id: threadId })}`),
  replay: (id: string, mode: "strict" | "flight") =>
    request<{ run_id: string; thread_id: string }>("POST", `/graphtape/runs/${enc(id)}/replay`, {
      mode,
      from_checkpoint: null,
      allow_live_effects: false,
    }),
  fork: (threadId: string, checkpointId: string, values: unknown, asNode: string | null, mode: "flight" | "strict") =>
    request<{ run_id: string; thread_id: string }>(
      "POST",
      `/graphtape/threads/${enc(threadId)}/checkpoints/${enc(checkpointId)}/fork`,
      { values, as_node: asNode, mode, allow_live_effects: false },
    ),
  override: (id: string, callId: string, output: unknown, mode: "flight" | "strict") =>
    request<{ run_id: string; thread_id: string }>(
      "POST",
      `/graphtape/runs/${enc(id)}/calls/${enc(callId)}/override`,
      { output, mode, from_start: false },
    ),
  invalidate: (id: string, node: string, allowLiveEffects = false) =>
    request<{ run_id: string }>("POST", `/graphtape/runs/${enc(id)}/invalidate`, {
      node,
      allow_live_effects: allowLiveEffects,
    }),
  importTape: async (file: Blob): Promise<{ run_ids: string[] }> => {
    const res = await fetch("/graphtape/import", {
      method: "POST",
      headers: { "Content-Type": "application/octet-stream", ...authHeaders() },
      body: file,
    });
    const text = await res.text();
    if (!res.ok) throw new ApiError(res.status, errorMessage(res.status, text));
    return JSON.parse(text) as { run_ids: string[] };
  },
  createThread: () => request<{ thread_id: string }>("POST", "/threads", {}),
  startRun: (threadId: string, assistant: string, body: Record<string, unknown>) =>
    request<{ run_id: string; thread_id: string }>("POST", `/threads/${enc(threadId)}/runs`, {
      assistant_id: assistant,
      ...body,
    }),
  threadState: (threadId: string) =>
    request<{ next: string[]; interrupts?: { id?: string; value: unknown }[] }>(
      "GET",
      `/threads/${enc(threadId)}/state`,
    ),
  cancel: (threadId: string, runId: string) =>
    request<unknown>("POST", `/threads/${enc(threadId)}/runs/${enc(runId)}/cancel`),
  debugStart: (runId: string, mode: "strict" | "flight", breakpoints: Breakpoint[]) =>
    request<DebugSession>("POST", "/graphtape/debug", { run_id: runId, mode, breakpoints }),
  debugAct: (sessionId: string, action: "continue" | "step" | "step_node" | "step_call" | "live" | "stop") =>
    request<DebugSession>("POST", `/graphtape/debug/${enc(sessionId)}/${action}`),
  debugUse: (sessionId: string, output: unknown) =>
    request<DebugSession>("POST", `/graphtape/debug/${enc(sessionId)}/use`, { output }),
  debugBreakpoints: (sessionId: string, breakpoints: Breakpoint[]) =>
    request<DebugSession>("PUT", `/graphtape/debug/${enc(sessionId)}/breakpoints`, { breakpoints }),
  debugEnd: (sessionId: string) => request<unknown>("DELETE", `/graphtape/debug/${enc(sessionId)}`),
};
