"""Monitoring figures of a tape store: ``graphtape stats`` and the ``/metrics`` endpoint.

Why over 500 lines: the figures and their two renderings (``to_dict`` for JSON and
``to_prometheus`` for ``/metrics``) are kept together so a figure is added in one place;
the reading of the store is a handful of interface calls.

:func:`collect_stats` reads the store and returns :class:`Stats`:

* **runs by status**, over every run;
* **tape size per run**: the run's event bodies (compact JSON) plus every
  blob its events refer to, directly or through messages and message
  chains, each blob counted once per run; p50/p95/max over the newest
  ``limit_runs`` runs that are not running, and how many exceed
  ``size_warning`` bytes (a tape that big makes replays and exports slow);
* **checkpoint size**: a checkpoint's body plus its channel values (and the
  messages they refer to), over the newest ``limit_runs`` checkpoints of
  graphtape's saver;
* **write latency**: how long the store took to write each flush of a run
  (``meta.write_ms`` on runs recorded by this version);
* **node latency**: p50/p95/max duration of every node's tasks;
* **stuck threads**: runs still ``running`` whose thread's lease is held
  (so the process is alive) but whose open task, or last event, is older
  than ``stuck_after`` seconds: a node waiting on a hung model or tool.
  Running runs whose lease is *not* held are **orphaned** (their process
  died): ``graphtape recover`` finishes them.

Sizes are uncompressed bytes: what a replay reads and an export writes,
not what the backend stores after compression.

Blobs are content addressed and finished runs never change, so a
:class:`StatsCache` passed from call to call (the metrics server keeps one)
makes repeated collection read only what is new.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from graphtape import clock, events
from graphtape.runtime.lease import lease_name
from graphtape.serde import blob_refs
from graphtape.store.base import RUN_STATUSES, CheckpointRow, EventRow, RunRecord, TapeStore

if TYPE_CHECKING:
    from graphtape.tape import Tape

_FETCH = 500
_TASK_KINDS = (events.TaskStarted.KIND, events.TaskFinished.KIND)
_TASK_END_KINDS = (events.TaskFinished.KIND, events.TaskFailed.KIND, events.TaskInterrupted.KIND)


@dataclasses.dataclass
class Summary:
    """p50, p95 and max of a set of values (nearest-rank percentiles), with their count and sum."""

    count: int = 0
    sum: float = 0.0
    p50: float | None = None
    p95: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Summary:
        vals = sorted(float(v) for v in values)
        if not vals:
            return cls()
        return cls(count=len(vals), sum=math.fsum(vals), p50=_rank(vals, 0.5), p95=_rank(vals, 0.95), max=vals[-1])

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _rank(sorted_values: list[float], q: float) -> float:
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def _weighted_rank(pairs: list[tuple[float, int]], q: float) -> float | None:
    """The q-quantile of values given with weights (nearest rank)."""
    pairs = sorted(p for p in pairs if p[1] > 0)
    total = sum(w for _, w in pairs)
    if not total:
        return None
    target = max(1, math.ceil(q * total))
    seen = 0
    for value, weight in pairs:
        seen += weight
        if seen >= target:
            return value
    return pairs[-1][0]  # pragma: no cover


@dataclasses.dataclass
class StuckThread:
    """A thread whose live run has not moved for ``seconds``."""

    thread_id: str
    run_id: str
    #: the node whose task is open, or None when no task is (the run is between steps)
    node: str | None
    seconds: float
    owner: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Stats:
    """What :func:`collect_stats` found; ``to_dict()`` for JSON, ``to_prometheus()`` for scraping."""

    generated_at: float
    store: str
    runs_by_status: dict[str, int]
    #: runs whose tape size and node latencies were measured (the newest ones, not running)
    sampled_runs: int
    run_tape_bytes: Summary
    checkpoint_bytes: Summary
    sampled_checkpoints: int
    size_warning: int
    #: the runs and checkpoints over ``size_warning``, largest first (at most 10 of each)
    large_runs: list[tuple[str, int]]
    large_runs_count: int
    large_checkpoints: list[tuple[str, str, int]]
    large_checkpoints_count: int
    #: seconds per store write, from the runs' ``meta.write_ms`` (percentiles across runs)
    write_latency: Summary
    node_durations: dict[str, Summary]
    stuck_after: float
    stuck_threads: list[StuckThread]
    orphaned_runs: int
    #: the store's index of archived threads (``graphtape archive``): how many, their files' bytes, the newest
    archived_threads: int = 0
    archive_bytes: int = 0
    last_archived_at: float | None = None

    @property
    def runs_total(self) -> int:
        return sum(self.runs_by_status.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at,
            "store": self.store,
            "runs": {"total": self.runs_total, "by_status": dict(self.runs_by_status)},
            "sampled_runs": self.sampled_runs,
            "size_warning": self.size_warning,
            "run_tape_bytes": {
                **self.run_tape_bytes.to_dict(),
                "over_warning": self.large_runs_count,
                "largest": [{"run_id": r, "bytes": b} for r, b in self.large_runs],
            },
            "sampled_checkpoints": self.sampled_checkpoints,
            "checkpoint_bytes": {
                **self.checkpoint_bytes.to_dict(),
                "over_warning": self.large_checkpoints_count,
                "largest": [{"thread_id": t, "checkpoint_id": c, "bytes": b} for t, c, b in self.large_checkpoints],
            },
            "write_latency_seconds": self.write_latency.to_dict(),
            "node_duration_seconds": {k: v.to_dict() for k, v in sorted(self.node_durations.items())},
            "stuck_after": self.stuck_after,
            "stuck_threads": [s.to_dict() for s in self.stuck_threads],
            "orphaned_runs": self.orphaned_runs,
            "archives": {
                "threads": self.archived_threads,
                "bytes": self.archive_bytes,
                "last_archived_at": self.last_archived_at,
            },
        }

    def to_prometheus(self) -> str:
        """The figures in Prometheus' text exposition format (version 0.0.4)."""
        out: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            out.append(f"# HELP {name} {_escape_help(help_text)}")
            out.append(f"# TYPE {name} {kind}")

        def sample(name: str, value: float, labels: dict[str, str] | None = None) -> None:
            out.append(f"{name}{_labels(labels)} {_number(value)}")

        def summary(
            name: str, s: Summary, help_text: str, labels: dict[str, str] | None = None, header: bool = True
        ) -> None:
            if header:
                family(name, "summary", help_text)
            if s.count:
                for q, v in (("0.5", s.p50), ("0.95", s.p95), ("1", s.max)):
                    sample(name, v if v is not None else math.nan, {**(labels or {}), "quantile": q})
            sample(f"{name}_sum", s.sum, labels)
            sample(f"{name}_count", s.count, labels)

        family("graphtape_runs", "gauge", "Runs on the tape by status.")
        for status in _statuses(self.runs_by_status):
            sample("graphtape_runs", self.runs_by_status.get(status, 0), {"status": status})
        family("graphtape_sampled_runs", "gauge", "Newest finished runs measured for tape size and node latency.")
        sample("graphtape_sampled_runs", self.sampled_runs)
        summary(
            "graphtape_run_tape_bytes",
            self.run_tape_bytes,
            "Uncompressed bytes of a run's tape (events and the payloads they refer to); quantile 1 is the max.",
        )
        summary(
            "graphtape_checkpoint_bytes",
            self.checkpoint_bytes,
            "Uncompressed bytes of a checkpoint (body and channel values); quantile 1 is the max.",
        )
        family("graphtape_size_warning_bytes", "gauge", "Size above which a run tape or checkpoint is reported.")
        sample("graphtape_size_warning_bytes", self.size_warning)
        family(
            "graphtape_size_warnings_total",
            "gauge",
            "Sampled run tapes and checkpoints larger than graphtape_size_warning_bytes.",
        )
        sample("graphtape_size_warnings_total", self.large_runs_count, {"kind": "run_tape"})
        sample("graphtape_size_warnings_total", self.large_checkpoints_count, {"kind": "checkpoint"})
        summary(
            "graphtape_write_latency_seconds",
            self.write_latency,
            "Seconds per tape store write (percentiles across the sampled runs' own percentiles).",
        )
        family("graphtape_node_duration_seconds", "summary", "Seconds per task of a node; quantile 1 is the max.")
        for node, s in sorted(self.node_durations.items()):
            summary("graphtape_node_duration_seconds", s, "", {"node": node}, header=False)
        family(
            "graphtape_stuck_threads",
            "gauge",
            f"Threads whose live run has not moved for longer than {self.stuck_after:g} seconds.",
        )
        sample("graphtape_stuck_threads", len(self.stuck_threads))
        family("graphtape_stuck_thread_seconds", "gauge", "Seconds a stuck thread has been waiting, by node.")
        for st in self.stuck_threads:
            sample(
                "graphtape_stuck_thread_seconds",
                st.seconds,
                {"thread": st.thread_id, "run": st.run_id, "node": st.node or ""},
            )
        family(
            "graphtape_orphaned_runs",
            "gauge",
            "Runs left running by a process that died (recover them with `graphtape recover`).",
        )
        sample("graphtape_orphaned_runs", self.orphaned_runs)
        family("graphtape_archived_threads", "gauge", "Threads moved to cold storage by `graphtape archive`.")
        sample("graphtape_archived_threads", self.archived_threads)
        family("graphtape_archive_bytes", "gauge", "Bytes of the archive files the store's index names.")
        sample("graphtape_archive_bytes", self.archive_bytes)
        if self.last_archived_at is not None:
            family(
                "graphtape_last_archive_timestamp_seconds",
                "gauge",
                "When the newest archive was made (alert when a scheduled archive stops running).",
            )
            sample("graphtape_last_archive_timestamp_seconds", self.last_archived_at)
        return "\n".join(out) + "\n"


