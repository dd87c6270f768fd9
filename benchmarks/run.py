"""graphtape benchmarks: recording overhead, strict replay speed, tape size.

Run from the repository root with the project's environment::

    python benchmarks/run.py                 # full run (about a minute on 2 vCPU)
    python benchmarks/run.py --quick         # smoke mode, well under 20 s
    python benchmarks/run.py --json out.json # also write every figure as JSON

What is measured (details in ``docs/benchmarks.md``):

1. **Recording overhead per super-step.** A 50-node linear ``StateGraph`` of
   trivial nodes (~1 KB of state) checkpointed by LangGraph's ``SqliteSaver``
   as shipped (baseline) versus the same graph recorded by graphtape, once
   with a ``SqliteSaver`` as shipped passed as the checkpointer and once with
   graphtape's default checkpointer. Both ``durability="sync"`` and the
   default ``"async"``. The graph without a checkpointer is shown for context,
   and so is an A/A control: the baseline against a copy of itself on another
   file, timed in the same loop (how far apart two equal configurations land).
2. **Strict replay vs a live run.** A 10-node graph, each node making one chat
   model call (zero-latency deterministic fake) and one tool call. Baseline:
   a live recorded run; subject: ``tape.replay(run_id, graph, mode="strict")``.
3. **Tape bytes for a 200-turn conversation** (``add_messages`` state, one
   chat node, one thread, one ``invoke`` per turn) versus the bytes of the
   distinct messages.
4. **An agent run** (``create_agent``, 3 LLM + 2 tool calls) against a local
   fake OpenAI server: the recording's overhead in ms per run, beside an A/A
   control (a second unrecorded agent).

Timings interleave every variant within each repetition (in an order shuffled
for each repetition) and report medians; every ratio is computed
against a baseline measured in the same process, in the same loop. Exit
status is 0 unless ``--check`` is given and a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import operator
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import graphtape
from graphtape.events import refs as event_refs
from graphtape.serde import blob_refs
from graphtape.store import codec
from graphtape.store.codec import unpack_event

ROOT = Path(__file__).resolve().parent.parent

WORDS = (
    "the agent checks each order before it answers and the customer waits while a "
    "policy review confirms that our team can ship a faster reply today because "
    "every ticket needs clear context about billing refunds delivery returns"
).split()


# --------------------------------------------------------------------------
# Measurement helpers
# --------------------------------------------------------------------------


def interleave(
    variants: dict[str, Callable[[], Any]],
    reps: int,
    warmup: int = 2,
    check: dict[str, Callable[[Any], None]] | None = None,
) -> dict[str, list[float]]:
    """Wall seconds of each variant, ``reps`` times, interleaved.

    Each repetition runs every variant once, in an order shuffled for that
    repetition (seeded, so a run can be repeated). A rotation was used before:
    it kept every variant right after the same neighbour, and a variant that
    leaves work behind (a background thread, garbage, a WAL to checkpoint)
    always taxed the same next one. ``check[name](result)`` validates a
    variant's result outside the timing.
    """
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    order = random.Random(13)
    for _rep in range(reps):
        for name in order.sample(names, len(names)):
            gc.collect()
            t0 = time.perf_counter()
            out = variants[name]()
            samples[name].append(time.perf_counter() - t0)
            if check and name in check:
                check[name](out)
    return samples


def summary(values: list[float], scale: float = 1.0) -> dict[str, float]:
    """Median and quartiles of ``values * scale``."""
    xs = sorted(v * scale for v in values)
    if len(xs) >= 2:
        q = statistics.quantiles(xs, n=4, method="inclusive")
        p25, p75 = q[0], q[2]
    else:
        p25 = p75 = xs[0]
    return {"median": statistics.median(xs), "p25": p25, "p75": p75, "n": len(xs)}


def paired_ratio(subject: list[float], baseline: list[float]) -> float:
    """Median of per-repetition ratios (the two ran next to each other)."""
    return statistics.median(s / b for s, b in zip(subject, baseline))


def comparison_row(
    benchmark: str,
    unit: str,
    stats: dict[str, dict[str, float]],
    subject: str,
    baseline: str,
    target: float | None,
    *,
    samples: dict[str, list[float]] | None = None,
    subject_name: str | None = None,
    baseline_name: str | None = None,
    delta: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A results row: the medians of ``subject`` and ``baseline``, their ratio, with ``samples`` the paired ratio.

    ``delta`` adds the difference of the medians; ``extra`` fields go before ``target``.
    """
    subj, base = stats[subject]["median"], stats[baseline]["median"]
    row: dict[str, Any] = {
        "benchmark": benchmark,
        "unit": unit,
        "baseline_name": baseline_name or baseline,
        "baseline": base,
        "subject_name": subject_name or subject,
        "subject": subj,
        "ratio": subj / base,
    }
    if samples is not None:
        row["paired_ratio"] = paired_ratio(samples[subject], samples[baseline])
    if delta:
        row["delta"] = subj - base
    row.update(extra)
    row["target"] = target
    return row


def fsync_probe(path: Path, n: int = 10) -> float:
    """Seconds per ``write(4 KiB) + fsync`` on the benchmark's file system."""
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            os.write(fd, block)
            os.fsync(fd)
        return (time.perf_counter() - t0) / n
    finally:
        os.close(fd)


def sqlite_saver(path: Path, synchronous: str | None = None) -> SqliteSaver:
    """LangGraph's ``SqliteSaver`` as shipped (its own WAL setup, synchronous=FULL).

    ``synchronous="NORMAL"`` gives the saver graphtape's default settings, to
    separate graphtape's own cost from the fsyncs it avoids.
    """
    conn = sqlite3.connect(str(path), check_same_thread=False)
    if synchronous:
        conn.execute(f"PRAGMA synchronous={synchronous}")
    return SqliteSaver(conn)


def new_thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": str(uuid.uuid4())}}


