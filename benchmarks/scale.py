"""The tape API at production size: the same requests against a store of 1,000 runs and of 100,000 (or 1,000,000).

Run from the repository root with the project's environment::

    python benchmarks/scale.py                          # 1,000 and 100,000 runs on SQLite
    python benchmarks/scale.py --million                # also 1,000,000 runs
    python benchmarks/scale.py --backend postgresql     # the same on PostgreSQL (--postgres-url)
    python benchmarks/scale.py --sizes 200,2000 --reps 5    # any sizes (the smallest is the baseline)
    python benchmarks/scale.py --check                  # exit 1 if a target of issue 35 is missed
    python benchmarks/scale.py --write-docs             # replace the Scale table of docs/benchmarks.md

**The stores.** A few template runs are recorded for real (graphtape records
LangGraph graphs calling the project's fake chat model): a small agent (two
LLM calls and a tool call), a pipeline (four plain nodes), a pipeline that
fails, a labelled agent run, a run of 201 LLM calls over 67 steps, and a
thread of 60 checkpoints. Each template's thread is exported with graphtape's
own archive format (runs, events, calls, checkpoints, writes, payloads) and
read back with graphtape's import parser; the store of N runs is then written
through the store's own write path (``TapeStore.write`` of ``WriteBatch``es
of 500 runs), each run a copy of a template with its own run id, thread id,
graph name (four), status (mostly finished, some failed), and start time
spread over the last 90 days (events and checkpoints moved with it). The 201-call
run and the 60-checkpoint thread are written once, in the middle of the
time range. A store is kept in ``~/.cache/graphtape/scale/`` (``--cache``;
PostgreSQL: a schema per size) and reused by later runs: building it is
minutes, measuring it seconds. ``--rebuild`` builds it again.

**The requests.** For each store, a real server (uvicorn serving
``create_app`` on the store, 127.0.0.1, a free port, in a process of its
own) is asked each request ``--reps`` times (after two warm-ups), one at a
time, and the client's wall time is recorded: p50 and p95. Each figure is
shown beside the same figure at the smallest size, as a ratio. Page 50 is
asked for by ``offset`` and by the ``next`` cursor of page 49 (followed
from the first page; a store of fewer pages: its last). ``q`` (a search of
ids and labels) reads every run: it is shown, not judged (the UI issue's
search). Targets are issue 35's, judged at the largest size.

Exit status is 0 unless ``--check`` is given and a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx

import graphtape
from graphtape.export import parse_text
from graphtape.runtime.archive import archive_text
from graphtape.store.base import EventRow, TapeStore, WriteBatch

#: What the generated stores hold; a change here builds the cached stores again.
GENERATOR = 1
DAYS = 90
GRAPHS = ("support-agent", "triage-agent", "ingest-pipeline", "report-pipeline")
#: runs per WriteBatch while building
CHUNK = 500
ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
DOCS_BEGIN = "<!-- scale.py --write-docs: begin -->"
DOCS_END = "<!-- scale.py --write-docs: end -->"
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"

#: issue 35's targets at the largest size: (ratio to the smallest size, absolute p95 in ms); None: not judged
TARGETS: dict[str, tuple[float | None, float | None]] = {
    "runs list, first page": (1.5, 50.0),
    "runs list, by graph": (1.5, 50.0),
    "runs list, by status": (1.5, 50.0),
    "runs list, by time window": (1.5, 50.0),
    "runs list, by graph + status + window": (1.5, 50.0),
    "runs list, page 50 (offset)": (1.5, 50.0),
    "runs list, page 50 (cursor)": (1.5, 50.0),
    "runs list, search a label (q)": (None, None),
    "run detail + timeline (201 calls)": (None, 100.0),
    "thread history (60 checkpoints)": (None, 50.0),
}


# -- templates: real recorded runs -------------------------------------------------------------------


class Notes(TypedDict, total=False):
    topic: str
    n: int
    notes: Annotated[list, lambda a, b: [*(a or []), *b]]


def _templates(folder: Path) -> dict[str, WriteBatch]:
    """Record each template for real into a store of its own; its thread as graphtape's archive parses it."""
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, StateGraph

    from graphtape.testing.models import SeededChatModel

    model = SeededChatModel(seed=3)

    @tool
    def lookup(query: str) -> str:
        """Look the query up in the knowledge base."""
        return f"kb: {len(query)} chars"

    def agent():
        def plan(state: Notes) -> dict[str, Any]:
            return {"notes": [str(model.invoke([HumanMessage(f"Plan: {state['topic']}")]).content)]}

        def act(state: Notes) -> dict[str, Any]:
            return {"notes": [lookup.invoke({"query": state["notes"][-1]})]}

        def answer(state: Notes) -> dict[str, Any]:
            return {"notes": [str(model.invoke([HumanMessage(f"Answer: {state['notes'][-1]}")]).content)]}

        b = StateGraph(Notes)
        b.add_node(plan)
        b.add_node(act)
        b.add_node(answer)
        b.add_edge(START, "plan")
        b.add_edge("plan", "act")
        b.add_edge("act", "answer")
        b.add_edge("answer", END)
        return b.compile()

    def pipeline(fail: bool = False):
        b = StateGraph(Notes)
        prev = START
        for i in range(4):

            def step(state: Notes, i: int = i) -> dict[str, Any]:
                if fail and i == 3:
                    raise ValueError("the upstream feed returned no rows")
                return {"n": state.get("n", 0) + 1, "notes": [f"stage {i} of {state['topic']}"]}

            b.add_node(f"stage{i}", step)
            b.add_edge(prev, f"stage{i}")
            prev = f"stage{i}"
        b.add_edge(prev, END)
        return b.compile()

    def long_run(steps: int, calls_per_step: int):
        def work(state: Notes) -> dict[str, Any]:
            said = [
                str(model.invoke([HumanMessage(f"step {state['n']} call {c}")]).content)[:40]
                for c in range(calls_per_step)
            ]
            return {"n": state["n"] + 1, "notes": said[:1]}

        b = StateGraph(Notes)
        b.add_node(work)
        b.add_edge(START, "work")
        b.add_conditional_edges("work", lambda s: "work" if s["n"] < steps else END, ["work", END])
        return b.compile()

    made: dict[str, WriteBatch] = {}
    specs = {
        "agent": (agent(), {"topic": "refund for order A-1001"}, None),
        "labelled": (agent(), {"topic": "a golden conversation"}, "golden"),
        "pipeline": (pipeline(), {"topic": "the nightly feed"}, None),
        "failed": (pipeline(fail=True), {"topic": "the nightly feed"}, None),
        # 67 steps of 3 LLM calls: 201 calls
        "big": (long_run(67, 3), {"topic": "a long research run", "n": 0}, None),
        # 58 steps + input + the first: 60 checkpoints
        "thread": (long_run(58, 0), {"topic": "a long thread", "n": 0}, None),
    }
    for name, (graph, first, label) in specs.items():
        path = folder / f"{name}.db"
        with graphtape.connect(f"sqlite:///{path}") as tape:
            thread = f"template-{name}"
            config = {"configurable": {"thread_id": thread}, "recursion_limit": 200}
            with contextlib.suppress(ValueError):
                # durable threads: the template is the thread's runs, read back by its name
                tape.record(graph, name=name, checkpointer=tape.saver).invoke(first, config)
            runs = tape.store.list_runs(thread_id=thread, limit=None)
            if label:
                tape.label(runs[0].run_id, label)
            text, _ = archive_text(tape.store, thread, runs)
        _, batch = parse_text(text, f"the {name} template")
        made[name] = batch
    return made


