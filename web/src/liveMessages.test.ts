import { describe, expect, it } from "vitest";
import { addPart, type LiveMessage } from "./liveMessages";

describe("addPart", () => {
  it("grows one message per id from its chunks", () => {
    let m: LiveMessage[] = [];
    const meta = { langgraph_node: "report" };
    m = addPart(m, [{ id: "a", type: "AIMessageChunk", content: "Tides " }, meta]);
    m = addPart(m, [{ id: "b", type: "AIMessageChunk", content: "Other" }, { langgraph_node: "plan" }]);
    m = addPart(m, [{ id: "a", type: "AIMessageChunk", content: [{ type: "text", text: "rise." }] }, meta]);
    expect(m).toEqual([
      { id: "a", node: "report", type: "ai", text: "Tides rise.", toolCalls: [] },
      { id: "b", node: "plan", type: "ai", text: "Other", toolCalls: [] },
    ]);
  });
  it("keeps tool call names and ignores what is not a part", () => {
    const m = addPart([], [{ id: "t", type: "AIMessageChunk", content: "", tool_call_chunks: [{ name: "lookup" }] }, {}]);
    expect(m[0].toolCalls).toEqual(["lookup"]);
    expect(addPart(m, { not: "a part" })).toBe(m);
  });
});
