// Small shared pieces of the views: loading data, error lines, badges, the JSON tree, the JSON editor.
import { Suspense, lazy, useCallback, useEffect, useState, type ReactNode } from "react";
import type { CallSource } from "./api";

export interface Loaded<T> {
  data: T | null;
  error: string | null;
  loading: boolean;
  reload: () => void;
}

/** Load with `fn` whenever `key` changes; `reload()` loads again without clearing what is shown. */
export function useLoad<T>(fn: () => Promise<T>, key: string): Loaded<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let alive = true;
    setLoading(true);
    fn()
      .then((d) => {
        if (!alive) return;
        setData(d);
        setError(null);
      })
      .catch((e: unknown) => alive && setError(e instanceof Error ? e.message : String(e)))
      .finally(() => alive && setLoading(false));
    return () => {
      alive = false;
    };
    // fn changes on every render; key says when to load again
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data, error, loading, reload };
}

export function ErrorLine({ error }: { error: string | null | undefined }) {
  if (!error) return null;
  return (
    <p className="error" role="alert">
      {error}
    </p>
  );
}

const SOURCE_TITLES: Record<CallSource, string> = {
  tape: "served from the tape",
  live: "called live",
  override: "overridden output",
  diverged: "request diverged from the recording",
  recorded: "recorded (live in a recording run)",
};

export function SourceBadge({ source }: { source: CallSource }) {
  return (
    <span className={`badge src-${source}`} title={SOURCE_TITLES[source] ?? source}>
      {source}
    </span>
  );
}

export function StatusBadge({ status }: { status: string }) {
  return <span className={`badge status-${status}`}>{status}</span>;
}

export function CopyButton({ text, label = "Copy" }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      aria-label={`${label} to clipboard`}
      onClick={() => {
        const finish = () => {
          setDone(true);
          setTimeout(() => setDone(false), 1200);
        };
        navigator.clipboard?.writeText(text).then(finish, finish);
      }}
    >
      {done ? "Copied" : label}
    </button>
  );
}

function isContainer(v: unknown): v is Record<string, unknown> | unknown[] {
  return typeof v === "object" && v !== null;
}

function preview(v: unknown): string {
  if (Array.isArray(v)) return `[${v.length}]`;
  if (isContainer(v)) return `{${Object.keys(v).length}}`;
  return JSON.stringify(v) ?? "undefined";
}

function TreeNode({ name, value, depth, path }: { name: string; value: unknown; depth: number; path: string }) {
  const [open, setOpen] = useState(depth < 2);
  if (!isContainer(value)) {
    return (
      <li>
        <span className="tree-key">{name}</span>: <span className={`tree-val t-${typeof value}`}>{preview(value)}</span>
      </li>
    );
  }
  const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v] as const) : Object.entries(value);
  return (
    <li>
      <button
        type="button"
        className="tree-toggle"
        aria-expanded={open}
        aria-label={`${open ? "Collapse" : "Expand"} ${path || name}`}
        onClick={() => setOpen(!open)}
      >
        {open ? "▾" : "▸"} <span className="tree-key">{name}</span> <span className="muted">{preview(value)}</span>
      </button>
      {open && (
        <ul>
          {entries.map(([k, v]) => (
            <TreeNode key={k} name={k} value={v} depth={depth + 1} path={`${path}/${k}`} />
          ))}
        </ul>
      )}
    </li>
  );
}

/** A collapsible tree of a JSON value (the first two levels open). */
export function JsonTree({ value, label = "value" }: { value: unknown; label?: string }) {
  const entries: [string, unknown][] = isContainer(value)
    ? Array.isArray(value)
      ? value.map((v, i) => [String(i), v])
      : Object.entries(value)
    : [[label, value]];
  return (
    <ul className="tree" aria-label={`${label} tree`}>
      {entries.map(([k, v]) => (
        <TreeNode key={k} name={k} value={v} depth={0} path={k} />
      ))}
    </ul>
  );
}

export interface JsonEditorProps {
  value: string;
  onChange?: (v: string) => void;
  readOnly?: boolean;
  label: string;
  height?: string;
}

// CodeMirror is loaded on first use: the runs list and the timeline do not wait for it
const CodeEditor = lazy(() => import("./editor"));

/** CodeMirror 6 with JSON highlighting; `readOnly` for raw views. */
export function JsonEditor(props: JsonEditorProps) {
  return (
    <Suspense fallback={<pre className="editor muted" aria-label={props.label} style={{ minHeight: props.height }}>{props.value}</pre>}>
      <CodeEditor {...props} />
    </Suspense>
  );
}

export function Section({ title, children, actions }: { title: string; children: ReactNode; actions?: ReactNode }) {
  return (
    <section className="panel" aria-label={title}>
      <header className="panel-head">
        <h2>{title}</h2>
        <div className="panel-actions">{actions}</div>
      </header>
      {children}
    </section>
  );
}
