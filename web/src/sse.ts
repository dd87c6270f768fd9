// Follow a server-sent event stream with fetch (so the bearer token can go in a header), reconnecting after
// a network drop or a server restart with Last-Event-ID so that no event is lost or seen twice.
import { authHeaders } from "./api";

export interface SseMessage {
  id: string | null;
  event: string;
  data: string;
}

/** An incremental parser of the text/event-stream format: feed it chunks, get whole messages back. */
export class SseParser {
  private buffer = "";
  private id: string | null = null;
  private event = "";
  private data: string[] = [];

  feed(chunk: string): SseMessage[] {
    // scan with an index and cut the buffer once: a large chunk (a long run's history) stays linear
    const text = this.buffer + chunk;
    const out: SseMessage[] = [];
    let pos = 0;
    for (;;) {
      let nl = -1;
      for (let i = pos; i < text.length; i++) {
        const c = text.charCodeAt(i);
        if (c === 10 || c === 13) {
          nl = i;
          break;
        }
      }
      if (nl < 0) break;
      // a CR at the very end may be the first half of a CRLF: wait for the next chunk
      if (text.charCodeAt(nl) === 13 && nl === text.length - 1) break;
      const line = text.slice(pos, nl);
      pos = nl + (text.charCodeAt(nl) === 13 && text.charCodeAt(nl + 1) === 10 ? 2 : 1);
      this.line(line, out);
    }
    this.buffer = text.slice(pos);
    return out;
  }

  private line(line: string, out: SseMessage[]): void {
    if (line === "") {
      if (this.data.length) out.push({ id: this.id, event: this.event || "message", data: this.data.join("\n") });
      this.event = "";
      this.data = [];
      return;
    }
    if (line.startsWith(":")) return; // a comment: the server's heartbeat
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id") this.id = value;
  }
}

export interface FollowOptions {
  onMessage: (m: SseMessage) => void;
  onState?: (state: "open" | "reconnecting" | "closed", detail?: string) => void;
  /** the last event id already seen (resume after it) */
  lastEventId?: string | null;
  /** the first wait before reconnecting, doubled up to 5 s */
  retryMs?: number;
  /** whether a message is the stream's last (e.g. run_finished): a stream that ends before one was seen
   * (the server stopped) is followed again, until a reconnection ends at once with nothing new */
  isLast?: (m: SseMessage) => boolean;
}

/** Follow `url` until the server ends the stream normally; returns a function that stops following. */
export function follow(url: string, opts: FollowOptions): () => void {
  const controller = new AbortController();
  let lastId = opts.lastEventId ?? null;
  let stopped = false;
  const base = opts.retryMs ?? 500;

  const run = async () => {
    let wait = base;
    let sawLast = false;
    let attempt = 0;
    while (!stopped) {
      attempt += 1;
      let received = 0;
      try {
        const headers: Record<string, string> = { Accept: "text/event-stream", ...authHeaders() };
        if (lastId) headers["Last-Event-ID"] = lastId;
        const res = await fetch(url, { headers, signal: controller.signal, cache: "no-store" });
        if (res.status >= 400 && res.status < 500) {
          opts.onState?.("closed", `HTTP ${res.status}`);
          return;
        }
        if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
        opts.onState?.("open");
        wait = base;
        const parser = new SseParser();
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          for (const m of parser.feed(value)) {
            if (m.id) lastId = m.id;
            received += 1;
            if (opts.isLast?.(m)) sawLast = true;
            opts.onMessage(m);
          }
        }
        // the server ended the stream: over when the last message came, or when a reconnection had nothing
        if (!opts.isLast || sawLast || (attempt > 1 && received === 0)) {
          opts.onState?.("closed");
          return;
        }
        throw new Error("the stream ended early");
      } catch (err) {
        if (stopped) return;
        opts.onState?.("reconnecting", String(err));
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(wait * 2, 5000);
      }
    }
  };
  void run();
  return () => {
    stopped = true;
    controller.abort();
  };
}
