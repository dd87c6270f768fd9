"""Studio server benchmarks: event latency, many viewers, time to first byte.

Run from the repository root with the project's environment::

    python benchmarks/server.py                    # full run (about a minute on 2 vCPU)
    python benchmarks/server.py --quick            # smoke mode
    python benchmarks/server.py --only 1,3 --json out.json
    python benchmarks/server.py --langgraph-dev /tmp/lgdev/bin/langgraph   # also time LangGraph's own server

Each figure starts a real server process (uvicorn serving ``create_app`` on a
fresh SQLite store in a temporary folder, 127.0.0.1) and talks to it over
HTTP like any client:

1. **Event latency**: a 20-node graph whose every node returns the wall-clock
   time it finished; the time from that instant to the moment a connected SSE
   client has parsed the node's ``updates`` event. Two viewers: the client that
   started the run (``runs.stream``) and a second one that joined it
   (``runs/{id}/stream``). Percentiles over every event of every run (target:
   p95 at most 100 ms on loopback).
2. **50 viewers**: a recorded run (20 nodes, each one chat-model call to a
   zero-latency fake) from creation to its ``join``, with 50 clients streaming
   it versus none, interleaved repetitions; the ratio of medians (target: at
   most 1.05x).
3. **Time to first byte** of ``runs.stream`` (the first SSE event, and the first
   ``updates`` part) on a one-node graph, versus the first part of a direct
   ``graph.astream`` in a process of its own (baseline), and versus LangGraph's
   own ``langgraph dev`` server on the same graph when ``--langgraph-dev`` names
   its command.

The viewers and the timer run in this process, the server in another; on a
2-core machine they compete for the CPU, so figures are lower bounds of what a
separate client host would see. Exit status is 0 unless ``--check`` is given
and a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx

import graphtape

GRAPHS = """
import time
from typing import Annotated, TypedDict
import operator

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

from graphtape.testing.models import SeededChatModel


class State(TypedDict, total=False):
    t: float
    n: int
    log: Annotated[list, operator.add]


def _timed(i):
    def node(state):
        return {"t": time.time(), "n": i}
    node.__name__ = f"n{i}"
    return node


def _linear(nodes):
    builder = StateGraph(State)
    previous = START
    for i, fn in enumerate(nodes):
        builder.add_node(f"n{i}", fn)
        builder.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    builder.add_edge(previous, END)
    return builder.compile()


timed = _linear([_timed(i) for i in range(20)])

_model = SeededChatModel(seed=7)


def _asking(i):
    def node(state):
        answer = _model.invoke([HumanMessage(f"step {i}")])
        return {"log": [str(answer.content)[:20]], "n": i}
    node.__name__ = f"n{i}"
    return node


llm = _linear([_asking(i) for i in range(20)])
one = _linear([_timed(0)])
"""

#: the one-node graph alone, importable without graphtape (for LangGraph's own server)
ONE = """
import time
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    t: float
    n: int


def n0(state):
    return {"t": time.time(), "n": 0}


builder = StateGraph(State)
builder.add_node("n0", n0)
builder.add_edge(START, "n0")
builder.add_edge("n0", END)
one = builder.compile()
"""

SERVER = """
import sys, uvicorn, graphtape
sys.path.insert(0, sys.argv[1])
import bench_graphs
from graphtape.server.studio import create_app
tape = graphtape.connect(sys.argv[2])
app = create_app(tape, {"timed": bench_graphs.timed, "llm": bench_graphs.llm, "one": bench_graphs.one})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
"""

DIRECT = """
import asyncio, sys, time
t0 = float(sys.argv[2])
sys.path.insert(0, sys.argv[1])
import bench_graphs

async def main():
    started = time.perf_counter()
    async for _ in bench_graphs.one.astream({}, stream_mode="updates"):
        print(time.perf_counter() - started)
        break

