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

  it("follows again a stream that ended before its last message, until a reconnection brings nothing", async () => {
    const responses = [
      "id: 0\nevent: run_started\ndata: {}\n\n",
      "id: 1\nevent: run_finished\ndata: {}\n\n",
      "id: 0\nevent: run_started\ndata: {}\n\n",
      "",
    ];
    const run = async (bodies: string[]) => {
      const queue = [...bodies];
      const headers: (string | undefined)[] = [];
      vi.stubGlobal(
        "fetch",
        vi.fn(async (_url: string, init: RequestInit) => {
          headers.push((init.headers as Record<string, string>)["Last-Event-ID"]);
          return new Response(streamOf([queue.shift() ?? ""]));
        }),
      );
      const got: string[] = [];
      await new Promise<void>((resolve) =>
        follow("/s", {
          retryMs: 1,
          isLast: (m) => m.event === "run_finished",
          onMessage: (m) => got.push(m.event),
          onState: (s) => s === "closed" && resolve(),
        }),
      );
      return { got, headers };
    };
    // the server stopped after run_started; the reconnection brings the end
    expect(await run(responses.slice(0, 2))).toEqual({ got: ["run_started", "run_finished"], headers: [undefined, "0"] });
    // a run that will never finish (its process died): the empty reconnection ends it
    expect(await run(responses.slice(2))).toEqual({ got: ["run_started"], headers: [undefined, "0"] });
  });

  it("stops on a 4xx answer", async () => {
    vi.stubGlobal("fetch", vi.fn(async () => new Response('{"detail":"no run"}', { status: 404 })));
    const detail = await new Promise<string | undefined>((resolve) =>
      follow("/x", { onMessage: () => {}, onState: (s, d) => s === "closed" && resolve(d) }),
    );
    expect(detail).toBe("HTTP 404");
  });
});
