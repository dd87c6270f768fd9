// Answer a run's pending interrupt: a form made from its payload (approve / reject / edit for a review, a
// field per simple value, else raw JSON), sent as a resume run on the thread (LangGraph's Command(resume)).
import { useState } from "react";
import { api, type PendingInterrupt, type RunSummary } from "../api";
import { pretty } from "../format";
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
  const [text, setText] = useState(pretty("approve"));
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const send = async (answer: unknown) => {
    setBusy(true);
    setError(null);
    try {
      const resume = interrupts.length > 1 && first.id ? { [first.id]: answer } : answer;
      const res = await api.startRun(run.thread_id, run.graph, { command: { resume } });
      onStarted(res.run_id);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  const pending = thread.data?.interrupts ?? [];
  if (!thread.data || !pending.length || (first.id && !pending.some((p) => p.id === first.id))) return null;
  return (
    <section className="panel interrupt" aria-label="Pending interrupt">
      <h3>Waiting for an answer{first.node ? ` at ${first.node}` : ""}</h3>
      <JsonTree value={first.value} label="interrupt" />
      <div className="row">
        <button type="button" disabled={busy} onClick={() => send("approve")}>
          Approve
        </button>
        <button type="button" disabled={busy} onClick={() => send("reject")}>
          Reject
        </button>
      </div>
      <JsonEditor value={text} onChange={setText} label="Interrupt answer editor" height="100px" />
      <button
        type="button"
        disabled={busy}
        onClick={() => {
          try {
            void send(JSON.parse(text));
          } catch {
            setError("the answer is not valid JSON (a string needs quotes)");
          }
        }}
      >
        Send answer
      </button>
      <ErrorLine error={error} />
    </section>
  );
}
