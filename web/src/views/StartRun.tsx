// Start a run: pick a graph, fill the form made from its input schema (or edit the raw JSON), and go to the
// new run's view, which follows it live.
import { useEffect, useMemo, useState } from "react";
import { useNavigate, useSearchParams } from "react-router-dom";
import { api, STREAM_MODES } from "../api";
import { fieldsOf, initialTexts, valueOf } from "../schemaForm";
import { ErrorLine, JsonEditor, useLoad } from "../ui";

export function StartRun() {
  const [params, setParams] = useSearchParams();
  const navigate = useNavigate();
  const assistants = useLoad(() => api.assistants(), "assistants");
  const graph = params.get("graph") ?? assistants.data?.[0]?.graph_id ?? "";
  const schemas = useLoad(() => (graph ? api.schemas(graph) : Promise.resolve(null)), `schemas:${graph}`);
  const fields = useMemo(() => fieldsOf(schemas.data?.input_schema ?? null), [schemas.data]);
  const [texts, setTexts] = useState<Record<string, string>>({});
  const [raw, setRaw] = useState(false);
  const [rawText, setRawText] = useState("{}");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => setTexts(initialTexts(fields)), [fields]);

  const submit = async () => {
    setError(null);
    let input: unknown;
    try {
      input = raw ? JSON.parse(rawText) : valueOf(fields, texts);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
      return;
    }
    setBusy(true);
    try {
      const thread = await api.createThread();
      const res = await api.startRun(thread.thread_id, graph, { input, stream_mode: STREAM_MODES });
      navigate(`/ui/runs/${res.run_id}`);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section className="panel start" aria-label="Start a run">
      <h1>Start a run</h1>
      <ErrorLine error={assistants.error ?? schemas.error} />
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void submit();
        }}
      >
        <label>
          Graph{" "}
          <select aria-label="Graph" value={graph} onChange={(e) => setParams({ graph: e.target.value })}>
            {(assistants.data ?? []).map((a) => (
              <option key={a.assistant_id} value={a.graph_id}>
                {a.graph_id}
              </option>
            ))}
          </select>
        </label>
        <label>
          <input
            type="checkbox"
            checked={raw}
            onChange={(e) => {
              if (e.target.checked) {
                try {
                  setRawText(JSON.stringify(valueOf(fields, texts), null, 2));
                } catch {
                  // keep the last raw text
                }
              }
              setRaw(e.target.checked);
            }}
          />{" "}
          Raw JSON
        </label>
        {raw ? (
          <JsonEditor value={rawText} onChange={setRawText} label="Run input JSON" height="220px" />
        ) : (
          fields.map((f) => (
            <label key={f.name} className="field">
              <span>
                {f.title}
                {f.required ? " *" : ""}
              </span>
              {f.enum ? (
                <select aria-label={f.title} value={texts[f.name] ?? ""} onChange={(e) => setTexts({ ...texts, [f.name]: e.target.value })}>
                  {f.enum.map((v) => (
                    <option key={v}>{v}</option>
                  ))}
                </select>
              ) : f.type === "boolean" ? (
                <input
                  type="checkbox"
                  aria-label={f.title}
                  checked={texts[f.name] === "true"}
                  onChange={(e) => setTexts({ ...texts, [f.name]: String(e.target.checked) })}
                />
              ) : f.type === "json" ? (
                <textarea
                  aria-label={f.title}
                  rows={3}
                  placeholder="JSON"
                  value={texts[f.name] ?? ""}
                  onChange={(e) => setTexts({ ...texts, [f.name]: e.target.value })}
                />
              ) : (
                <input
                  aria-label={f.title}
                  type={f.type === "string" ? "text" : "number"}
                  value={texts[f.name] ?? ""}
                  onChange={(e) => setTexts({ ...texts, [f.name]: e.target.value })}
                />
              )}
              {f.description && <small className="muted">{f.description}</small>}
            </label>
          ))
        )}
        <button type="submit" disabled={busy || !graph}>
          Start run
        </button>
        <ErrorLine error={error} />
      </form>
    </section>
  );
}