def _statuses(counts: dict[str, int]) -> list[str]:
    return list(RUN_STATUSES) + sorted(s for s in counts if s not in RUN_STATUSES)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str] | None) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    return str(value)


@dataclasses.dataclass
class _RunFacts:
    tape_bytes: int
    durations: list[tuple[str, float]]


class StatsCache:
    """What never changes between two collections: blob sizes and the figures of finished runs."""

    def __init__(self) -> None:
        self.blob_sizes: dict[str, int] = {}
        #: blob -> the blobs and chains it refers to (only blobs that refer to any)
        self.blob_refs: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self.chain_nodes: dict[str, tuple[str | None, str]] = {}
        self.runs: dict[str, _RunFacts] = {}
        self.checkpoints: dict[tuple[str, str, str], int] = {}

    def trim(self, run_ids: set[str], checkpoint_keys: set[tuple[str, str, str]]) -> None:
        """Forget runs and checkpoints no longer sampled (blob sizes are kept while small)."""
        self.runs = {k: v for k, v in self.runs.items() if k in run_ids}
        self.checkpoints = {k: v for k, v in self.checkpoints.items() if k in checkpoint_keys}
        if len(self.blob_sizes) > 2_000_000:
            self.blob_sizes.clear()
            self.blob_refs.clear()
        if len(self.chain_nodes) > 2_000_000:
            self.chain_nodes.clear()


