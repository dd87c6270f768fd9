"""``graphtape stats``: figures on a small recorded set, checked against a naive recount.

Every test runs on each backend. Stuck and orphaned runs are written
directly (a ``running`` run with an old open task, a lease held by
"someone").
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid

import pytest
from langchain_core.messages import HumanMessage
from typer.testing import CliRunner

from graphtape.cli import app
from graphtape.events import refs as event_refs
from graphtape.runtime.stats import StatsCache, Summary, collect_stats
from graphtape.serde import blob_refs
from graphtape.store.base import EventRow, RunRecord, WriteBatch
from tests import graphs

ENV = {"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb", "GRAPHTAPE_URL": None}


def record_set(tape) -> list[str]:
    """Two linear runs on one thread, one on another, and an agent loop: four finished runs."""
    ids = []
    linear = tape.record(graphs.build_linear(), name="linear")
    for thread in ("a", "a", "b"):
        linear.invoke({"topic": ""}, {"configurable": {"thread_id": thread}})
        ids.append(linear.last_run_id)
    agent = tape.record(graphs.build_agent(), name="agent")
    agent.invoke({"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": "chat"}})
    ids.append(agent.last_run_id)
    return ids


def closure(store, blobs: set[str], chains: set[str]) -> int:
    """Bytes of the blobs, the chains' items and what they refer to: the slow, obvious way."""
    seen: set[str] = set()
    todo_b, todo_c = set(blobs), set(chains)
    while todo_b or todo_c:
        for head in list(todo_c):
            todo_b.update(store.get_chain(head))
        todo_c = set()
        for h in list(todo_b - seen):
            seen.add(h)
            data = store.get_blob(h)
            try:
                blob_refs(json.loads(data), todo_b, todo_c)
            except ValueError:
                pass
        todo_b -= seen
    return sum(len(store.get_blob(h)) for h in seen)


def naive_tape_bytes(store, run_id: str) -> int:
    blobs: set[str] = set()
    chains: set[str] = set()
    size = 0
    for ev in store.events(run_id):
        size += len(json.dumps(ev.data, separators=(",", ":"), sort_keys=True).encode())
        event_refs(ev.kind, ev.data, blobs, chains)
    return size + closure(store, blobs, chains)


def rank(values, q):
    values = sorted(values)
    return values[max(0, math.ceil(q * len(values)) - 1)]


def write_run(
    tape,
    *,
    thread: str,
    status: str = "running",
    events: list[tuple[str, float, dict]] = (),
    started: float | None = None,
) -> str:
    rid = str(uuid.uuid4())
    started = started if started is not None else time.time() - 3600
    tape.store.write(
        WriteBatch(
            new_runs=[
                RunRecord(
                    run_id=rid,
                    thread_id=thread,
                    graph="g",
                    status=status,
                    started_at=started,
                    ended_at=None if status == "running" else started + 1,
                )
            ],
            events=[EventRow(rid, i, kind, ts, data) for i, (kind, ts, data) in enumerate(events)],
        )
    )
    return rid


def test_stats_on_a_recorded_set(tape):
    ids = record_set(tape)
    store = tape.store
    stats = collect_stats(tape)

    assert stats.runs_by_status["finished"] == 4 and stats.runs_total == 4
    assert stats.sampled_runs == 4 and stats.stuck_threads == [] and stats.orphaned_runs == 0

    sizes = [naive_tape_bytes(store, rid) for rid in ids]
    assert stats.run_tape_bytes == Summary(
        count=4, sum=sum(sizes), p50=rank(sizes, 0.5), p95=rank(sizes, 0.95), max=max(sizes)
    )
    rows = store.list_checkpoints()
    cps = [len(r.body) + closure(store, set(r.values.values()), set()) for r in rows]
    assert stats.sampled_checkpoints == len(rows) > 0
    assert (stats.checkpoint_bytes.count, stats.checkpoint_bytes.max, stats.checkpoint_bytes.p50) == (
        len(cps),
        max(cps),
        rank(cps, 0.5),
    )

    # every run recorded its store writes
    metas = [tape.run(rid).meta["write_ms"] for rid in ids]
    assert all(m["n"] >= 1 and 0 <= m["p50"] <= m["p95"] <= m["max"] for m in metas)
    assert stats.write_latency.count == sum(m["n"] for m in metas)
    assert stats.write_latency.max == pytest.approx(max(m["max"] for m in metas) / 1000)
    assert 0 < stats.write_latency.p50 <= stats.write_latency.p95 <= stats.write_latency.max

    nodes = stats.node_durations
    assert {k: v.count for k, v in nodes.items()} == {"start": 3, "write": 3, "rate": 3, "agent": 2, "tools": 1}
    for node, s in nodes.items():
        durations = [
            e.data["duration"]
            for rid in ids
            for e in store.events(rid, ["task_finished", "task_started"])
            if e.kind == "task_finished" and _node_of(store, rid, e.data["task"]) == node
        ]
        assert (s.p50, s.p95, s.max, s.count) == (
            rank(durations, 0.5),
            rank(durations, 0.95),
            max(durations),
            len(durations),
        )


