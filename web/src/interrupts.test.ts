import { describe, expect, it } from "vitest";
import { resumeValue, reviewAnswer, reviewOf } from "./interrupts";

describe("interrupt payloads", () => {
  it("reads an agent-inbox tool review", () => {
    const review = reviewOf([
      {
        action_request: { action: "issue_refund", args: { amount: 149 } },
        config: { allow_accept: true, allow_edit: true, allow_respond: true, allow_ignore: false },
        description: "Refund 149?",
      },
    ]);
    expect(review).toEqual({
      action: "issue_refund",
      args: { amount: 149 },
      allow: { accept: true, edit: true, respond: true, ignore: false },
      description: "Refund 149?",
    });
    expect(reviewAnswer({ type: "edit", args: { action: "issue_refund", args: { amount: 100 } } })).toEqual([
      { type: "edit", args: { action: "issue_refund", args: { amount: 100 } } },
    ]);
  });
  it("leaves other payloads to the generic form", () => {
    expect(reviewOf({ draft: "...", question: "approve?" })).toBeNull();
    expect(reviewOf("approve?")).toBeNull();
  });
  it("keys the answer by interrupt id only when several wait", () => {
    expect(resumeValue(["a"], "a", "ok")).toBe("ok");
    expect(resumeValue(["a", "b"], "b", "ok")).toEqual({ b: "ok" });
  });
});
