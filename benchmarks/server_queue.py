"""Runs per second through the Studio's run queue: 1 server process versus 4, on PostgreSQL.

    python benchmarks/server_queue.py                  # 200 runs per figure
    python benchmarks/server_queue.py --quick          # smoke mode
    python benchmarks/server_queue.py --runs 400 --node-ms 100 --processes 1,2,4

Each figure starts ``graphtape serve --workers N --concurrency K`` on a fresh
PostgreSQL schema (N server processes sharing one socket and the store's run
queue), queues ``--runs`` stateless runs through ``POST /runs/batch`` and
times from the first queued run to the last ended one (read from the queue).
The graph is one node that awaits ``--node-ms`` milliseconds, the stand-in for
a model call: runs are bound by waiting, as real agent runs are, so more
processes claiming from one queue should mean proportionally more runs per
second until the database or the CPU saturates (target: 4 processes at least
3x one). Every run is recorded on the tape as usual.

Then the **event latency across processes**: process A executes 20-node runs
(each node returns the time it finished), process B (``--concurrency 0``)
serves a viewer of each; the time from a node's end to its ``updates`` event
parsed by B's viewer (target: p95 at most 100 ms on loopback).

Prints one line per process count, the ratio and the latency; ``--json`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

import graphtape  # noqa: E402
from graphtape.store.runqueue import run_queue_for  # noqa: E402

POSTGRES = os.environ.get("GRAPHTAPE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

GRAPH = """
import asyncio
import time
from typing import TypedDict
from langgraph.graph import END, START, StateGraph

class S(TypedDict, total=False):
    n: int
    done: bool
    t: float

async def work(s: S) -> S:
    await asyncio.sleep({seconds})
    return {{"done": True}}

b = StateGraph(S)
b.add_node(work)
b.add_edge(START, "work")
b.add_edge("work", END)
graph = b.compile()

def ticking(i):
    async def tick(s: S) -> S:
        await asyncio.sleep(0.02)
        return {{"t": time.time(), "n": i}}
    return tick

t = StateGraph(S)
previous = START
for i in range(20):
    t.add_node(f"n{{i}}", ticking(i))
    t.add_edge(previous, f"n{{i}}")
    previous = f"n{{i}}"