def _node_of(store, run_id, task):
    return next(e.data["node_path"] for e in store.events(run_id, ["task_started"]) if e.data["task"] == task)


def test_size_warning_and_sampling(tape):
    ids = record_set(tape)
    sizes = {rid: naive_tape_bytes(tape.store, rid) for rid in ids}
    threshold = sorted(sizes.values())[1]  # two or three runs are over it
    stats = collect_stats(tape, size_warning=threshold)
    over = sorted(((r, b) for r, b in sizes.items() if b > threshold), key=lambda x: (-x[1], x[0]))
    assert stats.large_runs_count == len(over) and stats.large_runs == over
    assert stats.large_checkpoints_count == sum(1 for *_, b in stats.large_checkpoints)
    assert collect_stats(tape, size_warning=10**9).large_runs_count == 0

    newest = collect_stats(tape, limit_runs=1)
    assert newest.sampled_runs == 1 and newest.sampled_checkpoints == 1
    assert newest.run_tape_bytes.max == sizes[ids[-1]]
    assert newest.runs_by_status["finished"] == 4  # counts are over every run

    cache = StatsCache()
    first = collect_stats(tape, cache=cache, now=1e10).to_dict()
    assert collect_stats(tape, cache=cache, now=1e10).to_dict() == first == collect_stats(tape, now=1e10).to_dict()


def test_stuck_and_orphaned_threads(tape):
    now = time.time()
    # alive (lease held) and inside a node for 20 minutes
    stuck = write_run(
        tape,
        thread="T",
        events=[
            ("run_started", now - 1500, {}),
            ("task_started", now - 1400, {"node_path": "plan", "step": 1, "task": "plan:1"}),
            ("task_finished", now - 1300, {"task": "plan:1", "duration": 100.0}),
            ("task_started", now - 1200, {"node_path": "agent/llm", "step": 2, "task": "agent:2|llm:3"}),
        ],
    )
    assert tape.store.acquire_lease("thread:T", "someone", ttl=60) is not None
    # alive, between steps, last event 10 minutes ago
    idle = write_run(tape, thread="U", events=[("run_started", now - 600, {})])
    tape.store.acquire_lease("thread:U", "someone-else", ttl=60)
    # alive and busy, but only for a minute
    write_run(tape, thread="V", events=[("task_started", now - 60, {"node_path": "x", "task": "x:1"})])
    tape.store.acquire_lease("thread:V", "someone", ttl=60)
    # nobody holds the lease: the process died
    write_run(tape, thread="W", events=[("task_started", now - 5000, {"node_path": "x", "task": "x:1"})])

    stats = collect_stats(tape, stuck_after=300)
    assert stats.runs_by_status["running"] == 4 and stats.sampled_runs == 0
    assert [(s.thread_id, s.run_id, s.node, s.owner) for s in stats.stuck_threads] == [
        ("T", stuck, "agent/llm", "someone"),
        ("U", idle, None, "someone-else"),
    ]
    assert stats.stuck_threads[0].seconds == pytest.approx(1200, abs=30)
    assert stats.orphaned_runs == 1
    assert [s.thread_id for s in collect_stats(tape, stuck_after=900).stuck_threads] == ["T"]
    text = stats.to_prometheus()
    assert "graphtape_stuck_threads 2\n" in text and "graphtape_orphaned_runs 1\n" in text
    assert f'graphtape_stuck_thread_seconds{{thread="T",run="{stuck}",node="agent/llm"}}' in text


SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r'(?:\{(?P<labels>[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*)\})?'
    r" (?P<value>[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|NaN|Inf))$"
)
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_exposition(text: str) -> dict[tuple[str, tuple], float]:
    """Check every line of a text exposition and return ``{(name, labels): value}``."""
    assert text.endswith("\n")
    samples: dict[tuple[str, tuple], float] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert re.match(r"^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* \S", line), line
            continue
        if line.startswith("# TYPE "):
            m = re.match(r"^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|summary|histogram|untyped)$", line)
            assert m, line
            assert m.group(1) not in types, f"two TYPE lines for {m.group(1)}"
            types[m.group(1)] = m.group(2)
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name = m.group("name")
        family = re.sub(r"_(sum|count)$", "", name)
        assert name in types or family in types, f"{name} has no TYPE"
        labels = tuple(LABEL.findall(m.group("labels") or ""))
        unescaped = tuple(
            (k, re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), v)) for k, v in labels
        )
        key = (name, unescaped)
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(m.group("value"))
    return samples