# --------------------------------------------------------------------------
# A zero-latency deterministic chat model
# --------------------------------------------------------------------------


def make_model(seed: int = 1, *, paragraphs: bool = False) -> BaseChatModel:
    """A zero-latency seeded model; with ``paragraphs`` its answers are chat-sized (80-160 words)."""
    from graphtape.testing import SeededChatModel

    if not paragraphs:
        return SeededChatModel(seed=seed, latency=0)

    def respond(messages: list[BaseMessage], rng: random.Random, tools: Any) -> AIMessage:
        sentences = [sentence(rng) for _ in range(rng.randint(6, 10))]
        return AIMessage(content=" ".join(sentences))

    return SeededChatModel(seed=seed, latency=0, responder=respond)


def sentence(rng: random.Random, low: int = 8, high: int = 20) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


# --------------------------------------------------------------------------
# 1. Recording overhead per super-step
# --------------------------------------------------------------------------

N_NODES = 50


class LinearState(TypedDict):
    payload: str
    n: int


def linear_graph(n_nodes: int = N_NODES) -> StateGraph:
    """``n_nodes`` trivial nodes in a chain: one super-step each."""

    def node(i: int):
        def step(state: LinearState) -> dict[str, Any]:
            return {"n": state["n"] + 1}

        step.__name__ = f"n{i:02d}"
        return step

    builder = StateGraph(LinearState)
    prev = START
    for i in range(n_nodes):
        builder.add_node(f"n{i:02d}", node(i))
        builder.add_edge(prev, f"n{i:02d}")
        prev = f"n{i:02d}"
    builder.add_edge(prev, END)
    return builder


LINEAR_INPUT = {"payload": "x" * 1000, "n": 0}


def bench_recording(tmp: Path, reps: int) -> dict[str, Any]:
    builder = linear_graph()
    plain = builder.compile()
    baseline = builder.compile(checkpointer=sqlite_saver(tmp / "baseline.db"))
    # the A/A control: the baseline again on a file of its own, timed like every variant
    control = builder.compile(checkpointer=sqlite_saver(tmp / "baseline-again.db"))
    normal = builder.compile(checkpointer=sqlite_saver(tmp / "normal.db", synchronous="NORMAL"))
    tape_user = graphtape.connect(f"sqlite:///{tmp}/tape-user-saver.db")
    tape_default = graphtape.connect(f"sqlite:///{tmp}/tape-default.db")
    rec_user = tape_user.record(plain, name="linear50", checkpointer=sqlite_saver(tmp / "user-saver.db"))
    rec_default = tape_default.record(plain, name="linear50", checkpointer=tape_default.saver)

    def run(target: Any, durability: str) -> Callable[[], Any]:
        return lambda: target.invoke(LINEAR_INPUT, new_thread(), durability=durability)

    def check_output(out: Any) -> None:
        if out["n"] != N_NODES:
            raise AssertionError(f"linear graph ended with n={out['n']}, expected {N_NODES}")

    variants: dict[str, Callable[[], Any]] = {"plain": lambda: plain.invoke(LINEAR_INPUT)}
    for d in ("sync", "async"):
        variants[f"baseline/{d}"] = run(baseline, d)
        variants[f"baseline again/{d}"] = run(control, d)
        variants[f"graphtape+SqliteSaver/{d}"] = run(rec_user, d)
        variants[f"graphtape default/{d}"] = run(rec_default, d)
        variants[f"SqliteSaver NORMAL/{d}"] = run(normal, d)
    probe_file = tmp / "fsync.probe"
    variants["fsync probe"] = lambda: fsync_probe(probe_file)
    probe_results: list[float] = []

    def keep_probe(value: float) -> None:
        probe_results.append(value)

    checks: dict[str, Callable[[Any], None]] = {k: check_output for k in variants if k != "fsync probe"}
    checks["fsync probe"] = keep_probe
    samples = interleave(variants, reps, check=checks)
    samples["fsync probe"] = probe_results  # seconds per fsync, not per run

    for t in (tape_user, tape_default):
        t.close()
    per_step = 1000.0 / N_NODES  # seconds per run -> ms per super-step
    stats = {k: summary(v, 1000.0 if k == "fsync probe" else per_step) for k, v in samples.items()}
    rows = []
    for d in ("sync", "async"):
        base = f"baseline/{d}"
        for subject, label, target in (
            (f"graphtape+SqliteSaver/{d}", "SqliteSaver passed in", 1.05),
            (f"graphtape default/{d}", "default checkpointer", 1.10),
        ):
            rows.append(
                comparison_row(
                    f"1. record, {d}: {label}",
                    "ms/super-step",
                    stats,
                    subject,
                    base,
                    target,
                    samples=samples,
                    baseline_name=f"SqliteSaver as shipped ({d})",
                    delta=True,
                )
            )
    for d in ("sync", "async"):
        rows.append(
            comparison_row(
                f"1. (A/A) {d}: the baseline against itself",
                "ms/super-step",
                stats,
                f"baseline again/{d}",
                f"baseline/{d}",
                None,
                samples=samples,
                baseline_name=f"SqliteSaver as shipped ({d})",
                subject_name=f"the same, another file ({d})",
                delta=True,
            )
        )
    for d in ("sync", "async"):
        base, subject = f"SqliteSaver NORMAL/{d}", f"graphtape default/{d}"
        title = f"1. {d}: default vs same-settings saver"
        rows.append(comparison_row(title, "ms/super-step", stats, subject, base, 1.0, samples=samples, delta=True))
    rows.append(
        comparison_row(
            "1. (ctx) no checkpointer",
            "ms/super-step",
            stats,
            "plain",
            "baseline/sync",
            None,
            subject_name="plain (no checkpointer)",
            baseline_name="SqliteSaver as shipped (sync)",
        )
    )
    return {
        "rows": rows,
        "stats": stats,
        "reps": reps,
        "steps_per_run": N_NODES,
        "fsync_ms": stats["fsync probe"]["median"],
    }