class _Sizer:
    """Sizes of blobs and the closure of what they refer to, fetched in batches and cached."""

    def __init__(self, store: TapeStore, cache: StatsCache):
        self.store = store
        self.cache = cache

    def _fetch(self, hashes: set[str]) -> None:
        missing = [h for h in hashes if h not in self.cache.blob_sizes]
        for i in range(0, len(missing), _FETCH):
            part = missing[i : i + _FETCH]
            found = self.store.get_blobs(part)
            for h in part:
                data = found.get(h)
                self.cache.blob_sizes[h] = len(data) if data is not None else 0
                if data is not None and (b'"t":"msg"' in data or b'"$m"' in data or b'"$chain"' in data):
                    b: set[str] = set()
                    c: set[str] = set()
                    try:
                        blob_refs(json.loads(data), b, c)
                    except ValueError:
                        pass
                    if b or c:
                        self.cache.blob_refs[h] = (frozenset(b), frozenset(c))

    def _chain_items(self, heads: set[str], seen_nodes: set[str]) -> set[str]:
        items: set[str] = set()
        frontier = {h for h in heads if h not in seen_nodes}
        while frontier:
            unknown = [n for n in frontier if n not in self.cache.chain_nodes]
            for i in range(0, len(unknown), _FETCH):
                self.cache.chain_nodes.update(self.store.get_chain_nodes(unknown[i : i + _FETCH]))
            nxt: set[str] = set()
            for node in frontier:
                seen_nodes.add(node)
                entry = self.cache.chain_nodes.get(node)
                if entry is None:
                    continue
                parent, item = entry
                items.add(item)
                if parent is not None and parent not in seen_nodes:
                    nxt.add(parent)
            frontier = nxt
        return items

    def closure_bytes(self, blobs: set[str], chains: set[str]) -> int:
        """Bytes of ``blobs``, the chains' items and everything they refer to, each once."""
        seen_blobs: set[str] = set()
        seen_nodes: set[str] = set()
        frontier = set(blobs) | self._chain_items(chains, seen_nodes)
        while frontier:
            self._fetch(frontier)
            seen_blobs |= frontier
            more_b: set[str] = set()
            more_c: set[str] = set()
            for h in frontier:
                ref = self.cache.blob_refs.get(h)
                if ref is not None:
                    more_b |= ref[0]
                    more_c |= ref[1]
            frontier = (more_b | self._chain_items(more_c, seen_nodes)) - seen_blobs
        return sum(self.cache.blob_sizes.get(h, 0) for h in seen_blobs)


