import { describe, expect, it } from "vitest";
import { SseParser } from "./sse";
import { runTree, runKind } from "./runTree";
import { barGeometry, callsOf, splitUnifiedDiff, waterfallRows } from "./waterfall";
import { fieldsOf, initialTexts, valueOf } from "./schemaForm";
import { layoutGraph, edgeLabel } from "./layout";
import { money, readable, seconds, shortId } from "./format";
import { errorMessage, type RunSummary, type Timeline } from "./api";

const run = (id: string, started: number, extra: Partial<RunSummary> = {}): RunSummary => ({
  run_id: id,
  thread_id: "t",
  graph: "g",
  status: "finished",
  started_at: started,
  ended_at: started + 1,
  parent_run_id: null,
  replay_of: null,
  mode: "record",
  llm_calls: 0,
  tool_calls: 0,
  effect_calls: 0,
  served_calls: 0,
  live_calls: 0,
  tokens: 0,
  error: null,
  meta: {},
  label: null,
  duration: 1,
  ...extra,
});

describe("SseParser", () => {
  it("parses messages split across chunks, with ids, events, comments and CRLF", () => {
    const p = new SseParser();
    expect(p.feed(": heartbeat\n\nid: 1\nevent: run_started\nda")).toEqual([]);
    const out = p.feed('ta: {"seq":1}\r\n\r\nid: 2\ndata: a\ndata: b\n\n');
    expect(out).toEqual([
      { id: "1", event: "run_started", data: '{"seq":1}' },
      { id: "2", event: "message", data: "a\nb" },
    ]);
  });
  it("ignores a blank line with no data", () => {
    expect(new SseParser().feed("event: x\n\n")).toEqual([]);
  });
});

describe("runTree", () => {
  it("puts replays and forks under their parent, roots newest first", () => {
    const rows = runTree([
      run("a", 1),
      run("b", 5),
      run("a-replay", 3, { replay_of: "a", mode: "flight" }),
      run("a-fork", 2, { replay_of: "a", mode: "flight", meta: { fork_of: "cp1" } }),
      run("orphan", 4, { replay_of: "gone" }),
    ]);
    expect(rows.map((r) => [r.run.run_id, r.depth])).toEqual([
      ["b", 0],
      ["orphan", 0],
      ["a", 0],
      ["a-fork", 1],
      ["a-replay", 1],
    ]);
    expect(runKind(rows[4].run)).toBe("replay (flight)");
    expect(runKind(rows[3].run)).toBe("fork (flight)");
    expect(runKind(run("c", 1, { parent_run_id: "a" }))).toBe("continued");
  });
});

const timeline: Timeline = {
  run_id: "r",
  started_at: 100,
  ended_at: 110,
  steps: [
    {
      step: 0,
      checkpoint_id: "cp0",
      tasks: [
        {
          task_id: "t1",
          node: "agent",
          node_path: "agent",
          started_at: 100,
          ended_at: 104,
          status: "finished",
          error: null,
          calls: [
            {
              call_id: "c1",
              kind: "llm",
              name: "fake",
              node_path: "agent",
              started_at: 101,
              ended_at: 103,
              duration: 2,
              source: "tape",
              tokens: 10,
              cost: 0,
              error: null,
            },
          ],
        },
      ],
    },
  ],
};

describe("waterfall", () => {
  it("flattens steps, tasks and calls", () => {
    const rows = waterfallRows(timeline);
    expect(rows.map((r) => [r.type, r.label, r.depth])).toEqual([
      ["step", "step 0 · agent", 0],
      ["task", "agent", 1],
      ["call", "fake", 2],
    ]);
    expect(rows[0].start).toBe(100);
    expect(rows[0].end).toBe(104);
    expect(callsOf(timeline).map((c) => c.call_id)).toEqual(["c1"]);
  });
  it("names checkpoints, nests a subgraph's tasks and names calls by what they are", () => {
    const call = timeline.steps[0].tasks[0].calls[0];
    const nested: Timeline = {
      ...timeline,
      steps: [
        { step: -1, checkpoint_id: "k0", source: "input", tasks: [] },
        { step: 0, checkpoint_id: "k1", source: "loop", tasks: [] },
        {
          step: 1,
          checkpoint_id: "k2",
          source: "loop",
          tasks: [
            {
              ...timeline.steps[0].tasks[0],
              node: "analyze",
              node_path: "analyze",
              calls: [],
              subtasks: [
                {
                  ...timeline.steps[0].tasks[0],
                  task_id: "t2",
                  node: "summarize",
                  node_path: "analyze/summarize",
                  calls: [
                    {
                      ...call,
                      call_id: "c2",
                      preview: { request: "fake ← [human] hi", answer: "hello", input_tokens: 3, output_tokens: 1 },
                    },
                  ],
                },
              ],
            },
          ],
        },
      ],
    };
    expect(waterfallRows(nested).map((r) => [r.type, r.label, r.depth, r.detail ?? ""])).toEqual([
      ["checkpoint", "input", 0, "checkpoint of the run's input, before any node ran"],
      ["checkpoint", "input applied", 0, "checkpoint with the input written to the state"],
      ["step", "step 1 · analyze", 0, ""],
      ["task", "analyze", 1, ""],
      ["task", "summarize", 2, ""],
      ["call", "fake ← [human] hi", 3, "hello"],
    ]);
    expect(callsOf(nested).map((c) => c.call_id)).toEqual(["c2"]);
  });
  it("places bars on the run's span", () => {
    const g = barGeometry(101, 103, [100, 110])!;
    expect(g.left).toBeCloseTo(0.1);
    expect(g.width).toBeCloseTo(0.2);
    expect(barGeometry(null, 1, [0, 1])).toBeNull();
    expect(barGeometry(5, 5, [0, 10])!.width).toBeGreaterThan(0);
  });
  it("splits a unified diff into recorded and current sides", () => {
    const { recorded, current } = splitUnifiedDiff("--- recorded\n+++ current\n@@ -1,2 +1,2 @@\n same\n-old\n+new");
    expect(recorded.map((l) => [l.text, l.changed])).toEqual([
      ["@@ -1,2 +1,2 @@", false],
      ["same", false],
      ["old", true],
    ]);
    expect(current.filter((l) => l.changed).map((l) => l.text)).toEqual(["new"]);
  });
});

