import { afterEach, describe, expect, it, vi } from "vitest";
import { follow, type SseMessage } from "./sse";

function streamOf(chunks: string[], fail = false): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  const queue = [...chunks];
  return new ReadableStream({
    pull(controller) {
      const next = queue.shift();
      if (next !== undefined) controller.enqueue(enc.encode(next));
      else if (fail) controller.error(new Error("connection reset"));
      else controller.close();
    },
  });
}

afterEach(() => vi.unstubAllGlobals());

describe("follow", () => {
  it("reconnects after a drop with Last-Event-ID and sees each event once", async () => {
    const seenHeaders: (string | undefined)[] = [];
    const responses = [
      () => new Response(streamOf(["id: 1\nevent: a\ndata: {}\n\nid: 2\nevent: b\ndata: {}\n\n"], true)),
      () => {
        throw new TypeError("server down");
      },
      () => new Response(streamOf(["id: 3\nevent: c\ndata: {}\n\n"])),
    ];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (_url: string, init: RequestInit) => {
        seenHeaders.push((init.headers as Record<string, string>)["Last-Event-ID"]);
        return responses.shift()!();
      }),
    );
    const got: SseMessage[] = [];
    const states: string[] = [];
    await new Promise<void>((resolve) => {
      follow("/graphtape/runs/r/stream", {
        retryMs: 1,
        onMessage: (m) => got.push(m),
        onState: (s) => {
          states.push(s);
          if (s === "closed") resolve();
        },
      });
    });
    expect(got.map((m) => m.id)).toEqual(["1", "2", "3"]);
    expect(seenHeaders).toEqual([undefined, "2", "2"]);
    expect(states).toEqual(["open", "reconnecting", "reconnecting", "open", "closed"]);
  });

  it("stops on a 4xx answer", async () => {
    vi.stubGlobal("fetch", vi.fn(async () => new Response('{"detail":"no run"}', { status: 404 })));
    const detail = await new Promise<string | undefined>((resolve) =>
      follow("/x", { onMessage: () => {}, onState: (s, d) => s === "closed" && resolve(d) }),
    );
    expect(detail).toBe("HTTP 404");
  });
});
