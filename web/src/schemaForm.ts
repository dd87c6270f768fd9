// Turn a JSON Schema (a graph's input schema, an interrupt payload) into form fields and back into a value.

export interface Field {
  name: string;
  type: "string" | "number" | "integer" | "boolean" | "json";
  required: boolean;
  title: string;
  description?: string;
  enum?: string[];
  default?: unknown;
}

type Schema = Record<string, unknown>;

function resolve(schema: Schema, root: Schema): Schema {
  const ref = schema["$ref"];
  if (typeof ref === "string" && ref.startsWith("#/")) {
    let node: unknown = root;
    for (const part of ref.slice(2).split("/")) node = (node as Schema | undefined)?.[part];
    if (node && typeof node === "object") return node as Schema;
  }
  const anyOf = (schema.anyOf ?? schema.oneOf) as Schema[] | undefined;
  if (Array.isArray(anyOf)) {
    const notNull = anyOf.filter((s) => s.type !== "null");
    if (notNull.length === 1) return { ...resolve(notNull[0], root), title: schema.title, default: schema.default };
  }
  return schema;
}

/** The top-level fields of an object schema, simple types as themselves and anything else as JSON. */
export function fieldsOf(schema: Schema | null | undefined): Field[] {
  if (!schema) return [];
  const root = schema;
  const obj = resolve(schema, root);
  const props = (obj.properties ?? {}) as Record<string, Schema>;
  const required = new Set((obj.required as string[] | undefined) ?? []);
  return Object.entries(props).map(([name, raw]) => {
    const s = resolve(raw, root);
    const t = s.type;
    const type: Field["type"] =
      t === "string" || t === "number" || t === "integer" || t === "boolean" ? t : "json";
    return {
      name,
      type,
      required: required.has(name),
      title: (raw.title as string | undefined) ?? (s.title as string | undefined) ?? name,
      description: (raw.description ?? s.description) as string | undefined,
      enum: Array.isArray(s.enum) ? (s.enum as unknown[]).map(String) : undefined,
      default: raw.default ?? s.default,
    };
  });
}

/** A value from the form's text inputs: numbers parsed, JSON fields parsed, empty optional fields left out. */
export function valueOf(fields: Field[], texts: Record<string, string>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) {
    const text = texts[f.name] ?? "";
    if (text === "" && !f.required) continue;
    if (f.type === "number" || f.type === "integer") {
      const n = Number(text);
      if (text === "" || Number.isNaN(n)) throw new Error(`${f.title}: give a number`);
      out[f.name] = n;
    } else if (f.type === "boolean") out[f.name] = text === "true";
    else if (f.type === "json") {
      try {
        out[f.name] = JSON.parse(text);
      } catch {
        throw new Error(`${f.title}: not valid JSON`);
      }
    } else out[f.name] = text;
  }
  return out;
}

/** The initial text of each field: its default, else empty. */
export function initialTexts(fields: Field[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of fields) {
    if (f.default === undefined) out[f.name] = f.type === "boolean" ? "false" : "";
    else out[f.name] = typeof f.default === "string" ? f.default : JSON.stringify(f.default);
  }
  return out;
}