# --------------------------------------------------------------------------
# 2. Strict replay vs a live run
# --------------------------------------------------------------------------

N_CALL_NODES = 10


class NotesState(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]


@tool
def lookup(query: str) -> str:
    """Look the query up in the knowledge base."""
    return f"kb: {len(query)} chars, first word {query.split()[0] if query.split() else '-'}"


def calls_graph(model: BaseChatModel) -> StateGraph:
    """Ten nodes in a chain; each makes one chat model call and one tool call."""

    def node(i: int):
        def step(state: NotesState) -> dict[str, Any]:
            prev = state["notes"][-1] if state["notes"] else state["topic"]
            answer = model.invoke([SystemMessage(f"You are step {i}."), HumanMessage(f"Continue: {prev}")])
            found = lookup.invoke({"query": str(answer.content)})
            return {"notes": [f"{answer.content} | {found}"]}

        step.__name__ = f"step{i}"
        return step

    builder = StateGraph(NotesState)
    prev = START
    for i in range(N_CALL_NODES):
        builder.add_node(f"step{i}", node(i))
        builder.add_edge(prev, f"step{i}")
        prev = f"step{i}"
    builder.add_edge(prev, END)
    return builder


def bench_replay(tmp: Path, reps: int) -> dict[str, Any]:
    builder = calls_graph(make_model(seed=1))
    graph = builder.compile()
    unrecorded = builder.compile(checkpointer=sqlite_saver(tmp / "live-unrecorded.db"))
    tape = graphtape.connect(f"sqlite:///{tmp}/tape-replay.db")
    recorded = tape.record(graph, name="calls10", checkpointer=tape.saver)
    recorded.invoke({"topic": "refunds", "notes": []}, new_thread())
    run_id = recorded.last_run_id
    expected_calls = 2 * N_CALL_NODES

    def check_replay(result: Any) -> None:
        if result.status != "finished" or result.live != 0 or result.served != expected_calls:
            raise AssertionError(
                f"strict replay did not serve everything: status={result.status} served={result.served} "
                f"live={result.live} error={result.error}"
            )

    inp = {"topic": "refunds", "notes": []}
    variants = {
        "live recorded": lambda: recorded.invoke(inp, new_thread()),
        "strict replay": lambda: tape.replay(run_id, graph, mode="strict"),
        "live unrecorded (SqliteSaver)": lambda: unrecorded.invoke(inp, new_thread()),
        "live, no checkpointer": lambda: graph.invoke(inp),
    }
    samples = interleave(variants, reps, check={"strict replay": check_replay})
    last = tape.replay(run_id, graph, mode="strict")
    tape.close()
    stats = {k: summary(v, 1000.0) for k, v in samples.items()}
    base, subj = "live recorded", "strict replay"
    sqlite_live = "live unrecorded (SqliteSaver)"
    rows = [
        comparison_row("2. strict replay vs live recorded", "ms/run", stats, subj, base, 1.2, samples=samples),
        comparison_row("2. live recorded vs unrecorded", "ms/run", stats, base, sqlite_live, 1.10, samples=samples),
        comparison_row("2. strict replay vs live unrecorded", "ms/run", stats, subj, sqlite_live, 0.5, samples=samples),
        comparison_row("2. (ctx) live, no checkpointer", "ms/run", stats, "live, no checkpointer", sqlite_live, None),
    ]
    return {
        "rows": rows,
        "stats": stats,
        "reps": reps,
        "calls_per_run": {"llm": N_CALL_NODES, "tool": N_CALL_NODES},
        "last_replay": {
            "status": last.status,
            "served": last.served,
            "live": last.live,
            "output_matches": last.output_matches,
        },
    }


# --------------------------------------------------------------------------
# 3. Tape bytes for a long conversation
# --------------------------------------------------------------------------


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]