def _event_bytes(ev: EventRow) -> int:
    return len(json.dumps(ev.data, separators=(",", ":"), sort_keys=True, default=str).encode("utf-8"))


def _run_facts(store: TapeStore, run: RunRecord, sizer: _Sizer) -> _RunFacts:
    rows = store.events(run.run_id)
    blobs: set[str] = set()
    chains: set[str] = set()
    size = 0
    nodes: dict[str, str] = {}
    durations: list[tuple[str, float]] = []
    for row in rows:
        size += _event_bytes(row)
        events.refs(row.kind, row.data, blobs, chains)
        if row.kind not in _TASK_KINDS:
            continue
        ev = events.parse(row)
        if isinstance(ev, events.TaskStarted):
            nodes[str(ev.task or "")] = str(ev.node_path or "?")
        elif isinstance(ev, events.TaskFinished) and isinstance(ev.duration, (int, float)):
            durations.append((nodes.get(str(ev.task or ""), "?"), float(ev.duration)))
    size += sizer.closure_bytes(blobs, chains)
    return _RunFacts(size, durations)


def _checkpoint_bytes(row: CheckpointRow, sizer: _Sizer) -> int:
    return len(row.body or b"") + sizer.closure_bytes(set(row.values.values()), set())


def _stuck(store: TapeStore, run: RunRecord, now: float, stuck_after: float) -> StuckThread | bool | None:
    """A :class:`StuckThread`, None if the run is alive and moving, False if it is orphaned."""
    holder = store.lease_holder(lease_name(run.thread_id))
    if holder is None:
        return False
    rows = store.events(run.run_id)
    open_tasks: dict[str, tuple[EventRow, events.TaskStarted]] = {}
    for row in rows:
        if row.kind == events.TaskStarted.KIND or row.kind in _TASK_END_KINDS:
            ev = events.parse(row)
            if isinstance(ev, events.TaskStarted):
                open_tasks[str(ev.task or "")] = (row, ev)
            else:
                open_tasks.pop(str(ev.task or ""), None)
    if open_tasks:
        last, started = max(open_tasks.values(), key=lambda e: (e[0].ts, e[0].seq))
        node, since = str(started.node_path or "?"), last.ts
    else:
        node, since = None, (rows[-1].ts if rows else run.started_at)
    waited = now - since
    if waited <= stuck_after:
        return None
    return StuckThread(thread_id=run.thread_id, run_id=run.run_id, node=node, seconds=round(waited, 3), owner=holder[0])