def test_prometheus_text_parses_and_escapes_labels(tape):
    record_set(tape)
    weird = 'we"ird\\node\nname'
    now = time.time()
    write_run(
        tape,
        thread="x",
        status="finished",
        started=now - 10,
        events=[
            ("task_started", now - 9, {"node_path": weird, "task": "w:1"}),
            ("task_finished", now - 8, {"task": "w:1", "duration": 0.25}),
        ],
    )
    stats = collect_stats(tape)
    text = stats.to_prometheus()
    samples = parse_exposition(text)
    assert samples[("graphtape_runs", (("status", "finished"),))] == 5
    assert samples[("graphtape_runs", (("status", "running"),))] == 0
    assert samples[("graphtape_run_tape_bytes", (("quantile", "0.5"),))] == stats.run_tape_bytes.p50
    assert samples[("graphtape_run_tape_bytes", (("quantile", "1"),))] == stats.run_tape_bytes.max
    assert samples[("graphtape_run_tape_bytes_count", ())] == 5
    assert samples[("graphtape_checkpoint_bytes_count", ())] == stats.checkpoint_bytes.count
    assert samples[("graphtape_write_latency_seconds", (("quantile", "0.95"),))] == stats.write_latency.p95
    assert (
        samples[("graphtape_node_duration_seconds", (("node", "write"), ("quantile", "0.5")))]
        == stats.node_durations["write"].p50
    )
    assert samples[("graphtape_node_duration_seconds", (("node", weird), ("quantile", "1")))] == 0.25
    assert samples[("graphtape_node_duration_seconds_count", (("node", weird),))] == 1
    assert samples[("graphtape_size_warnings_total", (("kind", "run_tape"),))] == 0
    assert samples[("graphtape_stuck_threads", ())] == 0
    assert 'node="we\\"ird\\\\node\\nname"' in text

    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["graphtape_run_tape_bytes"].type == "summary"
    node_labels = {s.labels.get("node") for s in families["graphtape_node_duration_seconds"].samples}
    assert weird in node_labels


def test_empty_store(tape):
    stats = collect_stats(tape)
    assert stats.runs_total == 0 and stats.run_tape_bytes == Summary() and stats.write_latency == Summary()
    samples = parse_exposition(stats.to_prometheus())
    assert samples[("graphtape_run_tape_bytes_count", ())] == 0
    assert ("graphtape_run_tape_bytes", (("quantile", "0.5"),)) not in samples


def test_summary_percentiles():
    s = Summary.of(range(1, 101))
    assert (s.count, s.sum, s.p50, s.p95, s.max) == (100, 5050, 50, 95, 100)
    assert Summary.of([7]).p95 == 7 and Summary.of([]) == Summary()


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------


def cli(url: str, *args: str):
    return CliRunner().invoke(app, ["--url", url, *args], env=ENV)


def test_cli_stats(tape, store_url):
    ids = record_set(tape)
    write_run(tape, thread="T", events=[("task_started", time.time() - 900, {"node_path": "slow", "task": "s:1"})])
    tape.store.acquire_lease("thread:T", "worker-7", ttl=60)
    write_run(tape, thread="dead", events=[("run_started", time.time() - 900, {})])

    result = cli(store_url, "stats", "--size-warning", "1000")
    assert result.exit_code == 0, result.stdout + result.stderr
    out = result.stdout
    assert "6 run(s): 2 running, 4 finished" in out
    assert "run tape" in out and "checkpoint" in out and "store write" in out and "node write" in out
    assert "large run" in out
    assert "1 stuck thread(s)" in out and "slow" in out and "worker-7" in out
    assert "1 orphaned run(s)" in out and "graphtape recover" in out

    data = json.loads(cli(store_url, "stats", "--json", "--stuck-after", "2000").stdout)
    assert data["runs"] == {
        "total": 6,
        "by_status": {"running": 2, "finished": 4, "interrupted": 0, "failed": 0, "diverged": 0, "crashed": 0},
    }
    assert data["stuck_threads"] == [] and data["orphaned_runs"] == 1 and data["sampled_runs"] == len(ids)
    assert set(data["node_duration_seconds"]) == {"start", "write", "rate", "agent", "tools"}

    text = cli(store_url, "stats", "--prometheus", "--limit", "2").stdout
    samples = parse_exposition(text)
    assert samples[("graphtape_sampled_runs", ())] == 2 and samples[("graphtape_stuck_threads", ())] == 1


def test_cli_stats_errors(store_url):
    for args, message in [
        (("--json", "--prometheus"), "not both"),
        (("--stuck-after", "-1"), "must be 0 or more"),
    ]:
        result = cli(store_url, "stats", *args)
        assert result.exit_code == 2, result.stdout
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
