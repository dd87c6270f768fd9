// What an interrupt asks for, read from its payload, and the answers the form offers for it. A tool-call
// review in LangGraph's agent-inbox form ({action_request: {action, args}, config: {allow_accept, ...}})
// gets accept / edit / respond / ignore; any other payload gets approve, reject and a free answer.

export interface ReviewRequest {
  action: string;
  args: unknown;
  allow: { accept: boolean; edit: boolean; respond: boolean; ignore: boolean };
  description?: string;
}

/** The review request of a payload in the agent-inbox form (or a one-item list of it), else null. */
export function reviewOf(value: unknown): ReviewRequest | null {
  const v = Array.isArray(value) && value.length === 1 ? value[0] : value;
  if (!v || typeof v !== "object") return null;
  const o = v as Record<string, unknown>;
  const req = o.action_request as Record<string, unknown> | undefined;
  if (!req || typeof req !== "object" || typeof req.action !== "string") return null;
  const cfg = (o.config ?? {}) as Record<string, unknown>;
  const flag = (k: string) => cfg[k] === undefined || Boolean(cfg[k]);
  return {
    action: req.action,
    args: req.args ?? {},
    allow: {
      accept: flag("allow_accept"),
      edit: flag("allow_edit"),
      respond: flag("allow_respond"),
      ignore: flag("allow_ignore"),
    },
    description: typeof o.description === "string" ? o.description : undefined,
  };
}

export type ReviewAnswer =
  | { type: "accept"; args: null }
  | { type: "edit"; args: { action: string; args: unknown } }
  | { type: "response"; args: string }
  | { type: "ignore"; args: null };

/** The resume value for a review: the agent-inbox convention is a list with one response. */
export function reviewAnswer(answer: ReviewAnswer): ReviewAnswer[] {
  return [answer];
}

/** The resume value `{interrupt id: answer}` when several interrupts wait, else the answer itself. */
export function resumeValue(pendingIds: string[], id: string | null | undefined, answer: unknown): unknown {
  return pendingIds.length > 1 && id ? { [id]: answer } : answer;
}
