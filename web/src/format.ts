// Small formatting helpers shared by the views: durations, tokens, money, times, short ids.

export function shortId(id: string | null | undefined, n = 8): string {
  return id ? id.slice(0, n) : "";
}

export function seconds(s: number | null | undefined): string {
  if (s === null || s === undefined || Number.isNaN(s)) return "–";
  if (s < 0.001) return "0 ms";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(2)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

export function money(x: number | null | undefined): string {
  if (x === null || x === undefined) return "–";
  if (x === 0) return "$0";
  return x < 0.01 ? `$${x.toFixed(5)}` : `$${x.toFixed(2)}`;
}

export function count(x: number | null | undefined): string {
  if (x === null || x === undefined) return "–";
  return x.toLocaleString("en-US");
}

export function when(ts: number | string | null | undefined): string {
  if (ts === null || ts === undefined) return "–";
  const d = typeof ts === "number" ? new Date(ts * 1000) : new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  return d.toISOString().replace("T", " ").slice(0, 19);
}

/** JSON for display: indented, undefined as null. */
export function pretty(v: unknown): string {
  return JSON.stringify(v ?? null, null, 2);
}

/** A value for reading: LangChain's serialised objects ({lc, type: "constructor", id, kwargs}) shown as
 * their class name and fields. The raw JSON views keep the value as it is. */
export function readable(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(readable);
  if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    if (o.lc !== undefined && o.type === "constructor" && Array.isArray(o.id) && o.kwargs && typeof o.kwargs === "object") {
      const cls = String(o.id[o.id.length - 1]);
      return { "(class)": cls, ...(readable(o.kwargs) as Record<string, unknown>) };
    }
    return Object.fromEntries(Object.entries(o).map(([k, x]) => [k, readable(x)]));
  }
  return v;
}

/** Why a model call shows no cost, and how to give it one (the CLI's `graphtape show` says the same). */
export function noPriceHint(model: string | null | undefined): string {
  return (
    `No price known for ${model ? `model ${model}` : "this model"} when the call was recorded. graphtape prices a ` +
    "model by the longest entry of its price table that the model's name starts with; add yours where the run is " +
    'recorded: graphtape.connect(url, prices={"model-name": (USD per million input tokens, USD per million output tokens)}).'
  );
}

/** A number from an untyped record (token usage), or null. */
export function num(v: unknown): number | null {
  return typeof v === "number" ? v : null;
}