def chat_graph(model: BaseChatModel) -> StateGraph:
    def chat(state: ChatState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(ChatState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    return builder


def distinct_message_bytes(messages: list[BaseMessage]) -> tuple[int, int]:
    """(count, bytes) of the distinct messages, each as ``{"role","content"}`` JSON.

    A message counts once however often it is repeated; its size is the
    UTF-8 length of ``json.dumps({"role": m.type, "content": m.content},
    separators=(",", ":"), ensure_ascii=False)``.
    """
    seen: dict[str, int] = {}
    for m in messages:
        text = json.dumps({"role": m.type, "content": m.content}, separators=(",", ":"), ensure_ascii=False)
        seen[text] = len(text.encode("utf-8"))
    return len(seen), sum(seen.values())


def _stored(conn: sqlite3.Connection, table: str, view: str) -> str:
    """The table that holds the stored rows: SQLite schema v9+ keeps addresses as 16 bytes in
    ``gt_blob_rows``/``gt_chain_rows`` and shows them as 32 hex digits in the views ``gt_blobs``/
    ``gt_chains``; measuring the views would count every address twice its stored size."""
    return table if _has_table(conn, table) else view


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name=?"
    return conn.execute(query, (name,)).fetchone() is not None


def _unpack_blob(enc: str, data: bytes) -> bytes:
    """A stored blob's bytes; also with a graphtape older than the ``d1`` encoding (before/after runs)."""
    unpack = getattr(codec, "unpack_blob", None)
    if unpack is not None:
        return unpack(enc, data)
    return zlib.decompress(data) if enc == "z" else bytes(data)


def tape_bytes(path: Path) -> dict[str, Any]:
    """What the tape occupies in its SQLite file (LangGraph's tables excluded), measured on the
    stored rows (not the views, which show addresses as hex), and which reference each blob is
    there for: every blob is attributed to its first referrer, so an ``unreferenced`` row means
    garbage (or a referrer this function does not know, which is a bug here)."""
    conn = sqlite3.connect(str(path))
    try:
        q = lambda sql: conn.execute(sql).fetchone()  # noqa: E731
        blob_table = _stored(conn, "gt_blob_rows", "gt_blobs")
        chain_table = _stored(conn, "gt_chain_rows", "gt_chains")
        blobs = q(
            "SELECT count(*), coalesce(sum(length(data)),0), "
            f"coalesce(sum(length(hash)+length(enc)+length(data)),0) FROM {blob_table}"
        )
        chains = q(
            f"SELECT count(*), coalesce(sum(length(id)+coalesce(length(parent),0)+length(item)),0) FROM {chain_table}"
        )
        events = q("SELECT count(*), coalesce(sum(length(data)),0) FROM gt_events")
        runs = q("SELECT count(*), coalesce(sum(length(run_id)+length(thread_id)+length(meta)),0) FROM gt_runs")
        by_kind = {
            k: {"count": n, "bytes": b}
            for k, n, b in conn.execute(
                "SELECT kind, count(*), sum(length(data)) FROM gt_events GROUP BY kind ORDER BY 3 DESC"
            )
        }
        # The views give addresses as the store interface does (hex), which is what events hold.
        stored = {h: (enc, bytes(d)) for h, enc, d in conn.execute("SELECT hash, enc, data FROM gt_blobs")}
        blob_sizes = {h: len(d) for h, (_, d) in stored.items()}
        nodes = {i: (p, it) for i, p, it in conn.execute("SELECT id, parent, item FROM gt_chains")}
        seen: set[str] = set()
        by_ref: Counter[str] = Counter()
        ref_count: Counter[str] = Counter()

        def attribute(address: str, referrer: str) -> None:
            if address in blob_sizes and address not in seen:
                seen.add(address)
                by_ref[referrer] += blob_sizes[address]
                ref_count[referrer] += 1

        walked: set[str] = set()

        def chain_items(head: str, referrer: str) -> None:
            at: str | None = head
            while at is not None and at in nodes and at not in walked:
                walked.add(at)
                parent, item = nodes[at]
                attribute(item, referrer)
                at = parent

        # 1. event fields that hold a blob (or chain) address
        for kind, data in conn.execute("SELECT kind, data FROM gt_events ORDER BY run_id, seq"):
            body = unpack_event(data)
            found_b: set[str] = set()
            found_c: set[str] = set()
            event_refs(kind, body, found_b, found_c)
            for field, value in body.items():
                if value in found_b:
                    attribute(value, f"{kind}.{field}")
                elif value in found_c:
                    chain_items(value, "llm request message (chain item)")
        # 2. checkpoints and pending writes of graphtape's saver, when it shares the file
        if _has_table(conn, "gt_checkpoints"):
            for (values,) in conn.execute("SELECT channel_values FROM gt_checkpoints"):
                for address in json.loads(values).values():
                    if isinstance(address, str):
                        attribute(address, "checkpoint channel value")
            for (address,) in conn.execute("SELECT value FROM gt_writes"):
                attribute(address, "pending write")
        # 3. messages and chains that a stored value or view refers to (what garbage collection follows)
        frontier = set(seen)
        while frontier:
            inner_b: set[str] = set()
            inner_c: set[str] = set()
            for address in frontier:
                raw = _unpack_blob(*stored[address])
                if b'"t":"msg"' in raw or b'"$m"' in raw or b'"$chain"' in raw:
                    with contextlib.suppress(ValueError):
                        blob_refs(json.loads(raw), inner_b, inner_c)
            before = set(seen)
            for head in inner_c:
                chain_items(head, "message of a chain in a stored value")
            for address in inner_b:
                attribute(address, "message in a stored value")
            frontier = seen - before
        rest = [h for h in blob_sizes if h not in seen]
        if rest:
            by_ref["unreferenced"] = sum(blob_sizes[h] for h in rest)
            ref_count["unreferenced"] = len(rest)
        by_enc = Counter(enc for enc, _ in stored.values())
        try:
            pages = {
                name: size
                for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC")
            }
            payload = dict(conn.execute("SELECT name, sum(payload) FROM dbstat GROUP BY name"))
        except sqlite3.Error:
            pages, payload = {}, {}
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    finally:
        conn.close()
    vacuum = sqlite3.connect(str(path))
    try:
        vacuum.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        vacuum.execute("VACUUM")
    finally:
        vacuum.close()
    return {
        "tape_bytes": blobs[1] + chains[1] + events[1],
        "gt_blobs": {
            "table": blob_table,
            "rows": blobs[0],
            "data_bytes": blobs[1],
            "row_bytes": blobs[2],
            "rows_by_enc": dict(by_enc.most_common()),
        },
        "gt_chains": {"table": chain_table, "rows": chains[0], "row_bytes": chains[1]},
        "gt_events": {
            "rows": events[0],
            "data_bytes": events[1],
            "payload_bytes": payload.get("gt_event_rows", payload.get("gt_events")),
        },
        "gt_runs": {"rows": runs[0], "approx_bytes": runs[1]},
        "events_by_kind": by_kind,
        "blob_bytes_by_referrer": {k: {"count": ref_count[k], "bytes": v} for k, v in by_ref.most_common()},
        "dbstat_page_bytes": pages,
        "dbstat_payload_bytes": payload,
        "tables_in_file": tables,
        "file_bytes_after_vacuum": path.stat().st_size,
    }


def bench_conversation(tmp: Path, turns: int, *, realistic: bool = True) -> dict[str, Any]:
    """A conversation of ``turns`` turns on one thread.

    ``realistic``: user turns of 1-3 sentences and answers of 6-10 sentences
    (roughly 150 and 700 characters, the size of a typical chat exchange);
    otherwise one short sentence each, where the fixed per-turn bookkeeping
    (ids, checkpoints, addresses) dominates and is reported as context.
    """
    path = tmp / f"tape-conversation-{'chat' if realistic else 'short'}.db"
    tape = graphtape.connect(f"sqlite:///{path}")
    # Checkpoints go to memory so the tape file holds only graphtape's tables.
    recorded = tape.record(
        chat_graph(make_model(seed=1, paragraphs=realistic)).compile(), name="chat", checkpointer=InMemorySaver()
    )
    unrecorded = chat_graph(make_model(seed=1, paragraphs=realistic)).compile(checkpointer=InMemorySaver())
    rec_cfg = {"configurable": {"thread_id": "conversation"}}
    live_cfg = {"configurable": {"thread_id": "conversation"}}
    rng = random.Random(7)
    rec_times: list[float] = []
    live_times: list[float] = []
    # Context (chat-sized only): the same conversation with graphtape's default checkpointer
    # (checkpoints on the tape file) and with a SqliteSaver at the same synchronous=NORMAL.
    saver_times: list[float] = []
    sqlite_times: list[float] = []
    order = [(recorded, rec_cfg, rec_times), (unrecorded, live_cfg, live_times)]
    saver_tape = None
    if realistic:
        saver_tape = graphtape.connect(f"sqlite:///{tmp}/tape-conversation-saver.db")
        own = saver_tape.record(
            chat_graph(make_model(seed=1, paragraphs=True)).compile(), name="chat", checkpointer=saver_tape.saver
        )
        plain = chat_graph(make_model(seed=1, paragraphs=True)).compile(
            checkpointer=sqlite_saver(tmp / "conversation-sqlite.db", synchronous="NORMAL")
        )
        order += [(own, dict(rec_cfg), saver_times), (plain, dict(live_cfg), sqlite_times)]
    out: Any = None
    for turn in range(turns):
        text = f"Turn {turn}: " + " ".join(sentence(rng) for _ in range(rng.randint(1, 3) if realistic else 1))
        # Interleave the recorded conversation with the same one unrecorded (a rotation per turn).
        k = turn % len(order)
        for target, cfg, times in order[k:] + order[:k]:
            t0 = time.perf_counter()
            res = target.invoke({"messages": [HumanMessage(text)]}, cfg)
            times.append(time.perf_counter() - t0)
            if target is recorded:
                out = res
            elif len(res["messages"]) != 2 * (turn + 1):
                raise AssertionError(f"turn {turn}: {len(res['messages'])} messages, expected {2 * (turn + 1)}")
    messages = out["messages"]
    if len(messages) != 2 * turns:
        raise AssertionError(f"conversation has {len(messages)} messages, expected {2 * turns}")
    n_distinct, distinct = distinct_message_bytes(messages)
    n_runs = len(tape.runs(thread_id="conversation", limit=None))
    tape.close()
    sizes = tape_bytes(path)
    files: dict[str, int] = {}
    if saver_tape is not None:
        saver_tape.close()
        for name, file in (("saver", tmp / "tape-conversation-saver.db"), ("sqlite", tmp / "conversation-sqlite.db")):
            conn = sqlite3.connect(file)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
            conn.close()
            files[name] = file.stat().st_size
    label = "chat-sized messages" if realistic else "one-sentence messages"
    rows = [
        {
            "benchmark": f"3. tape bytes, {turns} turns, {label}",
            "unit": "bytes",
            "baseline_name": f"distinct msg bytes ({n_distinct} msgs)",
            "baseline": distinct,
            "subject_name": "blobs + chains + events",
            "subject": sizes["tape_bytes"],
            "ratio": sizes["tape_bytes"] / distinct,
            "target": 3.0 if realistic else None,
        },
        {
            "benchmark": "3. file after VACUUM",
            "unit": "bytes",
            "baseline_name": "distinct msg bytes",
            "baseline": distinct,
            "subject_name": "tape file, gt_* only",
            "subject": sizes["file_bytes_after_vacuum"],
            "ratio": sizes["file_bytes_after_vacuum"] / distinct,
            "target": 3.0 if realistic else None,
        },
        {
            "benchmark": "3. time per turn",
            "unit": "ms/turn",
            "baseline_name": "unrecorded",
            "baseline": statistics.median(live_times) * 1000,
            "subject_name": "recorded",
            "subject": statistics.median(rec_times) * 1000,
            "ratio": statistics.median(rec_times) / statistics.median(live_times),
            "paired_ratio": statistics.median(r / u for r, u in zip(rec_times, live_times)),
            "target": 1.2 if realistic else None,
        },
        {
            "benchmark": "3. (ctx) last 10 turns",
            "unit": "ms/turn",
            "baseline_name": "unrecorded",
            "baseline": statistics.median(live_times[-10:]) * 1000,
            "subject_name": "recorded",
            "subject": statistics.median(rec_times[-10:]) * 1000,
            "ratio": statistics.median(rec_times[-10:]) / statistics.median(live_times[-10:]),
            "target": None,
        },
    ]
    if files:
        rows += [
            {
                "benchmark": "3. (ctx) last 10 turns, default checkpointer",
                "unit": "ms/turn",
                "baseline_name": "SqliteSaver NORMAL",
                "baseline": statistics.median(sqlite_times[-10:]) * 1000,
                "subject_name": "graphtape default",
                "subject": statistics.median(saver_times[-10:]) * 1000,
                "ratio": statistics.median(saver_times[-10:]) / statistics.median(sqlite_times[-10:]),
                "target": None,
            },
            {
                "benchmark": "3. (ctx) file after VACUUM, default checkpointer",
                "unit": "bytes",
                "baseline_name": "SqliteSaver NORMAL's file",
                "baseline": files["sqlite"],
                "subject_name": "tape file (checkpoints + tape)",
                "subject": files["saver"],
                "ratio": files["saver"] / files["sqlite"],
                "target": None,
            },
        ]
    return {
        "rows": rows,
        "turns": turns,
        "runs_recorded": n_runs,
        "distinct_messages": n_distinct,
        "distinct_message_bytes": distinct,
        "sizes": sizes,
        "turn_ms": {
            "recorded": {
                "total": sum(rec_times) * 1000,
                "first10": summary(rec_times[:10], 1000.0),
                "last10": summary(rec_times[-10:], 1000.0),
            },
            "unrecorded": {
                "total": sum(live_times) * 1000,
                "first10": summary(live_times[:10], 1000.0),
                "last10": summary(live_times[-10:], 1000.0),
            },
        },
    }


# --------------------------------------------------------------------------
# 4. An agent-shaped run against a local fake OpenAI server
# --------------------------------------------------------------------------


@tool
def order_status(order_id: str) -> str:
    """The status of an order."""
    return f"order {order_id}: shipped"


@tool
def refund_policy(topic: str) -> str:
    """The refund policy for a topic."""
    return f"policy for {topic}: 30 days"


AGENT_SERVER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from tests.providers import ProviderServer

def brain(call):
    # two tool calls, one per model turn, then an answer: 3 LLM + 2 tool calls per run
    results = sum(1 for m in call.body.get("messages") or [] if m.get("role") == "tool")
    if results == 0:
        return {"tool_calls": [{"name": "order_status", "args": {"order_id": "A-17"}}]}
    if results == 1:
        return {"tool_calls": [{"name": "refund_policy", "args": {"topic": "late delivery"}}]}
    return "Your order A-17 shipped; late deliveries can be refunded within 30 days."

server = ProviderServer().start()
server.keep_alive = True
print(server.openai_base_url, flush=True)
while True:
    if server.pending < 1000:
        server.script(*[brain] * 10000)
    time.sleep(0.5)
"""


@contextlib.contextmanager
def agent_server() -> Any:
    """The suite's fake OpenAI server (tests/providers.py) in a process of its own: its work is not timed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", AGENT_SERVER, str(ROOT)], stdout=subprocess.PIPE, text=True, cwd=str(ROOT)
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError("the fake OpenAI server did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def bench_agent(tmp: Path, reps: int) -> dict[str, Any]:
    """``create_agent`` (3 LLM + 2 tool calls, 7 checkpoints) on ``ChatOpenAI`` against a local fake server.

    Baseline: the agent with ``InMemorySaver``, unrecorded; subject: the same
    agent recorded beside its own ``InMemorySaver`` (the tape on SQLite).
    The figure is the overhead in ms per run. The server runs in its own
    process, so its work does not compete with the run for the GIL.
    """
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    with agent_server() as url:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key="sk-bench", max_retries=0)
        tools = [order_status, refund_policy]
        unrecorded = create_agent(model, tools, checkpointer=InMemorySaver())
        control = create_agent(model, tools, checkpointer=InMemorySaver())  # the A/A control
        tape = graphtape.connect(f"sqlite:///{tmp}/tape-agent.db")
        recorded = tape.record(create_agent(model, tools), name="agent", checkpointer=InMemorySaver())
        question = {"messages": [HumanMessage("Where is my order A-17, and can I get a refund if it is late?")]}

        def run(target: Any) -> Callable[[], Any]:
            return lambda: target.invoke(question, new_thread())

        def check(out: Any) -> None:
            kinds = [type(m).__name__ for m in out["messages"]]
            if kinds.count("AIMessage") != 3 or kinds.count("ToolMessage") != 2:
                raise AssertionError(f"the agent run was not 3 LLM + 2 tool calls: {kinds}")

        try:
            samples = interleave(
                {
                    "unrecorded (InMemorySaver)": run(unrecorded),
                    "recorded": run(recorded),
                    "unrecorded again": run(control),
                },
                reps,
                check={"unrecorded (InMemorySaver)": check, "recorded": check, "unrecorded again": check},
            )
        finally:
            tape.close()
    stats = {k: summary(v, 1000.0) for k, v in samples.items()}
    base, subj = "unrecorded (InMemorySaver)", "recorded"
    title = "4. agent run: recording overhead"
    rows = [
        comparison_row(title, "ms/run", stats, subj, base, None, samples=samples, delta=True, target_delta=2.0),
        comparison_row(
            "4. (A/A) agent run: unrecorded against itself",
            "ms/run",
            stats,
            "unrecorded again",
            base,
            None,
            samples=samples,
            subject_name="another unrecorded agent (InMemorySaver)",
            delta=True,
            delta_first=True,
        ),
    ]
    return {"rows": rows, "stats": stats, "reps": reps}


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    from importlib import metadata

    versions = {}
    for dist in ("graphtape", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langchain-core"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    commit = None
    with contextlib.suppress(Exception):
        commit = (
            subprocess.run(
                ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
            or None
        )
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "versions": versions,
        "git": commit,
    }


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return f"{value:,.0f} B"
    return f"{value:.3f} {unit.split('/')[0]}" if value < 10 else f"{value:.1f} {unit.split('/')[0]}"


def shows_delta(row: dict[str, Any]) -> bool:
    """Whether the row is read as a difference (ms of overhead) rather than a ratio."""
    return row.get("target_delta") is not None or bool(row.get("delta_first"))


def verdict(row: dict[str, Any]) -> str:
    if row.get("target_delta") is not None:
        return "PASS" if row["delta"] <= row["target_delta"] else "FAIL"
    if row.get("target") is None:
        return "context"
    return "PASS" if row["ratio"] <= row["target"] else "FAIL"


def target_text(row: dict[str, Any]) -> str:
    if row.get("target_delta") is not None:
        return f"<= +{row['target_delta']:g} {row['unit'].split('/')[0]}"
    return f"<= {row['target']:.2f}x" if row.get("target") is not None else "-"


def render(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(140, Console().width))
    env = results["environment"]
    mode = "QUICK (smoke: few repetitions, figures indicative only)" if results["quick"] else "full"
    console.print(
        f"[bold]graphtape benchmarks[/bold] - mode {mode}; Python {env['python']}, {env['cpus']} CPUs, "
        f"langgraph {env['versions'].get('langgraph')}, graphtape {env['versions'].get('graphtape')} "
        f"({env['git']})"
    )
    table = Table(title="Results (medians; ratio = subject / baseline)", show_lines=False)
    for col, just in (
        ("benchmark", "left"),
        ("baseline", "right"),
        ("subject", "right"),
        ("ratio", "right"),
        ("target", "right"),
        ("pass/fail", "center"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for row in results["rows"]:
        v = verdict(row)
        style = {"PASS": "green", "FAIL": "bold red"}.get(v, "dim")
        table.add_row(
            row["benchmark"],
            f"{fmt(row['baseline'], row['unit'])}\n[dim]{row['baseline_name']}[/dim]",
            f"{fmt(row['subject'], row['unit'])}\n[dim]{row['subject_name']}[/dim]",
            (f"{row['delta']:+.2f} {row['unit'].split('/')[0]}\n" if shows_delta(row) else "")
            + f"{row['ratio']:.2f}x"
            + (f"\n[dim]paired {row['paired_ratio']:.2f}x[/dim]" if row.get("paired_ratio") else ""),
            target_text(row),
            f"[{style}]{v}[/{style}]",
        )
    console.print(table)
    console.print(
        "[dim]ratio = subject median / baseline median, both measured interleaved in this run; 'paired' = median "
        "of the per-repetition ratios (subject and baseline ran back to back). "
        "1: ms per super-step, 50-node linear graph, ~1 KB state; 'SqliteSaver as shipped' = WAL + "
        "synchronous=FULL; 'default checkpointer' = graphtape's SqliteSaver on the tape file with "
        "synchronous=NORMAL; 'same-settings saver' = a plain SqliteSaver with synchronous=NORMAL (no graphtape). "
        "'(A/A)' rows time the baseline against an identical copy of itself in the same loop: how far apart "
        "two equal configurations land in this run, the noise to read the other ratios against. "
        "2: ms per run of 10 nodes x (1 LLM call + 1 tool call), zero-latency model. "
        "3: distinct msg bytes = sum of UTF-8 len(json({role, content})) over distinct messages; "
        "tape bytes = sum(length(data)) of gt_blob_rows + id/parent/item lengths of gt_chain_rows (addresses "
        "as their stored 16 bytes) + sum(length(gt_events.data)).[/dim]"
    )

    details = Table(title="Timing details (median, p25-p75)")
    details.add_column("benchmark")
    details.add_column("variant")
    details.add_column("median", justify="right")
    details.add_column("p25-p75", justify="right")
    details.add_column("n", justify="right")
    for key, unit in (("recording", "ms/super-step"), ("replay", "ms/run")):
        bench = results["benchmarks"].get(key)
        if not bench:
            continue
        for name, s in bench["stats"].items():
            u = "ms/fsync" if name == "fsync probe" else unit
            details.add_row(key, name, f"{s['median']:.3f} {u}", f"{s['p25']:.3f}-{s['p75']:.3f}", str(s["n"]))
    console.print(details)

    conv = results["benchmarks"].get("conversation")
    if conv:
        sizes = conv["sizes"]
        where = Table(
            title=f"3. Where the tape bytes go ({conv['turns']} turns, {conv['runs_recorded']} runs; "
            f"distinct message bytes {conv['distinct_message_bytes']:,})"
        )
        where.add_column("part")
        where.add_column("rows", justify="right")
        where.add_column("bytes", justify="right")
        where.add_column("x distinct", justify="right")
        d = conv["distinct_message_bytes"]
        for ref, v in sizes["blob_bytes_by_referrer"].items():
            where.add_row(f"gt_blobs referenced by {ref}", str(v["count"]), f"{v['bytes']:,}", f"{v['bytes'] / d:.2f}")
        encs = ", ".join(f"{enc} {n}" for enc, n in sizes["gt_blobs"]["rows_by_enc"].items())
        where.add_row(f"[dim]gt_blobs rows by enc: {encs}[/dim]", "", "", "")
        where.add_row(
            f"{sizes['gt_chains']['table']} rows",
            str(sizes["gt_chains"]["rows"]),
            f"{sizes['gt_chains']['row_bytes']:,}",
            f"{sizes['gt_chains']['row_bytes'] / d:.2f}",
        )
        for kind, v in sizes["events_by_kind"].items():
            where.add_row(f"gt_events.data kind={kind}", str(v["count"]), f"{v['bytes']:,}", f"{v['bytes'] / d:.2f}")
        where.add_row(
            "[bold]total[/bold]",
            "",
            f"[bold]{sizes['tape_bytes']:,}[/bold]",
            f"[bold]{sizes['tape_bytes'] / d:.2f}[/bold]",
        )
        console.print(where)
        tm = conv["turn_ms"]
        console.print(
            f"3. time per turn, recorded: first 10 turns {tm['recorded']['first10']['median']:.2f} ms, last 10 "
            f"{tm['recorded']['last10']['median']:.2f} ms (total {tm['recorded']['total'] / 1000:.2f} s); "
            f"unrecorded: {tm['unrecorded']['first10']['median']:.2f} / {tm['unrecorded']['last10']['median']:.2f} ms "
            f"(total {tm['unrecorded']['total'] / 1000:.2f} s)"
        )
    console.print(
        f"fsync probe (4 KiB write + fsync, same run): "
        f"{results['benchmarks'].get('recording', {}).get('fsync_ms', float('nan')):.3f} ms"
    )


DOCS = ROOT / "docs" / "benchmarks.md"
DOCS_BEGIN = "<!-- run.py --write-docs: begin -->"
DOCS_END = "<!-- run.py --write-docs: end -->"


def run_once(tmp: Path, only: set[str], reps: int, turns: int) -> dict[str, Any]:
    benchmarks: dict[str, Any] = {}
    if "1" in only:
        benchmarks["recording"] = bench_recording(tmp, reps)
    if "2" in only:
        benchmarks["replay"] = bench_replay(tmp, reps)
    if "3" in only:
        benchmarks["conversation"] = bench_conversation(tmp, turns)
        short = bench_conversation(tmp, turns, realistic=False)
        benchmarks["conversation_short"] = {**short, "rows": short["rows"][:1]}
    if "4" in only:
        benchmarks["agent"] = bench_agent(tmp, reps)
    return benchmarks


def combine(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The rows of the last run, each with every run's ratio (and delta) beside it: the spread.

    A target counts as met only if every run met it: with ``--runs 3`` one lucky run (the
    machine's noise can move a figure by as much as a target's margin: see the A/A rows) does
    not make a PASS, and ``--check`` fails if any run missed.
    """
    rows = [dict(r) for r in runs[-1]]
    for i, row in enumerate(rows):
        row["run_ratios"] = [r[i]["ratio"] for r in runs]
        if shows_delta(row):
            row["run_deltas"] = [r[i]["delta"] for r in runs]
        row["verdict"] = "FAIL" if any(verdict(r[i]) == "FAIL" for r in runs) else verdict(row)
    return rows


def markdown(results: dict[str, Any], command: str) -> str:
    """The results as the markdown block docs/benchmarks.md shows (``--write-docs``)."""
    env = results["environment"]
    lines = [
        DOCS_BEGIN,
        "",
        f"`{command}` on {time.strftime('%Y-%m-%d', time.gmtime())} ({env['cpus']} CPUs, Python {env['python']}, "
        f"langgraph {env['versions'].get('langgraph')}, SQLite {env['sqlite']}, commit {env['git']}); "
        f"{results['reps']} interleaved repetitions, {results['turns']} turns, {results['runs']} run(s): "
        "*runs* lists every run's ratio (or overhead); a target is met (PASS) only if every run met it.",
        "",
        "| benchmark | baseline | subject | ratio (paired) | runs | target | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        paired = f" ({row['paired_ratio']:.2f}x)" if row.get("paired_ratio") else ""
        if row.get("run_deltas"):
            spread = " / ".join(f"{d:+.2f}" for d in row["run_deltas"])
            ratio = f"{row['delta']:+.2f} ms ({row['ratio']:.2f}x)"
        else:
            spread = " / ".join(f"{x:.2f}" for x in row.get("run_ratios", [row["ratio"]]))
            ratio = f"{row['ratio']:.2f}x{paired}"
        lines.append(
            f"| {row['benchmark']} | {fmt(row['baseline'], row['unit'])} {row['baseline_name']} "
            f"| {fmt(row['subject'], row['unit'])} {row['subject_name']} | {ratio} | {spread} "
            f"| {target_text(row)} | {row['verdict']} |"
        )
    lines += ["", DOCS_END]
    return "\n".join(lines)


def write_docs(block: str, path: Path = DOCS) -> None:
    text = path.read_text() if path.exists() else ""
    if DOCS_BEGIN in text and DOCS_END in text:
        head, rest = text.split(DOCS_BEGIN, 1)
        tail = rest.split(DOCS_END, 1)[1]
        text = head + block + tail
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + block + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: few repetitions, 50-turn conversation")
    parser.add_argument("--json", metavar="PATH", help="also write all figures to this JSON file")
    parser.add_argument("--reps", type=int, help="repetitions per variant (default 30, quick 4)")
    parser.add_argument("--turns", type=int, help="conversation turns (default 200, quick 50)")
    parser.add_argument("--only", default="1,2,3,4", help="comma-separated benchmarks to run (default 1,2,3,4)")
    parser.add_argument("--runs", type=int, default=1, help="run everything this many times: the spread (default 1)")
    parser.add_argument("--check", action="store_true", help="exit with status 1 if a target is missed")
    parser.add_argument(
        "--write-docs",
        nargs="?",
        const=str(DOCS),
        metavar="PATH",
        help=f"replace the results table in {DOCS.relative_to(ROOT)} (or PATH) with this run's",
    )
    args = parser.parse_args(argv)
    reps = args.reps or (4 if args.quick else 30)
    turns = args.turns or (50 if args.quick else 200)
    only = {s.strip() for s in args.only.split(",") if s.strip()}

    t0 = time.perf_counter()
    all_rows: list[list[dict[str, Any]]] = []
    benchmarks: dict[str, Any] = {}
    for _ in range(max(1, args.runs)):
        with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="graphtape-bench-") as d:
            warnings.simplefilter("ignore")  # LangGraph beta/deprecation notices are not results
            benchmarks = run_once(Path(d), only, reps, turns)
        rows = [row for b in benchmarks.values() for row in b["rows"]]
        for row in rows:
            row["verdict"] = verdict(row)
        all_rows.append(rows)
    rows = combine(all_rows)
    results = {
        "quick": args.quick,
        "reps": reps,
        "turns": turns,
        "runs": len(all_rows),
        "elapsed_s": time.perf_counter() - t0,
        "environment": environment(),
        "rows": rows,
        "benchmarks": benchmarks,
    }
    render(results)
    print(f"elapsed: {results['elapsed_s']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    if args.write_docs:
        given = argv if argv is not None else sys.argv[1:]
        shown = " ".join(a for a in given if a not in ("--check", args.write_docs))
        write_docs(markdown(results, f"python benchmarks/run.py {shown}".strip()), Path(args.write_docs))
    missed = [r for r in rows if r["verdict"] == "FAIL"]
    if args.check and missed:
        print("missed targets: " + "; ".join(f"{r['benchmark']} ({target_text(r)})" for r in missed))
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
