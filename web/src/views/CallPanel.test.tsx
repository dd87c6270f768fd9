import { describe, expect, it } from "vitest";
import { render, screen } from "@testing-library/react";
import { chatMessage, DivergenceView } from "./CallPanel";

describe("chatMessage", () => {
  it("reads LangChain and OpenAI message shapes", () => {
    expect(chatMessage({ type: "human", content: "hi" })).toEqual({ role: "human", text: "hi", toolCalls: [] });
    expect(chatMessage({ role: "assistant", content: [{ type: "text", text: "a" }, "b"] }).text).toBe("a\nb");
    const ai = chatMessage({ type: "ai", content: "", tool_calls: [{ name: "lookup", args: { id: 1 } }] });
    expect(ai.toolCalls).toHaveLength(1);
    const lc = chatMessage({ lc: 1, type: "constructor", id: ["langchain", "schema", "messages", "AIMessage"], kwargs: { content: "done", type: "ai" } });
    expect(lc).toEqual({ role: "ai", text: "done", toolCalls: [] });
    const untyped = chatMessage({ lc: 1, type: "constructor", id: ["x", "HumanMessage"], kwargs: { content: "q" } });
    expect(untyped.role).toBe("human");
  });
});

describe("DivergenceView", () => {
  it("shows both sides with the changed lines marked", () => {
    const { container } = render(
      <DivergenceView divergence={{ message: "prompt changed", diff: "@@ -1 +1 @@\n-old prompt\n+new prompt" }} />,
    );
    expect(screen.getByText("prompt changed")).toBeTruthy();
    expect(container.querySelector(".line-del")!.textContent).toBe("old prompt");
    expect(container.querySelector(".line-add")!.textContent).toBe("new prompt");
  });
});
