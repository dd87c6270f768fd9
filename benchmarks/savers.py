"""graphtape's own checkpoint saver against LangGraph's savers, on SQLite, PostgreSQL and Redis.

Run from the repository root with the project's environment::

    python benchmarks/savers.py                          # full run (several minutes on 2 vCPU)
    python benchmarks/savers.py --quick                  # smoke mode, about a minute
    python benchmarks/savers.py --json out.json          # also write every figure as JSON
    python benchmarks/savers.py --backends sqlite,redis  # only some backends
    python benchmarks/savers.py --profile                # also cProfile graphtape's recorded runs
    python benchmarks/savers.py --only 1                 # only some benchmarks (1 steps, 2 bytes, 3 threads)

Servers: ``--postgres-url`` (default ``GRAPHTAPE_TEST_POSTGRES_URL`` or
``postgresql://postgres@127.0.0.1:5432/test``) and ``--redis-url`` (default
``GRAPHTAPE_TEST_REDIS_URL`` or ``redis://127.0.0.1:6379/15``). Every store
is made fresh (a temporary file, a new PostgreSQL schema, a new Redis key
prefix) and removed at the end. A backend whose server or store cannot be
opened is reported as skipped; the others still run.

What is measured, per backend (details in ``docs/benchmarks.md``):

1. **Per-super-step cost of a recorded run.** A 50-node linear graph of
   trivial nodes, ``durability="sync"``, recorded with graphtape's own saver
   (``tape.record(graph, checkpointer=tape.saver)``) versus the same graph,
   unrecorded, on LangGraph's saver for that backend: ``SqliteSaver`` as
   shipped (WAL, ``synchronous=FULL``), ``PostgresSaver``, and the plain-Redis
   ``RedisSaver`` of ``langgraph-checkpoint-plainredis`` (LangGraph's own
   Redis saver needs Redis modules). Two states: ~1 KB, and a 200 KB value
   that never changes plus a counter that changes every step. Context in
   the same loop: no checkpointer, ``InMemorySaver`` (LangGraph's own
   bookkeeping), on SQLite a ``SqliteSaver`` with ``synchronous=NORMAL``
   (graphtape's durability setting), and a 4 KiB write+fsync probe:
   fsync-bound figures are also given in fsyncs, since fsync latency on
   these virtual machines varies by 10x between runs.
2. **Bytes per checkpoint** of the 200 KB-state run: graphtape's checkpoint
   rows (checkpoints + pending writes + the blobs they refer to) versus the
   LangGraph saver's tables, for a first run on a thread and (context) a
   second run on the same thread. The rest of the tape (events, runs, run
   input/output blobs) is shown separately.
3. **History listing of one thread of 10,000 checkpoints** (``--quick``:
   1,000): ``tape.history(thread)`` versus ``get_state_history(config)`` on
   the recorded graph (both on graphtape's saver); LangGraph's saver's own
   ``get_state_history`` on a thread of the same length for context.
4. **``get_state`` at an old checkpoint** (the 10th of the thread) on
   threads of 100, 1,000 and 10,000 checkpoints (``--quick``: 100, 1,000):
   it must not depend on the thread's length.

Timings interleave every variant within each repetition (the starting
variant rotates) and report medians; every ratio is computed against a
baseline measured in the same process and loop. When a target is missed,
the script times the parts of a recorded run (saver, serialisation, store
writes, run start/finish, recorder) and prints where the time goes.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import dataclasses
import functools
import gc
import io
import json
import os
import pstats
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape.runtime.saver import saver_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import LinearState, fsync_probe, interleave, linear_graph, paired_ratio, summary  # noqa: F401
from run import environment as _base_environment

BACKENDS = ("sqlite", "postgresql", "redis")
POSTGRES_URL = os.environ.get("GRAPHTAPE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("GRAPHTAPE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

N_NODES = 50
LARGE_BYTES = 200_000

#: Targets (subject / baseline), from issue 13. None: context only.
STEP_TARGETS = {
    ("sqlite", "small"): 1.0,
    ("sqlite", "large"): 0.5,
    ("postgresql", "small"): 1.0,
    ("postgresql", "large"): 0.25,
    ("redis", "small"): 0.9,
    ("redis", "large"): 0.9,
}
BYTES_TARGET = {"sqlite": 0.1}
#: benchmarks/history.py: a listing must take at most 1/40 of get_state_history
HISTORY_TARGET = 1 / 40
#: "flat in thread length": 10,000 checkpoints may cost at most this much more than 100 (noise)
FLAT_TARGET = 1.5

LANGGRAPH_SAVER = {"sqlite": "SqliteSaver", "postgresql": "PostgresSaver", "redis": "plain-Redis RedisSaver"}

WORDS = (
    "the agent checks each order before it answers and the customer waits while a "
    "policy review confirms that our team can ship a faster reply today because "
    "every ticket needs clear context about billing refunds delivery returns"
).split()


def words(n_chars: int, seed: int) -> str:
    """Text of about ``n_chars`` characters (compresses like prose, ~3-4x with zlib)."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < n_chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_chars]


# --------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------


INPUTS = {
    "small": {"payload": words(1000, 1), "n": 0},
    "large": {"payload": words(LARGE_BYTES, 2), "n": 0},
}
SIZE_LABEL = {"small": "~1 KB state", "large": "200 KB unchanged value"}


class Counter1(TypedDict):
    n: int


def loop_builder(steps: int) -> StateGraph:
    """One node on a self-loop: ``steps + 2`` checkpoints per run (input, step 0, one per step)."""

    def inc(state: Counter1) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    b = StateGraph(Counter1)
    b.add_node(inc)
    b.add_edge(START, "inc")
    b.add_conditional_edges("inc", lambda s: "inc" if s["n"] < steps else END, ["inc", END])
    return b


def interleave_light(variants: dict[str, Callable[[], Any]], reps: int, warmup: int = 2) -> dict[str, list[float]]:
    """``interleave`` for sub-millisecond calls: one ``gc.collect()`` per round, the collector off while timing.

    A full collection with thousands of checkpoints in memory takes tens of
    milliseconds: once per sample it would dominate the benchmark's run time.
    """
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    enabled = gc.isenabled()
    try:
        for rep in range(reps):
            gc.collect()
            gc.disable()
            for j in range(len(names)):
                name = names[(rep + j) % len(names)]
                t0 = time.perf_counter()
                variants[name]()
                samples[name].append(time.perf_counter() - t0)
            if enabled:
                gc.enable()
    finally:
        if enabled:
            gc.enable()
    return samples


def new_thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": str(uuid.uuid4())}}