t.add_edge(previous, END)
ticks = t.compile()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def drop(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def start_serve(url: str, graph_file: Path, tmp: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("GRAPHTAPE_URL", None)
    command = [sys.executable, "-c", "from graphtape.cli import main; main()", "--url", url, "serve"]
    command += ["--graph", f"bench={graph_file}:graph", "--graph", f"ticks={graph_file}:ticks", "--port", str(port)]
    server = subprocess.Popen([*command, *extra], cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(base + "/ok", timeout=5).status_code == 200:
                return server, base
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"graphtape serve did not start: {server.communicate()[1][-2000:]!r}")
        time.sleep(0.2)


def stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()


def cross_process_latency(runs: int, tmp: Path) -> list[float]:
    """Milliseconds from a node finishing in process A to its ``updates`` event parsed by a viewer
    of process B (which executes nothing: ``--concurrency 0``), over ``runs`` 20-node runs."""
    schema = f"gt_bench_queue_{uuid.uuid4().hex[:10]}"
    url = f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}schema={schema}"
    graph_file = tmp / f"graph_{schema}.py"
    graph_file.write_text(GRAPH.format(seconds=0), encoding="utf-8")
    graphtape.connect(url).close()
    a, a_url = start_serve(url, graph_file, tmp, ["--concurrency", "2"])
    b, b_url = start_serve(url, graph_file, tmp, ["--concurrency", "0"])
    delays: list[float] = []
    try:
        with httpx.Client(timeout=60) as client:
            for _ in range(runs):
                tid = client.post(a_url + "/threads", json={}).json()["thread_id"]
                body = {"assistant_id": "ticks", "input": {"n": 0}, "stream_mode": ["updates"]}
                run = client.post(f"{a_url}/threads/{tid}/runs", json=body).json()
                with client.stream("GET", f"{b_url}/threads/{tid}/runs/{run['run_id']}/stream") as r:
                    opened = time.time()  # nodes that ended before the viewer was there are not counted
                    event = None
                    for line in r.iter_lines():
                        if line.startswith("event: "):
                            event = line[7:]
                        elif line.startswith("data: ") and event == "updates":
                            (update,) = json.loads(line[6:]).values()
                            if update["t"] >= opened:
                                delays.append((time.time() - update["t"]) * 1000)
    finally:
        stop(a)
        stop(b)
        drop(schema)
    return delays


def measure(processes: int, concurrency: int, runs: int, node_ms: float, tmp: Path) -> dict[str, float]:
    schema = f"gt_bench_queue_{uuid.uuid4().hex[:10]}"
    url = f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}schema={schema}"
    graph_file = tmp / f"graph_{schema}.py"
    graph_file.write_text(GRAPH.format(seconds=node_ms / 1000), encoding="utf-8")
    tape = graphtape.connect(url)
    server, base = start_serve(url, graph_file, tmp, ["--workers", str(processes), "--concurrency", str(concurrency)])
    queue = run_queue_for(tape)
    try:
        with httpx.Client(base_url=base, timeout=60) as client:

            def batch(n: int) -> None:
                body = [{"assistant_id": "bench", "input": {"n": i}, "on_completion": "keep"} for i in range(n)]
                for i in range(0, n, 100):
                    r = client.post("/runs/batch", json=body[i : i + 100])
                    r.raise_for_status()

            def wait_all(total: int) -> None:
                limit = time.monotonic() + 600
                while len(queue.list_runs(statuses=["success", "error", "interrupted"])) < total:
                    if time.monotonic() > limit:
                        raise SystemExit("runs did not end within 10 minutes")
                    time.sleep(0.05)

            warm = max(processes * concurrency, 4)  # every process has claimed and run once
            batch(warm)
            wait_all(warm)
            started = time.perf_counter()
            batch(runs)
            wait_all(warm + runs)
            elapsed = time.perf_counter() - started
        failed = len(queue.list_runs(statuses=["error", "interrupted"]))
        return {"processes": processes, "runs": runs, "seconds": elapsed, "runs_per_second": runs / elapsed,
                "failed": failed}  # fmt: skip
    finally:
        stop(server)
        queue.close()
        tape.close()
        drop(schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--node-ms", type=float, default=200.0, help="how long the graph's one node waits")
    parser.add_argument("--concurrency", type=int, default=4, help="runs at once per process")
    parser.add_argument("--processes", default="1,4", help="process counts to compare (the first is the base)")
    parser.add_argument("--quick", action="store_true", help="20 runs, 1 vs 2 processes (smoke mode)")
    parser.add_argument("--latency-runs", type=int, default=10, help="runs of the cross-process latency figure")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    counts = [int(x) for x in args.processes.split(",")]
    runs = args.runs
    if args.quick:
        counts, runs = [1, 2], 20
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            fig = measure(n, args.concurrency, runs, args.node_ms, Path(tmp))
            figures.append(fig)
            print(
                f"{n} process{'es' if n > 1 else ''} x {args.concurrency} runs: {fig['runs_per_second']:.1f} runs/s "
                f"({runs} runs of a {args.node_ms:g} ms node in {fig['seconds']:.2f} s, {fig['failed']} failed)"
            )
        base = figures[0]["runs_per_second"]
        for fig in figures[1:]:
            print(
                f"ratio {fig['processes']} vs {figures[0]['processes']} processes: {fig['runs_per_second'] / base:.2f}x"
                + (" (target >= 3x)" if fig["processes"] == 4 and figures[0]["processes"] == 1 else "")
            )
        delays = sorted(cross_process_latency(2 if args.quick else args.latency_runs, Path(tmp)))
        p50, p95 = delays[len(delays) // 2], delays[min(len(delays) - 1, int(len(delays) * 0.95))]
        print(
            f"event latency, node finished in process A -> viewer of process B (ms): p50 {p50:.1f} p95 {p95:.1f} "
            f"max {delays[-1]:.1f} ({len(delays)} events; target p95 <= 100)"
        )
    if args.json:
        out = {"throughput": figures, "cross_process_latency_ms": {"p50": p50, "p95": p95, "max": delays[-1]}}
        args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