def collect_stats(
    tape: Tape,
    *,
    stuck_after: float = 300.0,
    size_warning: int = 1_000_000,
    limit_runs: int | None = 1000,
    cache: StatsCache | None = None,
    now: float | None = None,
) -> Stats:
    """Read the store and compute :class:`Stats` (see the module docstring).

    ``limit_runs`` bounds the runs (and checkpoints) whose sizes and node
    latencies are measured, newest first; ``None`` measures all.
    """
    store = tape.store
    cache = cache if cache is not None else StatsCache()
    sizer = _Sizer(store, cache)
    now = clock.now() if now is None else now
    runs = store.list_runs(limit=None, newest_first=True)
    by_status: dict[str, int] = {s: 0 for s in RUN_STATUSES}
    for r in runs:
        by_status[r.status] = by_status.get(r.status, 0) + 1

    done = [r for r in runs if r.status != "running"]
    sample = done if limit_runs is None else done[:limit_runs]
    tape_sizes: list[tuple[str, int]] = []
    per_node: dict[str, list[float]] = {}
    write_p50: list[tuple[float, int]] = []
    write_p95: list[tuple[float, int]] = []
    write_max: float | None = None
    write_n = 0
    write_sum = 0.0
    for r in sample:
        facts = cache.runs.get(r.run_id)
        if facts is None:
            facts = _run_facts(store, r, sizer)
            cache.runs[r.run_id] = facts
        tape_sizes.append((r.run_id, facts.tape_bytes))
        for node, d in facts.durations:
            per_node.setdefault(node, []).append(d)
        w = (r.meta or {}).get("write_ms")
        if isinstance(w, dict) and isinstance(w.get("n"), int) and w["n"] > 0:
            n = w["n"]
            write_n += n
            if isinstance(w.get("p50"), (int, float)):
                write_p50.append((w["p50"] / 1000.0, n))
            if isinstance(w.get("p95"), (int, float)):
                write_p95.append((w["p95"] / 1000.0, n))
            if isinstance(w.get("max"), (int, float)):
                write_max = max(write_max or 0.0, w["max"] / 1000.0)
            if isinstance(w.get("sum"), (int, float)):
                write_sum += w["sum"] / 1000.0
            elif isinstance(w.get("p50"), (int, float)):
                write_sum += n * w["p50"] / 1000.0  # older meta without a sum: an estimate
    write = (
        Summary(
            count=write_n,
            sum=write_sum,
            p50=_weighted_rank(write_p50, 0.5),
            p95=_weighted_rank(write_p95, 0.95),
            max=write_max,
        )
        if write_n
        else Summary()
    )

    checkpoints = store.list_checkpoints(limit=limit_runs)
    cp_sizes: list[tuple[str, str, int]] = []
    for row in checkpoints:
        key = (row.thread_id, row.checkpoint_ns, row.checkpoint_id)
        size = cache.checkpoints.get(key)
        if size is None:
            size = _checkpoint_bytes(row, sizer)
            cache.checkpoints[key] = size
        cp_sizes.append((row.thread_id, row.checkpoint_id, size))

    stuck: list[StuckThread] = []
    orphaned = 0
    for r in runs:
        if r.status != "running":
            continue
        found = _stuck(store, r, now, stuck_after)
        if found is False:
            orphaned += 1
        elif isinstance(found, StuckThread):
            stuck.append(found)
    stuck.sort(key=lambda s: -s.seconds)

    cache.trim(
        {r.run_id for r in sample}, {(row.thread_id, row.checkpoint_ns, row.checkpoint_id) for row in checkpoints}
    )
    # largest first, ties by run id: the same answer from every store
    large_runs = sorted(((rid, b) for rid, b in tape_sizes if b > size_warning), key=lambda x: (-x[1], x[0]))
    large_cps = sorted((c for c in cp_sizes if c[2] > size_warning), key=lambda x: -x[2])
    archives = tape.store.archived_threads()
    return Stats(
        generated_at=now,
        store=tape.url,
        runs_by_status=by_status,
        sampled_runs=len(sample),
        run_tape_bytes=Summary.of(b for _, b in tape_sizes),
        checkpoint_bytes=Summary.of(c[2] for c in cp_sizes),
        sampled_checkpoints=len(cp_sizes),
        size_warning=size_warning,
        large_runs=large_runs[:10],
        large_runs_count=len(large_runs),
        large_checkpoints=large_cps[:10],
        large_checkpoints_count=len(large_cps),
        write_latency=write,
        node_durations={node: Summary.of(ds) for node, ds in per_node.items()},
        stuck_after=stuck_after,
        stuck_threads=stuck,
        orphaned_runs=orphaned,
        archived_threads=len(archives),
        archive_bytes=sum(e.size for e in archives),
        last_archived_at=max((e.archived_at for e in archives), default=None),
    )