def with_query(url: str, param: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{param}"


# --------------------------------------------------------------------------
# Backends: fresh stores and LangGraph savers, their sizes, cleanup
# --------------------------------------------------------------------------


class Backend:
    """Makes fresh graphtape stores and LangGraph savers on one kind of server; removes them at the end."""

    name = ""
    #: whether a commit waits for an fsync at the default settings
    baseline_fsyncs = False
    subject_fsyncs = False

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.tapes: list[graphtape.Tape] = []
        self.stack = contextlib.ExitStack()

    def graphtape_url(self) -> str:
        raise NotImplementedError

    def connect(self) -> graphtape.Tape:
        tape = graphtape.connect(self.graphtape_url())
        self.tapes.append(tape)
        return tape

    def langgraph_saver(self) -> BaseCheckpointSaver:
        raise NotImplementedError

    def extra_savers(self) -> dict[str, BaseCheckpointSaver]:
        """Context savers measured beside the baseline."""
        return {}

    def checkpoint_bytes(self, tape: graphtape.Tape, thread: str) -> dict[str, int]:
        raise NotImplementedError

    def langgraph_bytes(self, saver: BaseCheckpointSaver, thread: str) -> dict[str, int]:
        raise NotImplementedError

    def describe(self) -> str:
        return ""

    #: seconds for one minimal committed write on the server, when that differs from a file fsync
    commit_probe: Callable[[], float] | None = None

    def close(self) -> None:
        for tape in self.tapes:
            with contextlib.suppress(Exception):
                tape.close()
        self.stack.close()


def graphtape_addresses(tape: graphtape.Tape, thread: str) -> set[str]:
    """Blob addresses the thread's checkpoints and pending writes refer to."""
    addresses: set[str] = set()
    for row in tape.store.list_checkpoints(thread_id=thread):
        addresses.update(row.values.values())
        addresses.update(w.value for w in tape.store.get_writes(row.thread_id, row.checkpoint_ns, row.checkpoint_id))
    return addresses


def _sqlite_table_bytes(conn: sqlite3.Connection, table: str, where: str = "", params: tuple = ()) -> int:
    """Sum of ``length()`` of every column of the rows: the payload bytes, without page overhead."""
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    expr = " + ".join(f"coalesce(length({c}), 0)" for c in cols)
    return conn.execute(f"SELECT coalesce(sum({expr}), 0) FROM {table} {where}", params).fetchone()[0]


class SqliteBackend(Backend):
    name = "sqlite"
    baseline_fsyncs = True  # SqliteSaver as shipped: WAL + synchronous=FULL (fsync per commit)
    subject_fsyncs = False  # graphtape: WAL + synchronous=NORMAL (durable against a process crash)

    def __init__(self, tmp: Path):
        super().__init__(tmp)
        self.n = 0

    def _path(self, stem: str) -> Path:
        self.n += 1
        return self.tmp / f"{stem}-{self.n}.db"

    def graphtape_url(self) -> str:
        return f"sqlite:///{self._path('graphtape')}"

    def _saver(self, synchronous: str | None = None) -> SqliteSaver:
        conn = sqlite3.connect(str(self._path("sqlitesaver")), check_same_thread=False)
        self.stack.callback(conn.close)
        if synchronous:
            conn.execute(f"PRAGMA synchronous={synchronous}")
        return SqliteSaver(conn)

    def langgraph_saver(self) -> BaseCheckpointSaver:
        return self._saver()

    def extra_savers(self) -> dict[str, BaseCheckpointSaver]:
        return {"SqliteSaver synchronous=NORMAL": self._saver("NORMAL")}

    def describe(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}, files in {self.tmp}"

    def checkpoint_bytes(self, tape: graphtape.Tape, thread: str) -> dict[str, int]:
        addresses = graphtape_addresses(tape, thread)
        path = tape.store.path
        conn = sqlite3.connect(str(path))
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cps = _sqlite_table_bytes(conn, "gt_checkpoints", "WHERE thread_id=?", (thread,))
            writes = _sqlite_table_bytes(conn, "gt_writes", "WHERE thread_id=?", (thread,))
            blobs = other = 0
            for h, size in conn.execute("SELECT hash, length(hash) + length(enc) + length(data) FROM gt_blobs"):
                if h in addresses:
                    blobs += size
                else:
                    other += size
            tape_rows = sum(_sqlite_table_bytes(conn, t) for t in ("gt_events", "gt_runs", "gt_chains", "gt_leases"))
            n = conn.execute("SELECT count(*) FROM gt_checkpoints WHERE thread_id=?", (thread,)).fetchone()[0]
        finally:
            conn.close()
        return {
            "checkpoints": n,
            "checkpoint_rows": cps,
            "write_rows": writes,
            "checkpoint_blobs": blobs,
            "total": cps + writes + blobs,
            "tape_rest": other + tape_rows,
            "file": path.stat().st_size,
        }

    def langgraph_bytes(self, saver: BaseCheckpointSaver, thread: str) -> dict[str, int]:
        conn = saver.conn  # type: ignore[attr-defined]
        with saver.lock:  # type: ignore[attr-defined]
            path = conn.execute("PRAGMA database_list").fetchone()[2]
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cps = _sqlite_table_bytes(conn, "checkpoints", "WHERE thread_id=?", (thread,))
            writes = _sqlite_table_bytes(conn, "writes", "WHERE thread_id=?", (thread,))
            n = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id=?", (thread,)).fetchone()[0]
        return {
            "checkpoints": n,
            "checkpoint_rows": cps,
            "write_rows": writes,
            "total": cps + writes,
            "file": Path(path).stat().st_size,
        }


class PostgresBackend(Backend):
    name = "postgresql"
    baseline_fsyncs = True  # synchronous_commit=on: every commit waits for the WAL fsync
    subject_fsyncs = True

    def __init__(self, tmp: Path, url: str):
        super().__init__(tmp)
        import psycopg

        self.url = url
        self.admin = psycopg.connect(url, autocommit=True, connect_timeout=5)
        self.schemas: list[str] = []
        self.settings = {
            k: self.admin.execute(f"SHOW {k}").fetchone()[0]
            for k in ("server_version", "synchronous_commit", "fsync", "wal_sync_method")
        }
        probe = self._schema("probe")
        self.admin.execute(f'CREATE SCHEMA "{probe}"')
        self.admin.execute(f'CREATE TABLE "{probe}".commits (v integer)')
        self._probe_sql = f'INSERT INTO "{probe}".commits VALUES (1)'

    def commit_probe(self) -> float:
        """Seconds for one committed one-row INSERT: PostgreSQL's own WAL flush, next to the file fsync probe."""
        t0 = time.perf_counter()
        self.admin.execute(self._probe_sql)
        return time.perf_counter() - t0

    def _schema(self, kind: str) -> str:
        name = f"gtbench_{kind}_{uuid.uuid4().hex[:10]}"
        self.schemas.append(name)
        return name

    def graphtape_url(self) -> str:
        return with_query(self.url, f"schema={self._schema('gt')}")

    def langgraph_saver(self) -> BaseCheckpointSaver:
        from langgraph.checkpoint.postgres import PostgresSaver

        schema = self._schema("lg")
        self.admin.execute(f'CREATE SCHEMA "{schema}"')
        url = with_query(self.url, "options=" + quote(f"-csearch_path={schema}"))
        saver = self.stack.enter_context(PostgresSaver.from_conn_string(url))
        saver.setup()
        saver._bench_schema = schema  # type: ignore[attr-defined]
        return saver

    def describe(self) -> str:
        s = self.settings
        return (
            f"PostgreSQL {s['server_version']} (synchronous_commit={s['synchronous_commit']}, fsync={s['fsync']}, "
            f"wal_sync_method={s['wal_sync_method']})"
        )

    def _bytes(self, schema: str, table: str, where: str, params: tuple) -> int:
        cols = [
            r[0]
            for r in self.admin.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema=%s AND table_name=%s",
                (schema, table),
            )
        ]
        expr = " + ".join(f'coalesce(pg_column_size("{c}"), 0)' for c in cols)
        return self.admin.execute(
            f'SELECT coalesce(sum({expr}), 0) FROM "{schema}"."{table}" {where}', params
        ).fetchone()[0]

    def checkpoint_bytes(self, tape: graphtape.Tape, thread: str) -> dict[str, int]:
        schema = tape.store.schema
        addresses = sorted(graphtape_addresses(tape, thread))
        cps = self._bytes(schema, "gt_checkpoints", "WHERE thread_id=%s", (thread,))
        writes = self._bytes(schema, "gt_writes", "WHERE thread_id=%s", (thread,))
        blobs = self._bytes(schema, "gt_blobs", "WHERE hash = ANY(%s)", (addresses,))
        other = self._bytes(schema, "gt_blobs", "WHERE NOT (hash = ANY(%s))", (addresses,))
        rest = sum(self._bytes(schema, t, "", ()) for t in ("gt_events", "gt_runs", "gt_chains", "gt_leases"))
        n = self.admin.execute(
            f'SELECT count(*) FROM "{schema}".gt_checkpoints WHERE thread_id=%s', (thread,)
        ).fetchone()[0]
        return {
            "checkpoints": n,
            "checkpoint_rows": cps,
            "write_rows": writes,
            "checkpoint_blobs": blobs,
            "total": cps + writes + blobs,
            "tape_rest": other + rest,
        }

    def langgraph_bytes(self, saver: BaseCheckpointSaver, thread: str) -> dict[str, int]:
        schema = saver._bench_schema  # type: ignore[attr-defined]
        parts = {
            t: self._bytes(schema, t, "WHERE thread_id=%s", (thread,))
            for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        }
        n = self.admin.execute(f'SELECT count(*) FROM "{schema}".checkpoints WHERE thread_id=%s', (thread,)).fetchone()[
            0
        ]
        return {
            "checkpoints": n,
            "checkpoint_rows": parts["checkpoints"],
            "blob_rows": parts["checkpoint_blobs"],
            "write_rows": parts["checkpoint_writes"],
            "total": sum(parts.values()),
        }

    def close(self) -> None:
        import psycopg

        super().close()
        try:
            self.admin.execute("SELECT 1")
        except psycopg.Error:  # the server restarted under us: drop with a new connection
            self.admin.close()
            self.admin = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        for schema in self.schemas:
            with contextlib.suppress(Exception):
                self.admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self.admin.close()


