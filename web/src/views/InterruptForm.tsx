// Answer a run's pending interrupt with a form made from its payload: accept / edit / respond / ignore for a
// tool-call review, else approve, reject, a text answer or raw JSON. The answer resumes the thread as a new
// run (LangGraph's Command(resume)), which the page then follows.
import { useState } from "react";
import { api, STREAM_MODES, type PendingInterrupt, type RunSummary } from "../api";
import { pretty } from "../format";
import { resumeValue, reviewAnswer, reviewOf } from "../interrupts";
import { ErrorLine, JsonEditor, JsonTree, useLoad } from "../ui";

export function InterruptForm({
  run,
  interrupts,
  onStarted,
}: {
  run: RunSummary;
  interrupts: PendingInterrupt[];
  onStarted: (runId: string) => void;
}) {
  const first = interrupts[0];
  // the run's interrupts are those pending when it ended; answer only those the thread still waits on
  const thread = useLoad(() => api.threadState(run.thread_id), `thread-state:${run.thread_id}:${run.run_id}`);
  const review = reviewOf(first.value);
  const [text, setText] = useState(pretty(review ? review.args : "approve"));
  const [reply, setReply] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const pending = thread.data?.interrupts ?? [];
  if (!thread.data || !pending.length || (first.id && !pending.some((p) => p.id === first.id))) return null;

  const send = async (answer: unknown) => {
    setBusy(true);
    setError(null);
    try {
      const ids = pending.map((p) => p.id ?? "").filter(Boolean);
      const res = await api.startRun(run.thread_id, run.graph, {
        command: { resume: resumeValue(ids, first.id, answer) },
        stream_mode: STREAM_MODES,
      });
      onStarted(res.run_id);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  const parsed = (): unknown => {
    try {
      return JSON.parse(text);
    } catch {
      setError("the answer is not valid JSON (a string needs quotes)");
      return undefined;
    }
  };

  return (
    <section className="panel interrupt" aria-label="Pending interrupt">
      <h3>
        Waiting for an answer{first.node ? ` at ${first.node}` : ""}
        {review ? `: review of ${review.action}` : ""}
      </h3>
      {review?.description && <p>{review.description}</p>}
      <JsonTree value={review ? review.args : first.value} label="interrupt" />
      {review ? (
        <>
          <div className="row">
            {review.allow.accept && (
              <button type="button" disabled={busy} onClick={() => send(reviewAnswer({ type: "accept", args: null }))}>
                Accept
              </button>
            )}
            {review.allow.ignore && (
              <button type="button" disabled={busy} onClick={() => send(reviewAnswer({ type: "ignore", args: null }))}>
                Ignore
              </button>
            )}
          </div>
          {review.allow.edit && (
            <>
              <JsonEditor value={text} onChange={setText} label="Tool arguments editor" height="120px" />
              <button
                type="button"
                disabled={busy}
                onClick={() => {
                  const args = parsed();
                  if (args !== undefined) void send(reviewAnswer({ type: "edit", args: { action: review.action, args } }));
                }}
              >
                Accept with these arguments
              </button>
            </>
          )}
          {review.allow.respond && (
            <div className="row">
              <input aria-label="Response to the tool call" value={reply} onChange={(e) => setReply(e.target.value)} />
              <button
                type="button"
                disabled={busy || !reply}
                onClick={() => send(reviewAnswer({ type: "response", args: reply }))}
              >
                Reject with this response
              </button>
            </div>
          )}
        </>
      ) : (
        <>
          <div className="row">
            <button type="button" disabled={busy} onClick={() => send("approve")}>
              Approve
            </button>
            <button type="button" disabled={busy} onClick={() => send("reject")}>
              Reject
            </button>
            <input aria-label="Answer as text" placeholder="or answer in words" value={reply} onChange={(e) => setReply(e.target.value)} />
            <button type="button" disabled={busy || !reply} onClick={() => send(reply)}>
              Send text
            </button>
          </div>
          <JsonEditor value={text} onChange={setText} label="Interrupt answer editor" height="90px" />
          <button
            type="button"
            disabled={busy}
            onClick={() => {
              const v = parsed();
              if (v !== undefined) void send(v);
            }}
          >
            Send JSON answer
          </button>
        </>
      )}
      <ErrorLine error={error} />
    </section>
  );
}