describe("schemaForm", () => {
  const schema = {
    type: "object",
    required: ["topic"],
    properties: {
      topic: { type: "string", title: "Topic" },
      depth: { anyOf: [{ type: "integer" }, { type: "null" }], default: 2 },
      tags: { type: "array", items: { type: "string" } },
    },
  };
  it("reads fields and builds a value", () => {
    const fields = fieldsOf(schema);
    expect(fields.map((f) => [f.name, f.type, f.required])).toEqual([
      ["topic", "string", true],
      ["depth", "integer", false],
      ["tags", "json", false],
    ]);
    const texts = initialTexts(fields);
    expect(texts.depth).toBe("2");
    expect(valueOf(fields, { ...texts, topic: "tides", tags: '["a"]' })).toEqual({ topic: "tides", depth: 2, tags: ["a"] });
    expect(() => valueOf(fields, { topic: "x", tags: "[" })).toThrow(/not valid JSON/);
  });
  it("follows a $ref to the definitions", () => {
    const fields = fieldsOf({ $ref: "#/$defs/In", $defs: { In: { properties: { q: { type: "string" } } } } });
    expect(fields.map((f) => f.name)).toEqual(["q"]);
  });
});

describe("layoutGraph", () => {
  it("lays out nodes and marks conditional edges, running nodes and breakpoints", () => {
    const { nodes, edges } = layoutGraph(
      {
        nodes: [{ id: "__start__" }, { id: "agent" }, { id: "tools" }, { id: "__end__" }],
        edges: [
          { source: "__start__", target: "agent" },
          { source: "agent", target: "tools", conditional: true, data: "call" },
          { source: "agent", target: "__end__", conditional: true },
          { source: "tools", target: "agent" },
        ],
      },
      new Set(["agent"]),
      new Set(["tools"]),
    );
    const agent = nodes.find((n) => n.id === "agent")!;
    const start = nodes.find((n) => n.id === "__start__")!;
    expect(agent.data.running).toBe(true);
    expect(nodes.find((n) => n.id === "tools")!.data.breakpoint).toBe(true);
    expect(start.position.y).toBeLessThan(agent.position.y);
    expect(edges[1].className).toBe("edge-conditional");
    expect(edges[1].label).toBe("call");
    expect(edges[0].className).toBe("edge-plain");
    expect(edgeLabel({ label: "x" })).toBe("x");
    const sub = layoutGraph(
      { nodes: [{ id: "analyze:summarize" }, { id: "classify" }], edges: [{ source: "analyze:summarize", target: "classify" }] },
      new Set(["analyze"]),
    );
    expect(sub.nodes[0].data).toMatchObject({ label: "analyze › summarize", parent: "analyze", running: true });
    expect(sub.nodes[1].data.parent).toBeNull();
  });
});

describe("format and errors", () => {
  it("formats", () => {
    expect(seconds(0.25)).toBe("250 ms");
    expect(seconds(2)).toBe("2.00 s");
    expect(seconds(null)).toBe("–");
    expect(money(0.5)).toBe("$0.50");
    expect(shortId("abcdefghijk")).toBe("abcdefgh");
    expect(
      readable({ messages: [{ lc: 1, type: "constructor", id: ["x", "AIMessage"], kwargs: { content: "hi" } }], n: 1 }),
    ).toEqual({ messages: [{ "(class)": "AIMessage", content: "hi" }], n: 1 });
  });
  it("takes the server's message from an error body", () => {
    expect(errorMessage(404, '{"error":"x","detail":"no run abc; list them with GET /graphtape/runs","status":404}')).toBe(
      "no run abc; list them with GET /graphtape/runs",
    );
    expect(errorMessage(502, "")).toBe("HTTP 502");
  });
});