class RedisBackend(Backend):
    name = "redis"
    # appendonly=no by default: no fsync on either side (reported in describe())

    def __init__(self, tmp: Path, url: str):
        super().__init__(tmp)
        import redis

        self.url = url
        self.client = redis.Redis.from_url(url, socket_connect_timeout=5)
        self.client.ping()
        self.prefixes: list[str] = []
        info = self.client.info("server")
        self.settings = {"redis_version": info.get("redis_version")}
        with contextlib.suppress(Exception):
            self.settings.update(
                {k: v for k, v in self.client.config_get("append*").items() if k in ("appendonly", "appendfsync")}
            )

    def _prefix(self, kind: str) -> str:
        name = f"gtbench_{kind}_{uuid.uuid4().hex[:10]}"
        self.prefixes.append(name)
        return name

    def graphtape_url(self) -> str:
        return with_query(self.url, f"prefix={self._prefix('gt')}:")

    def langgraph_saver(self) -> BaseCheckpointSaver:
        from langgraph_checkpoint_plainredis import RedisSaver

        prefix = self._prefix("lg")
        saver = RedisSaver(url=self.url, prefix=prefix)
        self.stack.callback(saver.client.close)
        return saver

    def describe(self) -> str:
        s = self.settings
        return f"Redis {s.get('redis_version')} (appendonly={s.get('appendonly')}, appendfsync={s.get('appendfsync')})"

    def _usage(self, key: bytes) -> int:
        return int(self.client.memory_usage(key, samples=0) or 0)

    def checkpoint_bytes(self, tape: graphtape.Tape, thread: str) -> dict[str, int]:
        prefix = tape.store.prefix
        addresses = graphtape_addresses(tape, thread)
        cps = blobs = other = 0
        for key in self.client.scan_iter(match=f"{prefix}*", count=1000):
            rest = key.decode()[len(prefix) :]
            size = self._usage(key)
            if rest.startswith(("cp:", "wr:", "wrt:")):
                cps += size
            elif rest.startswith("blob:") and rest[5:] in addresses:
                blobs += size
            else:
                other += size
        n = len(tape.store.list_checkpoints(thread_id=thread))
        return {
            "checkpoints": n,
            "checkpoint_keys": cps,
            "checkpoint_blobs": blobs,
            "total": cps + blobs,
            "tape_rest": other,
        }

    def langgraph_bytes(self, saver: BaseCheckpointSaver, thread: str) -> dict[str, int]:
        total = sum(self._usage(k) for k in self.client.scan_iter(match=f"{saver.prefix}:*", count=1000))
        n = self.client.zcard(saver._key_index(thread, ""))  # type: ignore[attr-defined]
        return {"checkpoints": n, "total": total}

    def close(self) -> None:
        super().close()
        for prefix in self.prefixes:
            with contextlib.suppress(Exception):
                keys = list(self.client.scan_iter(match=f"{prefix}*", count=1000))
                for i in range(0, len(keys), 500):
                    self.client.delete(*keys[i : i + 500])
        self.client.close()