asyncio.run(main())
"""


#: the SQLite file of each server this script started, by URL
url_dbs: dict[str, str] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentiles(values: list[float]) -> dict[str, float]:
    xs = sorted(values)
    if not xs:
        return {"n": 0}

    def at(q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    return {"p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "max": xs[-1], "n": len(xs)}


@contextlib.contextmanager
def server(folder: Path, argv: list[str] | None = None, ready_path: str = "/ok") -> Iterator[str]:
    """A server process on a free port; yields its base URL once it answers."""
    port = free_port()
    if argv is None:
        db = folder / f"tape-{port}.db"
        argv = [sys.executable, "-c", SERVER, str(folder), f"sqlite:///{db}", str(port)]
    else:
        argv = [a.replace("{port}", str(port)) for a in argv]
    proc = subprocess.Popen(argv, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    if argv[1:3] == ["-c", SERVER]:
        url_dbs[url] = argv[4][len("sqlite:///") :]
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"server {argv[0]} exited with {proc.returncode}: {err[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + ready_path, timeout=1).status_code < 500:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start within 60 s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, str, float]]:
    """(event, data, arrival time) for each SSE event of a streamed response."""
    event, data = "message", []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data), time.time()
            event, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


async def new_thread(client: httpx.AsyncClient) -> str:
    r = await client.post("/threads", json={})
    r.raise_for_status()
    return str(r.json()["thread_id"])


# -- 1. event latency -----------------------------------------------------------------------------


async def latency_run(client: httpx.AsyncClient) -> tuple[list[float], list[float]]:
    """One run of the timed graph: latencies seen by the starting stream and by a joined viewer."""
    tid = await new_thread(client)
    own: list[float] = []
    joined: list[float] = []
    joiner: asyncio.Task[None] | None = None

    async def join(run_id: str) -> None:
        async with client.stream("GET", f"/threads/{tid}/runs/{run_id}/stream") as r:
            async for event, data, at in sse(r):
                if event == "updates":
                    for update in json.loads(data).values():
                        joined.append(at - update["t"])

    body = {"assistant_id": "timed", "input": {}, "stream_mode": ["updates"]}
    async with client.stream("POST", f"/threads/{tid}/runs/stream", json=body) as r:
        async for event, data, at in sse(r):
            if event == "metadata":
                joiner = asyncio.create_task(join(json.loads(data)["run_id"]))
            elif event == "updates":
                for update in json.loads(data).values():
                    own.append(at - update["t"])
    if joiner is not None:
        await joiner
    return own, joined


async def bench_latency(url: str, runs: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await latency_run(client)  # warm-up
        own: list[float] = []
        joined: list[float] = []
        for _ in range(runs):
            a, b = await latency_run(client)
            own += a
            joined += b
    ms = 1000.0
    return {
        "starting_viewer_ms": {k: (v * ms if k != "n" else v) for k, v in percentiles(own).items()},
        "joined_viewer_ms": {k: (v * ms if k != "n" else v) for k, v in percentiles(joined).items()},
    }


# -- 2. many viewers ------------------------------------------------------------------------------


async def viewed_run(client: httpx.AsyncClient, viewers: int, db: Path) -> float:
    """Seconds the server took to execute a run of the llm graph with ``viewers`` streaming it: the
    recorded run's own start and end on the tape, so the viewers' parsing in this process is not counted."""
    tid = await new_thread(client)
    r = await client.post(f"/threads/{tid}/runs", json={"assistant_id": "llm", "input": {}})
    r.raise_for_status()
    run_id = r.json()["run_id"]

    async def view() -> int:
        n = 0
        async with client.stream("GET", f"/threads/{tid}/runs/{run_id}/stream") as s:
            async for _ in sse(s):
                n += 1
        return n

    tasks = [asyncio.create_task(view()) for _ in range(viewers)]
    joined = await client.get(f"/threads/{tid}/runs/{run_id}/join")
    joined.raise_for_status()
    counts = await asyncio.gather(*tasks)
    if viewers and min(counts) == 0:
        raise RuntimeError("a viewer saw no event")
    tape = graphtape.connect(f"sqlite:///{db}")
    try:
        duration = tape.run(run_id).duration
    finally:
        tape.close()
    if duration is None:
        raise RuntimeError(f"run {run_id} has not ended on the tape")
    return duration


async def bench_viewers(url: str, reps: int, viewers: int) -> dict[str, Any]:
    db = Path(url_dbs[url])
    limits = httpx.Limits(max_connections=viewers + 10, max_keepalive_connections=viewers + 10)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await viewed_run(client, 0, db)
        await viewed_run(client, viewers, db)
        alone: list[float] = []
        watched: list[float] = []
        for i in range(reps):
            order = [0, viewers] if i % 2 == 0 else [viewers, 0]
            for n in order:
                (alone if n == 0 else watched).append(await viewed_run(client, n, db))
    ratio = statistics.median(watched) / statistics.median(alone)
    return {
        "viewers": viewers,
        "alone_ms": statistics.median(alone) * 1000,
        "watched_ms": statistics.median(watched) * 1000,
        "ratio": ratio,
        "reps": reps,
    }


# -- 3. time to first byte ------------------------------------------------------------------------


async def first_bytes(url: str, assistant: str, reps: int, lg: bool = False) -> dict[str, float]:
    firsts: list[float] = []
    parts: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for i in range(reps + 1):
            tid = await new_thread(client)
            body = {"assistant_id": assistant, "input": {}, "stream_mode": ["updates"]}
            started = time.perf_counter()
            first = part = None
            async with client.stream("POST", f"/threads/{tid}/runs/stream", json=body) as r:
                async for event, _data, _at in sse(r):
                    now = time.perf_counter() - started
                    if first is None:
                        first = now
                    if event == "updates" and part is None:
                        part = now
            if i == 0:
                continue  # warm-up
            if first is not None:
                firsts.append(first)
            if part is not None:
                parts.append(part)
    return {
        "first_event_ms": statistics.median(firsts) * 1000,
        "first_part_ms": statistics.median(parts) * 1000 if parts else float("nan"),
        "reps": reps,
    }


def direct_first_part(folder: Path, reps: int) -> float:
    """Median seconds to the first part of ``graph.astream`` in-process (import time excluded)."""
    times = []
    for _ in range(reps):
        out = subprocess.run(
            [sys.executable, "-c", DIRECT, str(folder), str(time.time())],
            capture_output=True,
            text=True,
            check=True,
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def bench_ttfb(folder: Path, url: str, reps: int, langgraph_dev: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "graphtape": asyncio.run(first_bytes(url, "one", reps)),
        "direct_astream_ms": direct_first_part(folder, max(3, reps // 3)) * 1000,
    }
    if langgraph_dev:
        config = folder / "langgraph.json"
        config.write_text(json.dumps({"graphs": {"one": "./bench_one.py:one"}, "dependencies": ["."]}))
        argv = [langgraph_dev, "dev", "--port", "{port}", "--no-browser", "--no-reload", "--config", str(config)]
        with server(folder, argv) as lg_url:
            result["langgraph_dev"] = asyncio.run(first_bytes(lg_url, "one", reps, lg=True))
    return result


# -- main -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions (a smoke run)")
    parser.add_argument("--only", default="1,2,3", help="comma-separated figures to run (1,2,3)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--langgraph-dev", help="the `langgraph` command of a langgraph-cli[inmem] install")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    only = {int(x) for x in args.only.split(",") if x.strip()}
    results: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count()}}
    missed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="graphtape-bench-server-") as tmp:
        folder = Path(tmp)
        (folder / "bench_graphs.py").write_text(textwrap.dedent(GRAPHS))
        (folder / "bench_one.py").write_text(textwrap.dedent(ONE))
        with server(folder) as url:
            if 1 in only:
                fig = asyncio.run(bench_latency(url, 3 if args.quick else 20))
                results["event_latency"] = fig
                own, joined = fig["starting_viewer_ms"], fig["joined_viewer_ms"]
                print(
                    f"1. event latency, node finished -> SSE client (ms): starting viewer p50 {own['p50']:.1f} "
                    f"p95 {own['p95']:.1f} max {own['max']:.1f}; joined viewer p50 {joined['p50']:.1f} "
                    f"p95 {joined['p95']:.1f} max {joined['max']:.1f} ({own['n']} + {joined['n']} events; "
                    "target p95 <= 100)"
                )
                if max(own["p95"], joined["p95"]) > 100:
                    missed.append("event latency p95")
            if 2 in only:
                fig = asyncio.run(bench_viewers(url, 3 if args.quick else 9, args.viewers))
                results["viewers"] = fig
                print(
                    f"2. recorded 20-call run with {fig['viewers']} viewers vs none: {fig['watched_ms']:.1f} vs "
                    f"{fig['alone_ms']:.1f} ms = {fig['ratio']:.2f}x (target <= 1.05x; medians of {fig['reps']})"
                )
                if fig["ratio"] > 1.05:
                    missed.append("50 viewers")
            if 3 in only:
                fig = bench_ttfb(folder, url, 3 if args.quick else 15, args.langgraph_dev)
                results["ttfb"] = fig
                g = fig["graphtape"]
                line = (
                    f"3. time to first byte of runs.stream: first event {g['first_event_ms']:.1f} ms, first part "
                    f"{g['first_part_ms']:.1f} ms; direct graph.astream first part {fig['direct_astream_ms']:.1f} ms"
                )
                if "langgraph_dev" in fig:
                    lg = fig["langgraph_dev"]
                    line += (
                        f"; langgraph dev: first event {lg['first_event_ms']:.1f} ms, first part "
                        f"{lg['first_part_ms']:.1f} ms ({g['first_part_ms'] / lg['first_part_ms']:.3f}x)"
                    )
                print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.check and missed:
        print("missed: " + ", ".join(missed))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