# -- copies of the templates -------------------------------------------------------------------------


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat()


def _copy(template: WriteBatch, i: int, started: float, graph: str, run_prefix: str) -> WriteBatch:
    """Template ``i``-th copy: its own run and thread ids, graph name and start time (everything moved with it)."""
    src = template.new_runs[0]
    shift = started - src.started_at
    thread = f"{run_prefix}-thread-{i:07d}"
    run_id = f"{run_prefix}-{i:07d}"
    ids = {src.run_id: run_id}
    out = WriteBatch()
    out.new_runs.append(
        dataclasses.replace(
            src,
            run_id=run_id,
            thread_id=thread,
            graph=graph,
            started_at=started,
            ended_at=None if src.ended_at is None else src.ended_at + shift,
        )
    )
    out.events = [EventRow(ids.get(e.run_id, run_id), e.seq, e.kind, e.ts + shift, e.data) for e in template.events]
    out.checkpoints = [
        dataclasses.replace(c, thread_id=thread, run_id=ids.get(c.run_id or "", c.run_id), created_at=_iso(started))
        for c in template.checkpoints
    ]
    out.writes = [dataclasses.replace(w, thread_id=thread) for w in template.writes]
    return out


def _payloads(template: WriteBatch) -> WriteBatch:
    """The template's blobs and chain nodes (content addressed: written once for every copy)."""
    return WriteBatch(blobs=dict(template.blobs), chains=dict(template.chains))