def open_backend(name: str, tmp: Path, args: argparse.Namespace) -> Backend:
    if name == "sqlite":
        return SqliteBackend(tmp)
    if name == "postgresql":
        return PostgresBackend(tmp, args.postgres_url)
    if name == "redis":
        return RedisBackend(tmp, args.redis_url)
    raise SystemExit(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")


# --------------------------------------------------------------------------
# 1. Per-super-step cost
# --------------------------------------------------------------------------


def bench_steps(be: Backend, size: str, reps: int, warmup: int) -> dict[str, Any]:
    builder = linear_graph()
    plain = builder.compile()
    inp = INPUTS[size]
    baseline = builder.compile(checkpointer=be.langgraph_saver())
    tape = be.connect()
    recorded = tape.record(plain, name=f"linear50-{size}", checkpointer=tape.saver)
    in_memory = builder.compile(checkpointer=InMemorySaver())

    def run(graph: Any) -> Callable[[], Any]:
        return lambda: graph.invoke(inp, new_thread(), durability="sync")

    variants: dict[str, Callable[[], Any]] = {
        "baseline": run(baseline),
        "graphtape": run(recorded),
        "InMemorySaver": run(in_memory),
        "no checkpointer": lambda: plain.invoke(inp),
    }
    for label, saver in be.extra_savers().items():
        variants[label] = run(builder.compile(checkpointer=saver))
    probe_file = be.tmp / f"fsync-{be.name}-{size}.probe"
    probes: list[float] = []
    variants["fsync probe"] = lambda: fsync_probe(probe_file)
    commits: list[float] = []
    if be.commit_probe is not None:
        variants["commit probe"] = lambda: statistics.median(be.commit_probe() for _ in range(10))

    def check_output(out: Any) -> None:
        if out["n"] != N_NODES:
            raise AssertionError(f"linear graph ended with n={out['n']}, expected {N_NODES}")

    probes_ = ("fsync probe", "commit probe")
    checks: dict[str, Callable[[Any], None]] = {k: check_output for k in variants if k not in probes_}
    checks["fsync probe"] = probes.append
    checks["commit probe"] = commits.append
    samples = interleave(variants, reps, warmup=warmup, check=checks)
    samples["fsync probe"] = probes  # seconds per fsync, not per run
    if commits:
        samples["commit probe"] = commits  # seconds per commit
    per_step = 1000.0 / N_NODES  # seconds per run -> ms per super-step
    stats = {k: summary(v, 1000.0 if k in probes_ else per_step) for k, v in samples.items()}
    return {
        "stats": stats,
        "samples": samples,
        "reps": reps,
        "paired_ratio": paired_ratio(samples["graphtape"], samples["baseline"]),
    }


# --------------------------------------------------------------------------
# Where graphtape's time goes (run when a step target is missed, or with --profile)
# --------------------------------------------------------------------------


class Timers:
    """Wall time spent in wrapped methods, split by the wrapper that is active on the thread."""

    def __init__(self) -> None:
        self.total: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._where = threading.local()
        self._undo: list[Callable[[], None]] = []

    def wrap(self, obj: Any, name: str, label: str, *, scope: bool = False) -> None:
        """Time ``obj.name``; with ``scope``, nested timed calls are labelled ``label>inner``."""
        orig = getattr(obj, name)
        had_own = name in vars(obj)
        timers = self

        @functools.wraps(orig)  # keeps the signature: LangGraph inspects put_writes for task_path
        def timed(*a: Any, **k: Any) -> Any:
            outer = getattr(timers._where, "label", None)
            key = f"{outer}>{label}" if outer else label
            if scope:
                timers._where.label = label
            t0 = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                timers.total[key] += time.perf_counter() - t0
                timers.calls[key] += 1
                if scope:
                    timers._where.label = outer

        setattr(obj, name, timed)

        def undo() -> None:
            if had_own:
                setattr(obj, name, orig)
            else:
                delattr(obj, name)

        self._undo.append(undo)

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def breakdown(be: Backend, size: str, runs: int) -> dict[str, Any]:
    """Milliseconds per super-step of a recorded run, by part, beside the LangGraph saver's own put/put_writes.

    Timers wrap graphtape's saver (``put``/``put_writes``, split into
    serialisation, the store transaction and the rest), the store's other
    writes and lease calls, the session's run start/finish and the task
    callbacks. LangGraph's own checkpoint bookkeeping is an ``InMemorySaver``
    run minus a run without checkpointer minus the in-memory saver's own
    ``put``/``put_writes``. What no timer covers is given by difference
    (saver calls run on LangGraph's executor threads and may overlap the
    main thread a little, so that figure can be slightly negative).
    """
    from graphtape.record.session import Session
    from graphtape.record.tasks import TaskRecorder

    builder = linear_graph()
    plain = builder.compile()
    inp = INPUTS[size]
    tape = be.connect()
    recorded = tape.record(plain, name=f"breakdown-{size}", checkpointer=tape.saver)
    saver = recorded.checkpointer
    store = tape.store
    lg_saver = be.langgraph_saver()
    lg = builder.compile(checkpointer=lg_saver)
    mem_saver = InMemorySaver()
    in_memory = builder.compile(checkpointer=mem_saver)

    def run(graph: Any) -> None:
        graph.invoke(inp, new_thread(), durability="sync")

    for graph in (recorded, lg, in_memory):  # warm up
        run(graph)
    plain.invoke(inp)
    walls: dict[str, list[float]] = {"graphtape": [], "baseline": [], "InMemorySaver": [], "no checkpointer": []}
    timers = Timers()
    timers.wrap(saver, "put", "put", scope=True)
    timers.wrap(saver, "put_writes", "put_writes", scope=True)
    # saver.serde may be shared with other savers: only calls inside graphtape's put/put_writes are used
    timers.wrap(saver.serde, "dumps_typed", "serialise")
    timers.wrap(store, "write", "store.write")
    timers.wrap(Session, "start", "session.start", scope=True)
    timers.wrap(Session, "finish", "session.finish", scope=True)
    for name in ("acquire_lease", "release_lease", "list_runs"):
        timers.wrap(store, name, "lease+list_runs")
    timers.wrap(TaskRecorder, "on_chain_start", "task callbacks")
    timers.wrap(TaskRecorder, "on_chain_end", "task callbacks")
    other = Timers()  # the LangGraph savers, each on its own
    other.wrap(lg_saver, "put", "baseline put")
    other.wrap(lg_saver, "put_writes", "baseline put_writes")
    other.wrap(mem_saver, "put", "memory put")
    other.wrap(mem_saver, "put_writes", "memory put_writes")
    variants = [("graphtape", recorded), ("baseline", lg), ("InMemorySaver", in_memory), ("no checkpointer", plain)]
    try:
        for i in range(runs):
            for label, graph in variants[i % 4 :] + variants[: i % 4]:
                gc.collect()
                t0 = time.perf_counter()
                if graph is plain:
                    plain.invoke(inp)
                else:
                    run(graph)
                walls[label].append(time.perf_counter() - t0)
    finally:
        timers.restore()
        other.restore()
    steps = runs * N_NODES

    def ms(x: float) -> float:
        return x * 1000.0 / steps

    wall = {k: sum(v) * 1000.0 / steps for k, v in walls.items()}  # means, to match the timers' sums
    t, o = timers.total, other.total
    bookkeeping = wall["InMemorySaver"] - wall["no checkpointer"] - ms(o["memory put"] + o["memory put_writes"])
    parts = {
        "put: serialise (ormsgpack via serde.dumps_typed)": ms(t["put>serialise"]),
        "put: store transaction": ms(t["put>store.write"]),
        "put: the rest (addresses, metadata JSON, session flush)": ms(
            t["put"] - t["put>serialise"] - t["put>store.write"]
        ),
        "put_writes: serialise": ms(t["put_writes>serialise"]),
        "put_writes: store transaction": ms(t["put_writes>store.write"]),
        "put_writes: the rest": ms(t["put_writes"] - t["put_writes>serialise"] - t["put_writes>store.write"]),
        "run start + finish: encode input/output, config, versions": ms(
            t["session.start"] + t["session.finish"] - t["session.start>store.write"] - t["session.finish>store.write"]
        ),
        "run start + finish: store transactions": ms(t["session.start>store.write"] + t["session.finish>store.write"]),
        "run start: lease acquire/release, list_runs": ms(t["lease+list_runs"]),
        "task callbacks (task_started/finished events)": ms(t["task callbacks"]),
    }
    parts["by difference: recorder wrapper, thread hand-offs, minus overlap (calls on executor threads)"] = (
        wall["graphtape"] - wall["no checkpointer"] - bookkeeping - sum(parts.values())
    )
    base_parts = {
        "put": ms(o["baseline put"]),
        "put_writes": ms(o["baseline put_writes"]),
    }
    base_parts["by difference (minus overlap: calls on executor threads)"] = (
        wall["baseline"] - wall["no checkpointer"] - bookkeeping - sum(base_parts.values())
    )
    return {
        "size": size,
        "runs": runs,
        "wall_ms_per_step": wall,
        "langgraph_bookkeeping_ms": bookkeeping,
        "in_memory_saver_calls_ms": ms(o["memory put"] + o["memory put_writes"]),
        "graphtape_parts_ms": parts,
        "baseline_parts_ms": base_parts,
        "calls_per_run": {k: v / runs for k, v in sorted(timers.calls.items())},
        "timer_seconds": {k: round(v, 6) for k, v in sorted(timers.total.items())},
    }


def _renamed(batch: Any, suffix: str) -> Any:
    """A copy of a WriteBatch with its runs and thread renamed (so that it can be written again)."""
    from graphtape.store.base import WriteBatch

    return WriteBatch(
        new_runs=[
            dataclasses.replace(r, run_id=r.run_id + suffix, thread_id=r.thread_id + suffix) for r in batch.new_runs
        ],
        run_updates=[(rid + suffix, fields) for rid, fields in batch.run_updates],
        events=[dataclasses.replace(e, run_id=e.run_id + suffix) for e in batch.events],
        blobs=dict(batch.blobs),
        chains=dict(batch.chains),
        checkpoints=[
            dataclasses.replace(c, thread_id=c.thread_id + suffix, run_id=(c.run_id + suffix) if c.run_id else None)
            for c in batch.checkpoints
        ],
        writes=[dataclasses.replace(w, thread_id=w.thread_id + suffix) for w in batch.writes],
    )


def _rethreaded(config: dict[str, Any], suffix: str) -> dict[str, Any]:
    conf = config["configurable"]
    return {**config, "configurable": {**conf, "thread_id": conf["thread_id"] + suffix}}


class _NullStore:
    """Stands in for a store: graphtape's saver with its Python work only."""

    url = "null://"

    def write(self, batch: Any, *, fence: Any = None) -> None:
        return None


def isolated(be: Backend, size: str, reps: int) -> dict[str, Any]:
    """Serial costs per super-step: every saver call and store transaction of a run, replayed one at a time.

    In a run, ``put`` and ``put_writes`` execute on LangGraph's executor
    threads and overlap each other and the main thread, so in-run timers
    double-count waits. Here one recorded run's store batches are written
    again, one by one, into a fresh store of the same backend (renamed, with
    a fencing lease like a real run); graphtape's ``put``/``put_writes`` are
    replayed against a store that writes nothing (their Python cost); and
    the LangGraph saver's ``put``/``put_writes`` calls of an unrecorded run
    are replayed one by one on a fresh thread.
    """
    from graphtape.runtime.saver import GraphtapeSaver

    builder = linear_graph()
    plain = builder.compile()
    inp = INPUTS[size]
    tape = be.connect()
    recorded = tape.record(plain, name=f"isolated-{size}", checkpointer=tape.saver)
    recorded.invoke(inp, new_thread(), durability="sync")  # warm up
    saver, store = recorded.checkpointer, tape.store
    where = threading.local()
    batches: list[tuple[str, Any]] = []
    gt_calls: list[tuple[str, tuple]] = []
    orig_write = store.write

    def capture_write(batch: Any, *, fence: Any = None) -> None:
        batches.append((getattr(where, "label", "run start/finish"), copy.deepcopy(batch)))
        return orig_write(batch, fence=fence)

    def capture(obj: Any, name: str, calls: list[tuple[str, tuple]]) -> Callable[[], None]:
        orig = getattr(obj, name)

        @functools.wraps(orig)
        def call(*a: Any) -> Any:
            calls.append((name, a))
            where.label = name
            try:
                return orig(*a)
            finally:
                where.label = None

        setattr(obj, name, call)
        return lambda: delattr(obj, name)

    undo = [capture(saver, "put", gt_calls), capture(saver, "put_writes", gt_calls)]
    store.write = capture_write  # type: ignore[method-assign]
    try:
        recorded.invoke(inp, new_thread(), durability="sync")
    finally:
        del store.write
        for u in undo:
            u()
    lg_saver = be.langgraph_saver()
    lg = builder.compile(checkpointer=lg_saver)
    lg.invoke(inp, new_thread(), durability="sync")  # warm up (tables, prepared statements)
    lg_calls: list[tuple[str, tuple]] = []
    undo = [capture(lg_saver, "put", lg_calls), capture(lg_saver, "put_writes", lg_calls)]
    try:
        lg.invoke(inp, new_thread(), durability="sync")
    finally:
        for u in undo:
            u()

    target = be.connect().store
    null_saver = GraphtapeSaver(_NullStore())  # type: ignore[arg-type]
    times: dict[str, list[float]] = {}

    def timed(key: str, fn: Callable[[], Any]) -> None:
        t0 = time.perf_counter()
        fn()
        times.setdefault(key, []).append(time.perf_counter() - t0)

    for rep in range(reps):
        suffix = f"-replay{rep}-{uuid.uuid4().hex[:6]}"
        lease = f"thread:replay{suffix}"
        token = target.acquire_lease(lease, "savers-benchmark", 600)
        gc.collect()
        for label, batch in batches:
            b = _renamed(batch, suffix)
            timed(
                f"graphtape {label}: store transaction",
                lambda b=b, lease=lease, token=token: target.write(b, fence=(lease, token)),
            )
        for name, args in gt_calls:
            a = (_rethreaded(args[0], suffix), *args[1:])
            timed(f"graphtape {name}: Python (no store)", lambda name=name, a=a: getattr(null_saver, name)(*a))
        for name, args in lg_calls:
            a = (_rethreaded(args[0], suffix), *args[1:])
            timed(f"{LANGGRAPH_SAVER[be.name]} {name}", lambda name=name, a=a: getattr(lg_saver, name)(*a))
        target.release_lease(lease, "savers-benchmark")
    runs = reps
    out: dict[str, dict[str, float]] = {}
    for key, values in times.items():
        per_run = len(values) / runs
        out[key] = {
            "median_ms": statistics.median(values) * 1000.0,
            "per_step": per_run / N_NODES,
            "ms_per_step": statistics.median(values) * 1000.0 * per_run / N_NODES,
            "mean_ms_per_step": sum(values) * 1000.0 / runs / N_NODES,
        }
    return {"size": size, "reps": reps, "calls": out}


def profile_recorded(be: Backend, size: str, runs: int, top: int = 30) -> str:
    """cProfile of ``runs`` recorded runs, the main thread and the saver's calls on LangGraph's threads merged."""
    plain = linear_graph().compile()
    tape = be.connect()
    recorded = tape.record(plain, name=f"profile-{size}", checkpointer=tape.saver)
    recorded.invoke(INPUTS[size], new_thread(), durability="sync")
    saver = recorded.checkpointer
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def profiled(name: str) -> None:
        orig = getattr(saver, name)

        @functools.wraps(orig)
        def call(*a: Any, **k: Any) -> Any:
            if threading.current_thread() is threading.main_thread():
                return orig(*a, **k)  # already under the main profile
            prof = cProfile.Profile()
            try:
                return prof.runcall(orig, *a, **k)
            finally:
                with lock:
                    profiles.append(prof)

        setattr(saver, name, call)

    for name in ("put", "put_writes"):
        profiled(name)
    main = cProfile.Profile()
    try:
        main.enable()
        for _ in range(runs):
            recorded.invoke(INPUTS[size], new_thread(), durability="sync")
        main.disable()
    finally:
        del saver.put, saver.put_writes
    out = io.StringIO()
    st = pstats.Stats(main, stream=out)
    for prof in profiles:
        st.add(prof)
    out.write(
        f"{runs} recorded runs x {N_NODES} steps; main thread + {len(profiles)} saver calls on worker threads "
        "(the main thread's lock waits are the workers' time)\n"
    )
    st.sort_stats("tottime").print_stats(top)
    st.sort_stats("cumulative").print_stats("graphtape|sqlite3|psycopg|redis", top)
    return out.getvalue()


# --------------------------------------------------------------------------
# 2. Bytes per checkpoint with a 200 KB unchanged value
# --------------------------------------------------------------------------


def bench_bytes(be: Backend) -> dict[str, Any]:
    plain = linear_graph().compile()
    inp = INPUTS["large"]
    thread = f"bytes-{uuid.uuid4().hex[:8]}"
    cfg = {"configurable": {"thread_id": thread}}
    tape = be.connect()
    recorded = tape.record(plain, name="bytes", checkpointer=tape.saver)
    saver = be.langgraph_saver()
    lg = linear_graph().compile(checkpointer=saver)
    out: dict[str, Any] = {}
    for label in ("first run", "second run"):
        recorded.invoke(inp, cfg, durability="sync")
        lg.invoke(inp, cfg, durability="sync")
        out[label] = {"graphtape": be.checkpoint_bytes(tape, thread), "langgraph": be.langgraph_bytes(saver, thread)}
    return out


# --------------------------------------------------------------------------
# 3 and 4. History listing; get_state at an old checkpoint
# --------------------------------------------------------------------------


def build_thread(graph: Any, saver: BaseCheckpointSaver, thread: str, checkpoints: int) -> tuple[str, float]:
    """Run the self-loop graph once on ``thread``; returns the id of its 10th checkpoint and the seconds taken."""
    ids: list[str] = []
    orig = saver.put
    had_own = "put" in vars(saver)

    def put(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if config["configurable"].get("checkpoint_ns", "") == "" and config["configurable"].get("thread_id") == thread:
            ids.append(checkpoint["id"])
        return orig(config, checkpoint, metadata, new_versions)

    saver.put = put  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        graph.invoke({"n": 0}, {"configurable": {"thread_id": thread}, "recursion_limit": checkpoints + 10})
        took = time.perf_counter() - t0
    finally:
        if had_own:
            saver.put = orig  # type: ignore[method-assign]
        else:
            del saver.put
    if len(ids) != checkpoints:
        raise AssertionError(f"thread {thread} has {len(ids)} checkpoints, expected {checkpoints}")
    return sorted(ids)[9], took


def bench_threads(be: Backend, lengths: list[int], history_reps: int, state_reps: int) -> dict[str, Any]:
    tape = be.connect()
    gt_saver = saver_for(tape.store)
    lg_saver = be.langgraph_saver()
    threads: dict[str, dict[int, dict[str, Any]]] = {"graphtape": {}, "langgraph": {}}
    build_s: dict[str, dict[int, float]] = {"graphtape": {}, "langgraph": {}}
    for length in lengths:
        builder = loop_builder(length - 2)
        recorded = tape.record(builder.compile(), name=f"loop{length}", checkpointer=tape.saver)
        lg = builder.compile(checkpointer=lg_saver)
        for kind, graph, saver in (("graphtape", recorded, gt_saver), ("langgraph", lg, lg_saver)):
            thread = f"{kind}-{length}-{uuid.uuid4().hex[:6]}"
            tenth, took = build_thread(graph, saver, thread, length)
            threads[kind][length] = {
                "graph": graph,
                "thread": thread,
                "config": {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": tenth}},
            }
            build_s[kind][length] = took

    longest = max(lengths)
    g = threads["graphtape"][longest]
    lgt = threads["langgraph"][longest]

    def history() -> int:
        entries = tape.history(g["thread"]).entries
        if len(entries) != longest:
            raise AssertionError(f"tape.history listed {len(entries)} checkpoints, expected {longest}")
        return len(entries)

    def state_history(t: dict[str, Any]) -> Callable[[], int]:
        def go() -> int:
            n = sum(1 for _ in t["graph"].get_state_history({"configurable": {"thread_id": t["thread"]}}))
            if n != longest:
                raise AssertionError(f"get_state_history listed {n} checkpoints, expected {longest}")
            return n

        return go

    progress(f"[{be.name}]   history of {longest:,} checkpoints ...")
    hist = interleave(
        {
            "tape.history": history,
            "get_state_history (graphtape saver)": state_history(g),
            f"get_state_history ({LANGGRAPH_SAVER[be.name]})": state_history(lgt),
        },
        history_reps,
        warmup=1,
    )

    def get_state(t: dict[str, Any]) -> Callable[[], Any]:
        def go() -> Any:
            snap = t["graph"].get_state(t["config"])
            if snap.config["configurable"]["checkpoint_id"] != t["config"]["configurable"]["checkpoint_id"]:
                raise AssertionError("get_state returned another checkpoint")
            if snap.values.get("n") != 8:
                raise AssertionError(f"the 10th checkpoint has n={snap.values.get('n')}, expected 8")
            return snap

        return go

    variants = {}
    for kind in ("graphtape", "langgraph"):
        for length in lengths:
            variants[f"{kind} {length}"] = get_state(threads[kind][length])
    progress(f"[{be.name}]   get_state at the 10th checkpoint ...")
    states = interleave_light(variants, state_reps, warmup=2)
    return {
        "lengths": lengths,
        "build_seconds": build_s,
        "history": {
            "checkpoints": longest,
            "stats": {k: summary(v, 1000.0) for k, v in hist.items()},
            "paired_ratio": paired_ratio(hist["tape.history"], hist["get_state_history (graphtape saver)"]),
            "samples": hist,
        },
        "get_state": {"stats": {k: summary(v, 1000.0) for k, v in states.items()}},
    }


# --------------------------------------------------------------------------
# Rows and output
# --------------------------------------------------------------------------


def step_rows(be: Backend, size: str, res: dict[str, Any]) -> list[dict[str, Any]]:
    st = res["stats"]
    fsync = st["fsync probe"]["median"]
    base, subj = st["baseline"]["median"], st["graphtape"]["median"]
    rows = [
        {
            "benchmark": f"1. ms/super-step, {SIZE_LABEL[size]}",
            "backend": be.name,
            "unit": "ms/step",
            "baseline_name": f"{LANGGRAPH_SAVER[be.name]}, unrecorded",
            "baseline": base,
            "subject_name": "recorded, graphtape saver",
            "subject": subj,
            "ratio": subj / base,
            "paired_ratio": res["paired_ratio"],
            "target": STEP_TARGETS[(be.name, size)],
            "baseline_fsyncs": base / fsync if be.baseline_fsyncs else None,
            "subject_fsyncs": subj / fsync if be.subject_fsyncs else None,
            "fsync_ms": fsync,
        }
    ]
    if "commit probe" in st:
        commit = st["commit probe"]["median"]
        rows[0].update(commit_ms=commit, baseline_commits=base / commit, subject_commits=subj / commit)
    for name in st:
        if name in ("baseline", "graphtape", "fsync probe", "commit probe"):
            continue
        rows.append(
            {
                "benchmark": f"1. (ctx) {SIZE_LABEL[size]}: {name}",
                "backend": be.name,
                "unit": "ms/step",
                "baseline_name": name,
                "baseline": st[name]["median"],
                "subject_name": "recorded, graphtape saver",
                "subject": subj,
                "ratio": subj / st[name]["median"],
                "target": None,
            }
        )
    return rows


def bytes_rows(be: Backend, res: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for label, target in (("first run", BYTES_TARGET.get(be.name)), ("second run", None)):
        gt, lg = res[label]["graphtape"], res[label]["langgraph"]
        if label == "first run":
            g_per, l_per = gt["total"] / gt["checkpoints"], lg["total"] / lg["checkpoints"]
            name = f"2. bytes/checkpoint, 200 KB unchanged, first run ({gt['checkpoints']} cps)"
        else:
            first = res["first run"]
            dg = gt["checkpoints"] - first["graphtape"]["checkpoints"]
            dl = lg["checkpoints"] - first["langgraph"]["checkpoints"]
            g_per = (gt["total"] - first["graphtape"]["total"]) / dg
            l_per = (lg["total"] - first["langgraph"]["total"]) / dl
            name = f"2. (ctx) bytes/checkpoint, second run, same thread (+{dg} cps)"
        rows.append(
            {
                "benchmark": name,
                "backend": be.name,
                "unit": "bytes",
                "baseline_name": LANGGRAPH_SAVER[be.name] + (" (Redis MEMORY USAGE)" if be.name == "redis" else ""),
                "baseline": l_per,
                "subject_name": "graphtape checkpoints+writes+blobs",
                "subject": g_per,
                "ratio": g_per / l_per,
                "target": target,
            }
        )
    gt = res["first run"]["graphtape"]
    rows.append(
        {
            "benchmark": "2. (ctx) first run incl. the rest of the tape (events, runs, input/output)",
            "backend": be.name,
            "unit": "bytes",
            "baseline_name": LANGGRAPH_SAVER[be.name],
            "baseline": res["first run"]["langgraph"]["total"] / res["first run"]["langgraph"]["checkpoints"],
            "subject_name": "whole recording / checkpoint",
            "subject": (gt["total"] + gt["tape_rest"]) / gt["checkpoints"],
            "ratio": (gt["total"] + gt["tape_rest"])
            / res["first run"]["langgraph"]["total"]
            * res["first run"]["langgraph"]["checkpoints"]
            / gt["checkpoints"],
            "target": None,
        }
    )
    return rows


def thread_rows(be: Backend, res: dict[str, Any]) -> list[dict[str, Any]]:
    h = res["history"]["stats"]
    lg_name = f"get_state_history ({LANGGRAPH_SAVER[be.name]})"
    n = res["history"]["checkpoints"]
    base = h["get_state_history (graphtape saver)"]["median"]
    subj = h["tape.history"]["median"]
    rows = [
        {
            "benchmark": f"3. history of a {n:,}-checkpoint thread",
            "backend": be.name,
            "unit": "ms",
            "baseline_name": "get_state_history, graphtape saver",
            "baseline": base,
            "subject_name": "tape.history(thread)",
            "subject": subj,
            "ratio": subj / base,
            "paired_ratio": res["history"]["paired_ratio"],
            "target": HISTORY_TARGET,
        },
        {
            "benchmark": f"3. (ctx) vs LangGraph's saver, {n:,} checkpoints",
            "backend": be.name,
            "unit": "ms",
            "baseline_name": lg_name.replace("get_state_history ", "get_state_history, "),
            "baseline": h[lg_name]["median"],
            "subject_name": "tape.history(thread)",
            "subject": subj,
            "ratio": subj / h[lg_name]["median"],
            "target": None,
        },
        {
            "benchmark": "3. (ctx) get_state_history, graphtape vs LangGraph saver",
            "backend": be.name,
            "unit": "ms",
            "baseline_name": LANGGRAPH_SAVER[be.name],
            "baseline": h[lg_name]["median"],
            "subject_name": "graphtape saver",
            "subject": base,
            "ratio": base / h[lg_name]["median"],
            "target": None,
        },
    ]
    s = res["get_state"]["stats"]
    lengths = res["lengths"]
    lo, hi = min(lengths), max(lengths)
    for kind, label, target in (
        ("graphtape", "graphtape saver", FLAT_TARGET),
        ("langgraph", LANGGRAPH_SAVER[be.name], None),
    ):
        mid = [f"{length:,}: {s[f'{kind} {length}']['median']:.3f} ms" for length in lengths]
        rows.append(
            {
                "benchmark": ("4. get_state at the 10th checkpoint, " if kind == "graphtape" else "4. (ctx) ")
                + f"{label}: {hi:,} vs {lo:,} cps",
                "backend": be.name,
                "unit": "ms",
                "baseline_name": f"thread of {lo:,}",
                "baseline": s[f"{kind} {lo}"]["median"],
                "subject_name": f"thread of {hi:,}",
                "subject": s[f"{kind} {hi}"]["median"],
                "ratio": s[f"{kind} {hi}"]["median"] / s[f"{kind} {lo}"]["median"],
                "target": target,
                "note": "; ".join(mid),
            }
        )
    return rows


def verdict(row: dict[str, Any]) -> str:
    if row.get("target") is None:
        return "context"
    return "PASS" if row["ratio"] <= row["target"] else "FAIL"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return f"{value:,.0f} B"
    if value >= 100:
        return f"{value:,.0f} {unit.split('/')[0]}"
    return f"{value:.3f} {unit.split('/')[0]}" if value < 10 else f"{value:.1f} {unit.split('/')[0]}"


def fmt_target(t: float | None) -> str:
    if t is None:
        return "-"
    return f"<= 1/{1 / t:.0f}" if t < 0.05 else f"<= {t:.2f}x"


def render(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(150, Console().width))
    env = results["environment"]
    mode = "QUICK (smoke: few repetitions, figures indicative only)" if results["quick"] else "full"
    console.print(
        f"[bold]graphtape saver benchmarks[/bold] - mode {mode}; Python {env['python']}, "
        f"{env['cpus']} CPUs, langgraph {env['versions'].get('langgraph')}, "
        f"graphtape {env['versions'].get('graphtape')} ({env['git']}"
        + (f"; at the end: {env['git_after']}" if env.get("git_after") != env["git"] else "")
        + ")"
    )
    load = results["load_average"]
    console.print(
        f"  load average (1/5/15 min) before: {' '.join(f'{x:.2f}' for x in load['before'])}, "
        f"after: {' '.join(f'{x:.2f}' for x in load['after'])} (the benchmark itself adds about 1; "
        f"more means other processes shared the {env['cpus']} CPUs)"
    )
    for name, desc in results["servers"].items():
        console.print(f"  {name}: {desc}")
    for name, why in results["skipped"].items():
        console.print(f"  [yellow]{name}: incomplete[/yellow] ({why})")
    table = Table(title="Results (medians; ratio = subject / baseline, measured interleaved in this run)")
    for col, just in (
        ("benchmark", "left"),
        ("backend", "left"),
        ("baseline", "right"),
        ("subject", "right"),
        ("ratio", "right"),
        ("target", "right"),
        ("verdict", "center"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for row in results["rows"]:
        v = row["verdict"]
        style = {"PASS": "green", "FAIL": "bold red"}.get(v, "dim")
        b_extra = f"\n[dim]= {row['baseline_fsyncs']:.2f} fsyncs[/dim]" if row.get("baseline_fsyncs") else ""
        s_extra = f"\n[dim]= {row['subject_fsyncs']:.2f} fsyncs[/dim]" if row.get("subject_fsyncs") else ""
        if row.get("baseline_commits"):
            b_extra += f"\n[dim]= {row['baseline_commits']:.2f} commits[/dim]"
            s_extra += f"\n[dim]= {row['subject_commits']:.2f} commits[/dim]"
        note = f"\n[dim]{row['note']}[/dim]" if row.get("note") else ""
        table.add_row(
            row["benchmark"] + note,
            row["backend"],
            f"{fmt(row['baseline'], row['unit'])}\n[dim]{row['baseline_name']}[/dim]{b_extra}",
            f"{fmt(row['subject'], row['unit'])}\n[dim]{row['subject_name']}[/dim]{s_extra}",
            f"{row['ratio']:.3f}x"
            + (f"\n[dim]paired {row['paired_ratio']:.3f}x[/dim]" if row.get("paired_ratio") else ""),
            fmt_target(row.get("target")),
            f"[{style}]{v}[/{style}]",
        )
    console.print(table)
    console.print(
        "[dim]1: 50 trivial nodes in a line, durability='sync', ms per super-step (run time / 50); 'fsyncs' = "
        "that time in units of the same-run probe (4 KiB write + fsync in a temp file), shown where a commit "
        "waits for an fsync; 'commits' (PostgreSQL) = in units of a same-run one-row committed INSERT. "
        "2: payload bytes of the thread's checkpoint rows (SQLite: sum of length() of every "
        "column; PostgreSQL: sum of pg_column_size() of every column, i.e. after TOAST compression; Redis: "
        "MEMORY USAGE of the keys); graphtape = checkpoints + pending writes + the blobs they refer to. "
        "3: one thread written by one run of a self-loop graph. 4: median of single get_state calls.[/dim]"
    )

    details = Table(title="Timing details (median, p25-p75, n)")
    for col in ("backend", "benchmark", "variant", "median", "p25-p75", "n"):
        details.add_column(col, justify="right" if col in ("median", "p25-p75", "n") else "left")
    for name, b in results["benchmarks"].items():
        for size in ("small", "large"):
            steps = b.get(f"steps_{size}")
            if not steps:
                continue
            for variant, s in steps["stats"].items():
                unit = {"fsync probe": "ms/fsync", "commit probe": "ms/commit"}.get(variant, "ms/step")
                details.add_row(
                    name,
                    f"1. {size}",
                    variant,
                    f"{s['median']:.3f} {unit}",
                    f"{s['p25']:.3f}-{s['p75']:.3f}",
                    str(s["n"]),
                )
        th = b.get("threads")
        if th:
            for variant, s in th["history"]["stats"].items():
                details.add_row(
                    name,
                    f"3. {th['history']['checkpoints']:,} cps",
                    variant,
                    f"{s['median']:.1f} ms",
                    f"{s['p25']:.1f}-{s['p75']:.1f}",
                    str(s["n"]),
                )
            for variant, s in th["get_state"]["stats"].items():
                details.add_row(
                    name,
                    "4. get_state",
                    variant,
                    f"{s['median']:.3f} ms",
                    f"{s['p25']:.3f}-{s['p75']:.3f}",
                    str(s["n"]),
                )
            builds = ", ".join(f"{k} {n:,}: {v:.1f} s" for k, d in th["build_seconds"].items() for n, v in d.items())
            details.add_row(name, "3/4 setup", "thread recording", builds, "", "")
    console.print(details)

    for name, b in results["benchmarks"].items():
        by = b.get("bytes")
        if by:
            parts = Table(title=f"2. Where the bytes go ({name}, 200 KB unchanged value; whole thread)")
            for col in ("run", "saver", "checkpoints", "parts (bytes)"):
                parts.add_column(col)
            for label, r in by.items():
                for who in ("graphtape", "langgraph"):
                    d = r[who]
                    parts.add_row(
                        label,
                        who if who == "graphtape" else LANGGRAPH_SAVER[name],
                        str(d["checkpoints"]),
                        ", ".join(f"{k} {v:,}" for k, v in d.items() if k != "checkpoints"),
                    )
            console.print(parts)
        for size, bd in (b.get("breakdown") or {}).items():
            w = bd["wall_ms_per_step"]
            t = Table(
                title=f"Where graphtape's time goes: {name}, {SIZE_LABEL[size]} "
                f"(ms per super-step, {bd['runs']} runs each, timers)"
            )
            t.add_column("part")
            t.add_column("ms/step", justify="right")
            t.add_row("no checkpointer (the graph itself)", f"{w['no checkpointer']:.3f}")
            t.add_row(
                "LangGraph's checkpoint bookkeeping (InMemorySaver run - no checkpointer - its put calls)",
                f"{bd['langgraph_bookkeeping_ms']:.3f}",
            )
            for part, v in bd["graphtape_parts_ms"].items():
                t.add_row(f"graphtape: {part}", f"{v:.3f}")
            t.add_row("[bold]recorded run, graphtape saver (wall, mean)[/bold]", f"[bold]{w['graphtape']:.3f}[/bold]")
            for part, v in bd["baseline_parts_ms"].items():
                t.add_row(f"[dim]{LANGGRAPH_SAVER[name]}: {part}[/dim]", f"[dim]{v:.3f}[/dim]")
            t.add_row(
                f"[bold]{LANGGRAPH_SAVER[name]} unrecorded (wall, mean)[/bold]", f"[bold]{w['baseline']:.3f}[/bold]"
            )
            t.add_row("[dim]InMemorySaver run (wall, mean)[/dim]", f"[dim]{w['InMemorySaver']:.3f}[/dim]")
            console.print(t)
            calls = bd["calls_per_run"]
            console.print(
                f"[dim]store transactions per run: put {calls.get('put>store.write', 0):.0f}, put_writes "
                f"{calls.get('put_writes>store.write', 0):.0f}, run start/finish "
                f"{calls.get('session.start>store.write', 0) + calls.get('session.finish>store.write', 0):.0f}, "
                f"lease/list_runs {calls.get('lease+list_runs', 0):.0f}[/dim]"
            )
        for size, iso in (b.get("isolated") or {}).items():
            t = Table(
                title=f"Serial costs, each call alone: {name}, {SIZE_LABEL[size]} ({iso['reps']} replays of one run)"
            )
            for col, just in (
                ("call", "left"),
                ("median per call", "right"),
                ("calls per step", "right"),
                ("ms/step from medians", "right"),
                ("ms/step from means", "right"),
            ):
                t.add_column(col, justify=just)  # type: ignore[arg-type]
            totals: dict[str, Counter[str]] = {"median": Counter(), "mean": Counter()}
            for key, v in iso["calls"].items():
                t.add_row(
                    key,
                    f"{v['median_ms']:.3f} ms",
                    f"{v['per_step']:.2f}",
                    f"{v['ms_per_step']:.3f}",
                    f"{v['mean_ms_per_step']:.3f}",
                )
                who = "graphtape" if key.startswith("graphtape") else LANGGRAPH_SAVER[name]
                totals["median"][who] += v["ms_per_step"]
                totals["mean"][who] += v["mean_ms_per_step"]
            for who in totals["median"]:
                t.add_row(
                    f"[bold]{who}: total[/bold]",
                    "",
                    "",
                    f"[bold]{totals['median'][who]:.3f}[/bold]",
                    f"[bold]{totals['mean'][who]:.3f}[/bold]",
                )
            console.print(t)
        if b.get("profile"):
            console.print(f"[bold]cProfile ({name})[/bold]")
            for size, text in b["profile"].items():
                console.print(f"--- {size} ---")
                console.print(text, markup=False, highlight=False)


def environment(backends: dict[str, Backend]) -> dict[str, Any]:
    from importlib import metadata

    env = _base_environment()
    env["servers"] = {name: be.describe() for name, be in backends.items()}
    for dist in ("langgraph-checkpoint-postgres", "langgraph-checkpoint-plainredis", "psycopg", "redis"):
        try:
            env["versions"][dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            env["versions"][dist] = None
    return env


_T0 = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f} s] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: few repetitions, threads of 100 and 1,000")
    parser.add_argument("--json", metavar="PATH", help="also write all figures to this JSON file")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated (default: all three)")
    parser.add_argument(
        "--only",
        default="1,2,3",
        help="benchmarks to run: 1 (step cost), 2 (bytes), 3 (history and get_state); default 1,2,3",
    )
    parser.add_argument("--reps", type=int, help="repetitions per variant for 1 (default 25, quick 4)")
    parser.add_argument("--lengths", help="thread lengths for 3/4 (default 100,1000,10000; quick 100,1000)")
    parser.add_argument("--profile", action="store_true", help="also cProfile graphtape's recorded runs")
    parser.add_argument(
        "--breakdown",
        choices=("auto", "always", "never"),
        help="time the parts of a recorded run when a step target is missed (auto; the default), "
        "always, or never (the default with --quick)",
    )
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--redis-url", default=REDIS_URL)
    parser.add_argument("--check", action="store_true", help="exit with status 1 if a target is missed")
    args = parser.parse_args(argv)
    reps = args.reps or (4 if args.quick else 25)
    if args.breakdown is None:
        args.breakdown = "never" if args.quick else "auto"
    warmup = 1 if args.quick else 2
    lengths = [int(x) for x in (args.lengths or ("100,1000" if args.quick else "100,1000,10000")).split(",")]
    if min(lengths) < 12:
        parser.error("thread lengths must be at least 12 (get_state reads the 10th checkpoint)")
    history_reps = 2 if args.quick else 5
    state_reps = 20 if args.quick else 150
    breakdown_runs = 6 if args.quick else 20
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    only = {s.strip() for s in args.only.split(",") if s.strip()}

    t0 = time.perf_counter()
    load_before = os.getloadavg()
    env_before = environment({})  # the commit measured: src/ may change while a long run goes on
    benchmarks: dict[str, Any] = {}
    servers: dict[str, str] = {}
    skipped: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    opened: dict[str, Backend] = {}
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="graphtape-savers-") as d:
        warnings.simplefilter("ignore")  # LangGraph beta/deprecation notices are not results
        tmp = Path(d)
        for name in names:
            try:
                be = open_backend(name, tmp, args)
                be.connect()  # fails here if graphtape's store cannot be opened on this server
            except Exception as exc:
                skipped[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                progress(f"[{name}] skipped: {skipped[name]}")
                continue
            opened[name] = be
            servers[name] = be.describe()
            b: dict[str, Any] = {}
            benchmarks[name] = b
            try:
                if "1" in only:
                    for size in ("small", "large"):
                        progress(f"[{name}] 1. step cost, {size} state ...")
                        b[f"steps_{size}"] = res = bench_steps(be, size, reps, warmup)
                        new = step_rows(be, size, res)
                        rows.extend(new)
                        missed = new[0]["target"] is not None and new[0]["ratio"] > new[0]["target"]
                        if args.breakdown == "always" or (args.breakdown == "auto" and missed):
                            progress(f"[{name}] where the time goes, {size} state ...")
                            b.setdefault("breakdown", {})[size] = breakdown(be, size, breakdown_runs)
                            b.setdefault("isolated", {})[size] = isolated(be, size, 2 if args.quick else 5)
                        if args.profile:
                            b.setdefault("profile", {})[size] = profile_recorded(be, size, 5 if args.quick else 20)
                if "2" in only:
                    progress(f"[{name}] 2. bytes per checkpoint ...")
                    b["bytes"] = bench_bytes(be)
                    rows.extend(bytes_rows(be, b["bytes"]))
                if "3" in only:
                    progress(f"[{name}] 3/4. threads of {', '.join(f'{n:,}' for n in lengths)} checkpoints ...")
                    b["threads"] = bench_threads(be, lengths, history_reps, state_reps)
                    rows.extend(thread_rows(be, b["threads"]))
            except Exception as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                skipped[name] = f"failed after {len(b)} completed parts: {type(exc).__name__}: {first}"
                progress(f"[{name}] {skipped[name]}")
                if args.check:
                    raise
            finally:
                with contextlib.suppress(Exception):
                    be.close()
    for row in rows:
        row["verdict"] = verdict(row)
    for b in benchmarks.values():  # raw samples are in the JSON only
        for key in ("steps_small", "steps_large"):
            if key in b:
                b[key]["samples"] = {k: [round(x, 6) for x in v] for k, v in b[key]["samples"].items()}
        if "threads" in b:
            b["threads"]["history"]["samples"] = {
                k: [round(x, 6) for x in v] for k, v in b["threads"]["history"]["samples"].items()
            }
    results = {
        "quick": args.quick,
        "reps": reps,
        "lengths": lengths,
        "elapsed_s": time.perf_counter() - t0,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "environment": {
            **environment(opened),
            "git": env_before["git"],
            "git_after": environment({})["git"],
        },  # backends closed; describe() uses cached settings
        "servers": servers,
        "skipped": skipped,
        "rows": rows,
        "benchmarks": benchmarks,
    }
    render(results)
    print(f"elapsed: {results['elapsed_s']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    missed = [r for r in rows if r["verdict"] == "FAIL"]
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
