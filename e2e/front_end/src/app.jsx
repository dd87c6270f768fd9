// A small chat front end on @langchain/langgraph-sdk, the way Agent Chat UI is built: useStream for the
// conversation (streamed tokens, tool calls, interrupts) and threads.search for the thread history,
// labelled by each thread's first message. The server and assistant come from the page's query string
// (?apiUrl=...&assistantId=...), as Agent Chat UI reads them.
import { Client } from "@langchain/langgraph-sdk";
import { useStream } from "@langchain/langgraph-sdk/react";
import { useCallback, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";

const query = new URLSearchParams(window.location.search);
const apiUrl = query.get("apiUrl");
const assistantId = query.get("assistantId");
const isUuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(assistantId);
// every content an AI message had while it streamed, for the test to see it grow
window.__seen = [];

function text(content) {
  if (typeof content === "string") return content;
  return (content ?? []).map((part) => part.text ?? "").join("");
}

function Threads({ refreshKey, onPick }) {
  const [threads, setThreads] = useState([]);
  useEffect(() => {
    const client = new Client({ apiUrl });
    const metadata = isUuid ? { assistant_id: assistantId } : { graph_id: assistantId };
    client.threads.search({ metadata, limit: 100 }).then(setThreads);
  }, [refreshKey]);
  return (
    <ul id="threads">
      {threads.map((t) => {
        const first = t.values?.messages?.[0];
        return (
          <li key={t.thread_id} data-thread={t.thread_id} onClick={() => onPick(t.thread_id)}>
            {first ? text(first.content) : t.thread_id}
          </li>
        );
      })}
    </ul>
  );
}

function App() {
  const [threadId, setThreadId] = useState(null);
  const [refreshKey, setRefreshKey] = useState(0);
  const [draft, setDraft] = useState("");
  const [editArgs, setEditArgs] = useState("");
  const stream = useStream({
    apiUrl,
    assistantId,
    messagesKey: "messages",
    threadId,
    onThreadId: setThreadId,
    onFinish: () => setRefreshKey((k) => k + 1),
  });
  const messages = stream.messages;
  const last = messages[messages.length - 1];
  if (last?.type === "ai" && text(last.content)) window.__seen.push(text(last.content));
  const send = useCallback(
    (event) => {
      event.preventDefault();
      stream.submit({ messages: [{ type: "human", content: draft }] });
      setDraft("");
    },
    [draft, stream],
  );
  const pending = stream.interrupt?.value;
  return (
    <main>
      <Threads refreshKey={refreshKey} onPick={setThreadId} />
      <section id="messages" data-loading={String(stream.isLoading)} data-thread={threadId ?? ""}>
        {messages.map((m, i) => (
          <div key={m.id ?? i} className={`msg msg-${m.type}`}>
            {text(m.content)}
            {(m.tool_calls ?? []).map((c) => (
              <code key={c.id} className="tool-call">
                {c.name}({JSON.stringify(c.args)})
              </code>
            ))}
          </div>
        ))}
      </section>
      {pending && !stream.isLoading && (
        <div id="interrupt">
          <p>{pending.question}</p>
          <button id="accept" onClick={() => stream.submit(undefined, { command: { resume: { type: "accept" } } })}>
            Accept
          </button>
          <input id="edit-args" value={editArgs} onChange={(e) => setEditArgs(e.target.value)} />
          <button
            id="edit"
            onClick={() =>
              stream.submit(undefined, { command: { resume: { type: "edit", args: JSON.parse(editArgs) } } })
            }
          >
            Edit
          </button>
        </div>
      )}
      {stream.error && <pre id="error">{String(stream.error)}</pre>}
      <form onSubmit={send}>
        <input id="draft" value={draft} onChange={(e) => setDraft(e.target.value)} />
        <button id="send" type="submit" disabled={stream.isLoading}>
          Send
        </button>
        <button id="new-thread" type="button" onClick={() => setThreadId(null)}>
          New thread
        </button>
      </form>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<App />);