def build(store: TapeStore, n: int, folder: Path, say: Any) -> dict[str, Any]:
    """Write ``n`` runs (copies of the templates) into ``store``; the ids of the special runs."""
    t0 = time.perf_counter()
    templates = _templates(folder)
    recorded = time.perf_counter() - t0
    for t in templates.values():
        store.write(_payloads(t))
    now = time.time()
    rng = random.Random(35)
    starts = sorted(now - rng.random() * DAYS * 86400 for _ in range(n))
    kinds = rng.choices(["agent", "pipeline", "failed", "labelled"], weights=[60, 30, 8, 2], k=n)
    if kinds and "labelled" not in kinds:  # a small store: the label search still finds one
        kinds[len(kinds) // 2] = "labelled"
    t1 = time.perf_counter()
    batch = WriteBatch()
    for i, (started, kind) in enumerate(zip(starts, kinds)):
        graph = GRAPHS[rng.randrange(2)] if kind in ("agent", "labelled") else GRAPHS[2 + rng.randrange(2)]
        batch.extend(_copy(templates[kind], i, started, graph, "run"))
        if (i + 1) % CHUNK == 0:
            store.write(batch)
            batch = WriteBatch()
            if (i + 1) % (CHUNK * 40) == 0:
                rate = (i + 1) / (time.perf_counter() - t1)
                say(f"  {i + 1:,} runs written ({rate:,.0f} runs/s)")
    middle = starts[n // 2] if starts else now
    batch.extend(_copy(templates["big"], 0, middle, GRAPHS[0], "big"))
    batch.extend(_copy(templates["thread"], 0, middle + 1, GRAPHS[2], "long"))
    store.write(batch)
    return {
        "runs": n + 2,
        "big_run": "big-0000000",
        "long_thread": "long-thread-0000000",
        "label": "golden",
        "first_started": starts[0] if starts else now,
        "last_started": starts[-1] if starts else now,
        "middle": middle,
        "templates_seconds": round(recorded, 2),
        "write_seconds": round(time.perf_counter() - t1, 2),
    }


# -- the stores in the cache -------------------------------------------------------------------------


def store_url(backend: str, n: int, cache: Path, postgres: str) -> str:
    name = f"scale_g{GENERATOR}_{n}"
    if backend == "sqlite":
        return f"sqlite:///{cache / (name + '.db')}"
    sep = "&" if "?" in postgres else "?"
    return f"{postgres}{sep}schema=gt_{name}"


def ensure_store(backend: str, n: int, cache: Path, postgres: str, rebuild: bool, say: Any) -> tuple[str, dict]:
    """The URL of the cached store of ``n`` runs (built now if absent) and what the build recorded."""
    cache.mkdir(parents=True, exist_ok=True)
    url = store_url(backend, n, cache, postgres)
    info_path = cache / f"scale_g{GENERATOR}_{n}.{backend}.json"
    if info_path.exists() and not rebuild:
        return url, json.loads(info_path.read_text())
    if backend == "sqlite":
        db = Path(url.removeprefix("sqlite:///"))
        for p in db.parent.glob(db.name + "*"):
            p.unlink()
    else:
        _drop_schema(postgres, f"gt_scale_g{GENERATOR}_{n}")
    say(f"building a store of {n:,} runs at {url} ...")
    with tempfile.TemporaryDirectory(prefix="graphtape-scale-") as tmp, graphtape.connect(url) as tape:
        info = build(tape.store, n, Path(tmp), say)
    say(f"  built in {info['write_seconds']:.0f} s (templates {info['templates_seconds']:.1f} s)")
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    return url, info


def _drop_schema(postgres: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- the server and the requests ---------------------------------------------------------------------

SERVER = """
import sys, uvicorn, graphtape
from graphtape.server.studio import create_app
from langgraph.graph import END, START, StateGraph
from typing import TypedDict
class S(TypedDict, total=False):
    n: int
b = StateGraph(S)
b.add_node("n0", lambda s: {"n": 1})
b.add_edge(START, "n0")
b.add_edge("n0", END)
graph = b.compile()
tape = graphtape.connect(sys.argv[1])
app = create_app(tape, {name: graph for name in sys.argv[3].split(",")})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(url: str) -> Iterator[str]:
    """A server process on the store at ``url``; yields its base URL once it answers."""
    port = free_port()
    argv = [sys.executable, "-c", SERVER, url, str(port), ",".join(GRAPHS)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
            try:
                if httpx.get(f"{base}/ok", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not answer within 120 s")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def requests_for(info: dict[str, Any]) -> dict[str, list[str]]:
    """Each figure's requests (a figure may be two requests, timed together)."""
    # a week around the middle of the range, where the 201-call run started: never empty
    middle = info.get("middle", (info["first_started"] + info["last_started"]) / 2)
    week = f"since={middle - 3.5 * 86400:.3f}&until={middle + 3.5 * 86400:.3f}"
    return {
        "runs list, first page": ["/graphtape/runs?limit=50"],
        "runs list, by graph": [f"/graphtape/runs?limit=50&graph={GRAPHS[2]}"],
        "runs list, by status": ["/graphtape/runs?limit=50&status=failed"],
        "runs list, by time window": [f"/graphtape/runs?limit=50&{week}"],
        "runs list, by graph + status + window": [f"/graphtape/runs?limit=50&graph={GRAPHS[0]}&status=finished&{week}"],
        "runs list, page 50 (offset)": ["/graphtape/runs?limit=50&offset=2450"],
        "runs list, page 50 (cursor)": [f"/graphtape/runs?limit=50&cursor={info['page_50_cursor']}"],
        "runs list, search a label (q)": [f"/graphtape/runs?limit=50&q={info['label']}"],
        "run detail + timeline (201 calls)": [
            f"/graphtape/runs/{info['big_run']}",
            f"/graphtape/runs/{info['big_run']}/timeline",
        ],
        "thread history (60 checkpoints)": [f"/graphtape/history/{info['long_thread']}"],
    }


def check_answer(name: str, path: str, answer: httpx.Response, info: dict[str, Any]) -> None:
    """A wrong or empty answer must not make a fast figure."""
    if answer.status_code != 200:
        raise SystemExit(f"{path} answered {answer.status_code}: {answer.text[:300]}")
    body = answer.json()
    if path.startswith("/graphtape/runs?"):
        if not body["runs"] and "offset" not in path and "cursor" not in path:
            raise SystemExit(f"{path} found no run: the generated store is not what this script expects")
    elif "/timeline" in path:
        calls = sum(len(task["calls"]) for step in body["steps"] for task in step["tasks"])
        if calls != 201:
            raise SystemExit(f"{path} shows {calls} calls, not 201")
    elif path.startswith("/graphtape/history/"):
        if len(body["entries"]) != 60:
            raise SystemExit(f"{path} shows {len(body['entries'])} checkpoints, not 60")


def percentile(values: list[float], q: float) -> float:
    xs = sorted(values)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def page_cursor(client: httpx.Client, page: int) -> str:
    """The cursor of page ``page`` of 50 runs, by following ``next`` (the last page's of a smaller store);
    empty when the server pages without one."""
    cursor = ""
    for _ in range(page - 1):
        body = client.get("/graphtape/runs", params={"limit": 50, **({"cursor": cursor} if cursor else {})}).json()
        if not body.get("next"):
            break
        cursor = body["next"]
    return cursor


def measure(base: str, info: dict[str, Any], reps: int, say: Any) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with httpx.Client(base_url=base, timeout=300) as client:
        info = {**info, "page_50_cursor": page_cursor(client, 50)}
        for name, paths in requests_for(info).items():
            samples = []
            for rep in range(reps + 2):
                t0 = time.perf_counter()
                for path in paths:
                    answer = client.get(path)
                    if rep == 0:
                        check_answer(name, path, answer, info)
                if rep >= 2:
                    samples.append((time.perf_counter() - t0) * 1000)
            out[name] = {"p50": percentile(samples, 0.5), "p95": percentile(samples, 0.95), "n": len(samples)}
            say(f"  {name:<40} p50 {out[name]['p50']:8.1f} ms   p95 {out[name]['p95']:8.1f} ms")
    return out


# -- report ------------------------------------------------------------------------------------------


def verdicts(results: dict[int, dict[str, dict[str, float]]]) -> list[dict[str, Any]]:
    sizes = sorted(results)
    small, large = sizes[0], sizes[-1]
    rows = []
    for name in results[small]:
        base = results[small][name]["p95"]
        row: dict[str, Any] = {"figure": name, "p95": {n: results[n][name]["p95"] for n in sizes}}
        row["p50"] = {n: results[n][name]["p50"] for n in sizes}
        row["ratio"] = {n: results[n][name]["p95"] / base for n in sizes}
        ratio_target, ms_target = TARGETS.get(name, (None, None))
        missed = []
        if ratio_target is not None and row["ratio"][large] > ratio_target:
            missed.append(f"{row['ratio'][large]:.1f}x > {ratio_target}x")
        if ms_target is not None and row["p95"][large] > ms_target:
            missed.append(f"{row['p95'][large]:.0f} ms > {ms_target:.0f} ms")
        target = " and ".join(
            t
            for t in (f"<= {ratio_target}x" if ratio_target else "", f"<= {ms_target:.0f} ms" if ms_target else "")
            if t
        )
        row["target"] = target or "-"
        row["verdict"] = "-" if not target else ("MISSED: " + ", ".join(missed) if missed else "met")
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]], sizes: list[int]) -> list[str]:
    head = "| request | " + " | ".join(f"{n:,} runs p50 / p95" for n in sizes) + " | target (largest) | verdict |"
    lines = [head, "|---|" + "---|" * len(sizes) + "---|---|"]
    for row in rows:
        cells = []
        for n in sizes:
            cell = f"{row['p50'][n]:.1f} / {row['p95'][n]:.1f} ms"
            if n != sizes[0]:
                cell += f" ({row['ratio'][n]:.2f}x)"
            cells.append(cell)
        lines.append(f"| {row['figure']} | " + " | ".join(cells) + f" | {row['target']} | {row['verdict']} |")
    return lines


def _git() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_docs(table: list[str], command: str, builds: dict[int, dict[str, Any]], backend: str) -> None:
    built = ", ".join(f"{n:,} runs in {b['write_seconds']:.0f} s" for n, b in sorted(builds.items()))
    block = "\n".join(
        [
            DOCS_BEGIN,
            "",
            f"`{command}` on {time.strftime('%Y-%m-%d', time.gmtime())} ({os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, {backend}, commit {_git()}); stores built through `TapeStore.write` "
            f"({built}). Client wall time over a real server; the ratio is to the smallest store's p95.",
            "",
            *table,
            "",
            DOCS_END,
        ]
    )
    text = DOCS.read_text()
    if DOCS_BEGIN in text and DOCS_END in text:
        head, rest = text.split(DOCS_BEGIN, 1)
        text = head + block + rest.split(DOCS_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Scale (`benchmarks/scale.py`)\n\n" + block + "\n"
    DOCS.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="1000,100000", help="store sizes in runs, comma-separated (default 1000,100000)"
    )
    parser.add_argument("--million", action="store_true", help="also a store of 1,000,000 runs")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--postgres-url", default=os.environ.get("GRAPHTAPE_SCALE_POSTGRES_URL", DEFAULT_POSTGRES))
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "graphtape" / "scale")
    parser.add_argument("--rebuild", action="store_true", help="build the stores again even if cached")
    parser.add_argument("--reps", type=int, default=40, help="timed requests per figure (default 40)")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed at the largest size")
    parser.add_argument("--write-docs", action="store_true", help="replace the Scale table of docs/benchmarks.md")
    args = parser.parse_args(argv)
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()} | ({1_000_000} if args.million else set()))
    except ValueError:
        parser.error(f"--sizes takes whole numbers separated by commas, not {args.sizes!r}")
    if not sizes or min(sizes) < 1 or args.reps < 1:
        parser.error("--sizes needs at least one size of 1 or more runs, and --reps at least 1")

    def say(text: str) -> None:
        print(text, flush=True)

    results: dict[int, dict[str, dict[str, float]]] = {}
    builds: dict[int, dict[str, Any]] = {}
    for n in sizes:
        url, info = ensure_store(args.backend, n, args.cache, args.postgres_url, args.rebuild, say)
        builds[n] = info
        say(f"{n:,} runs ({args.backend}): {args.reps} requests per figure")
        with server(url) as base:
            results[n] = measure(base, info, args.reps, say)
    rows = verdicts(results)
    table = render(rows, sizes)
    print()
    print("\n".join(table))
    missed = [r for r in rows if r["verdict"].startswith("MISSED")]
    if args.json:
        args.json.write_text(json.dumps({"backend": args.backend, "builds": builds, "rows": rows}, indent=2) + "\n")
    if args.write_docs:
        given = list(argv if argv is not None else sys.argv[1:])
        if "--json" in given:  # where this run put its JSON is no part of the command
            del given[given.index("--json") : given.index("--json") + 2]
        shown = " ".join(a for a in given if a not in ("--check", "--write-docs"))
        write_docs(table, f"python benchmarks/scale.py {shown}".strip(), builds, args.backend)
    if missed:
        print(f"\n{len(missed)} target(s) missed at {sizes[-1]:,} runs")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
