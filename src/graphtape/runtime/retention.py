"""Retention: delete old runs without breaking what the kept ones still need.

:func:`plan_prune` chooses; :func:`prune` deletes. Splitting the two gives a
dry run for free (``graphtape prune --dry-run`` prints the plan) and lets the
deletion re-check the plan against the store just before it acts.

Which runs go. A run is a *candidate* when it matches every criterion given:

* ``older_than``: it ended (or, if it never ended, started) more than that
  many seconds ago;
* ``statuses``: its status is one of those;
* ``keep_last``: it is not among the newest ``keep_last`` runs of its thread.

``running`` runs are never candidates: a run that is still running (or that
crashed and waits for ``graphtape recover``) is left alone.

Which candidates stay anyway. Deleting a run must not break a run that is
kept, so the kept set is closed over these dependencies (to a fixpoint):

* a replay or fork needs the run it replays (``replay_of``);
* a recovery needs the crashed run it recovers (``meta.recovers``);
* a run needs every earlier run of its thread: replaying a run replays its
  thread's chain from the first run (``parent_run_id``).

The last rule means a thread is pruned from its end, never from its start:
``older_than`` removes the threads that went quiet, not the old turns of a
conversation that is still going, and ``keep_last`` on its own removes
nothing. ``truncate_threads=True`` replaces that rule by a weaker one: the
runs kept on a thread stay contiguous (no holes), so the older runs of a
thread may go while its newer runs stay. The kept runs then replay from
their own checkpoints (``replay --from-checkpoint``) rather than from the
thread's first input. ``keep_last`` implies it unless
``truncate_threads=False`` is given: "keep the last N runs of each thread"
must be able to delete something.

What else goes. The checkpoints graphtape's saver keeps for a thread are
deleted when none of the thread's runs remain; then blobs and chain nodes
nothing refers to any more are collected.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from graphtape import clock
from graphtape.errors import GraphtapeError
from graphtape.runtime.lease import lease_name
from graphtape.store.base import RUN_STATUSES, RunRecord

if TYPE_CHECKING:
    from graphtape.tape import Tape

#: Runs are deleted this many per transaction (one progress step each).
DELETE_BATCH = 200


@dataclasses.dataclass
class KeptRun:
    """A run that matched the criteria but stays, and why."""

    run: RunRecord
    reason: str
    #: the kept run that needs this one (None for a run kept for itself, e.g. still running)
    needed_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run.run_id,
            "thread_id": self.run.thread_id,
            "status": self.run.status,
            "started_at": self.run.started_at,
            "reason": self.reason,
            "needed_by": self.needed_by,
        }


@dataclasses.dataclass
class PrunePlan:
    """What :func:`prune` would delete, and the matching runs it keeps with the reason."""

    criteria: dict[str, Any]
    delete: list[RunRecord]
    kept: list[KeptRun]
    #: threads none of whose runs remain: their saver checkpoints go too
    threads: list[str]
    created_at: float = 0.0

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.delete]

    def to_dict(self) -> dict[str, Any]:
        return {
            "criteria": self.criteria,
            "delete": [
                {
                    "run_id": r.run_id,
                    "thread_id": r.thread_id,
                    "graph": r.graph,
                    "status": r.status,
                    "started_at": r.started_at,
                    "ended_at": r.ended_at,
                }
                for r in self.delete
            ],
            "kept": [k.to_dict() for k in self.kept],
            "threads": list(self.threads),
        }


@dataclasses.dataclass
class PruneResult:
    """What :func:`prune` did (or, for a dry run, would do)."""

    dry_run: bool
    runs: int
    threads: int
    #: blobs and chain nodes collected (None in a dry run: only the collection knows)
    blobs: int | None
    chain_nodes: int | None
    #: bytes the store stopped using, when the store knows them cheaply (``TapeStore.used_bytes``), else None
    bytes_freed: int | None
    run_ids: list[str]
    #: threads whose checkpoints were left because a run started on them meanwhile
    threads_skipped: list[str] = dataclasses.field(default_factory=list)
    #: the plan carried out (what goes, what stays and why)
    plan: PrunePlan | None = dataclasses.field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "plan"}


def plan_prune(
    tape: Tape,
    *,
    older_than: float | None = None,
    keep_last: int | None = None,
    statuses: Iterable[str] | None = None,
    truncate_threads: bool | None = None,
    now: float | None = None,
) -> PrunePlan:
    """Choose the runs to delete; see the module docstring for the rules.

    ``older_than`` is in seconds; ``keep_last`` keeps the newest N runs of
    every thread; ``statuses`` limits pruning to runs with these statuses.
    At least one of the three is required.
    """
    if truncate_threads is None:
        truncate_threads = keep_last is not None
    status_list = _check_criteria(older_than, keep_last, statuses)
    now = clock.now() if now is None else now
    runs = tape.store.list_runs(limit=None, newest_first=False)
    by_id = {r.run_id: r for r in runs}
    threads: dict[str, list[RunRecord]] = {}
    for r in runs:  # oldest first
        threads.setdefault(r.thread_id, []).append(r)
    position = {r.run_id: i for members in threads.values() for i, r in enumerate(members)}

    protected: set[str] = set()
    if keep_last:
        for members in threads.values():
            protected.update(r.run_id for r in members[-keep_last:])

    def matches(r: RunRecord) -> bool:
        if older_than is not None and (r.ended_at or r.started_at) > now - older_than:
            return False
        if status_list is not None and r.status not in status_list:
            return False
        return r.run_id not in protected

    matching = {r.run_id for r in runs if matches(r)}
    candidates = {rid for rid in matching if by_id[rid].status != "running"}
    reasons: dict[str, tuple[str, str | None]] = {
        rid: ("still running: running runs are never pruned", None) for rid in matching - candidates
    }
    kept = {r.run_id for r in runs if r.run_id not in candidates}

    def keep(rid: str | None, reason: str, needed_by: str, todo: list[str]) -> None:
        if rid is None or rid not in by_id or rid in kept:
            return
        kept.add(rid)
        reasons[rid] = (reason, needed_by)
        todo.append(rid)

    #: per thread, how many of its first runs are known to be kept
    covered: dict[str, int] = {}
    todo = list(kept)
    while True:
        while todo:
            r = by_id[todo.pop()]
            short = r.run_id[:8]
            keep(r.replay_of, f"replayed by kept run {short}", r.run_id, todo)
            recovers = (r.meta or {}).get("recovers")
            if isinstance(recovers, str):
                keep(recovers, f"recovered by kept run {short}", r.run_id, todo)
            if not truncate_threads:
                keep(
                    r.parent_run_id,
                    f"earlier run of thread {r.thread_id}: kept run {short} replays from it",
                    r.run_id,
                    todo,
                )
                members = threads[r.thread_id]
                start, end = covered.get(r.thread_id, 0), position[r.run_id]
                for earlier in members[start:end]:
                    keep(
                        earlier.run_id,
                        f"earlier run of thread {r.thread_id}: kept run {short} replays from it",
                        r.run_id,
                        todo,
                    )
                covered[r.thread_id] = max(start, end)
        if not truncate_threads:
            break
        # The kept runs of a thread stay contiguous: a hole would break the chain.
        for members in threads.values():
            idx = [i for i, r in enumerate(members) if r.run_id in kept]
            if idx:
                for r in members[idx[0] : idx[-1] + 1]:
                    keep(r.run_id, f"between kept runs of thread {r.thread_id}", members[idx[-1]].run_id, todo)
        if not todo:
            break

    delete = [r for r in runs if r.run_id not in kept]
    delete.sort(key=lambda r: r.started_at)
    gone = {r.run_id for r in delete}
    emptied = sorted(t for t, members in threads.items() if all(r.run_id in gone for r in members))
    kept_list = [KeptRun(by_id[rid], reason, needed_by) for rid, (reason, needed_by) in reasons.items()]
    kept_list.sort(key=lambda k: k.run.started_at)
    criteria: dict[str, Any] = {
        "older_than": older_than,
        "keep_last": keep_last,
        "statuses": sorted(status_list) if status_list is not None else None,
    }
    if truncate_threads:
        criteria["truncate_threads"] = True
    return PrunePlan(criteria=criteria, delete=delete, kept=kept_list, threads=emptied, created_at=now)


def _check_criteria(older_than: float | None, keep_last: int | None, statuses: Iterable[str] | None) -> set[str] | None:
    status_list = set(statuses) if statuses is not None else None
    if older_than is None and keep_last is None and not status_list:
        raise GraphtapeError(
            "say what to prune: give older_than (seconds), keep_last (runs per thread) or statuses "
            "(CLI: --older-than 30d, --keep-last N, --status failed)"
        )
    if older_than is not None and older_than < 0:
        raise GraphtapeError(f"older_than must be 0 seconds or more, not {older_than}")
    if keep_last is not None and keep_last < 0:
        raise GraphtapeError(f"keep_last must be 0 or more, not {keep_last}")
    if status_list is not None:
        if "running" in status_list:
            raise GraphtapeError(
                "running runs are never pruned (a crashed one is finished with `graphtape recover`); "
                "leave 'running' out of the statuses"
            )
        unknown = sorted(status_list - set(RUN_STATUSES))
        if unknown:
            raise GraphtapeError(
                f"unknown status {unknown[0]!r}; use {', '.join(s for s in RUN_STATUSES if s != 'running')}"
            )
        if not status_list:
            status_list = None
    return status_list


def prune(
    tape: Tape, plan: PrunePlan, *, dry_run: bool = False, progress: Callable[[int, int], None] | None = None
) -> PruneResult:
    """Carry out ``plan`` (or, with ``dry_run``, only report it).

    The plan is made again just before deleting, with the same criteria,
    and only the runs both plans delete go: a replay started since the plan
    was made still finds its original. ``progress(done, total)`` is called as
    runs are deleted.
    """
    if dry_run:
        return PruneResult(
            dry_run=True,
            runs=len(plan.delete),
            threads=len(plan.threads),
            blobs=None,
            chain_nodes=None,
            bytes_freed=None,
            run_ids=plan.run_ids,
            plan=plan,
        )
    store = tape.store
    crit = plan.criteria
    fresh = plan_prune(
        tape,
        older_than=crit.get("older_than"),
        keep_last=crit.get("keep_last"),
        statuses=crit.get("statuses"),
        truncate_threads=bool(crit.get("truncate_threads")),
        now=plan.created_at or None,
    )
    still = set(fresh.run_ids)
    ids = [rid for rid in plan.run_ids if rid in still]
    before = store.used_bytes()
    total = len(ids)
    if progress is not None:
        progress(0, total)
    for i in range(0, total, DELETE_BATCH):
        store.delete_runs(ids[i : i + DELETE_BATCH])
        if progress is not None:
            progress(min(total, i + DELETE_BATCH), total)

    deleted_threads: list[str] = []
    skipped: list[str] = []
    owner = f"graphtape-prune:{os.getpid()}:{clock.new_id()[:8]}"
    for thread in plan.threads:
        if thread not in fresh.threads:
            skipped.append(thread)
            continue
        # Hold the thread's lease while checking and deleting, so that a run
        # starting on it right now cannot lose its checkpoints.
        if store.acquire_lease(lease_name(thread), owner, 60.0) is None:
            skipped.append(thread)
            continue
        try:
            if store.list_runs(thread_id=thread, limit=1):
                skipped.append(thread)
                continue
            store.delete_thread(thread)
            deleted_threads.append(thread)
        finally:
            store.release_lease(lease_name(thread), owner)

    blobs, chains = store.collect_garbage()
    after = store.used_bytes()
    freed = before - after if before is not None and after is not None else None
    return PruneResult(
        dry_run=False,
        runs=total,
        threads=len(deleted_threads),
        blobs=blobs,
        chain_nodes=chains,
        bytes_freed=max(0, freed) if freed is not None else None,
        run_ids=ids,
        threads_skipped=skipped,
        plan=plan,
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (or a bare number of seconds).

    Raises ``ValueError`` with a message fit for the user.
    """
    s = str(text).strip().lower()
    unit = s[-1:] if s[-1:] in _UNITS else "s"
    number = s[:-1] if s[-1:] in _UNITS else s
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not a duration; use a number with a unit, e.g. 30d, 12h, 90m or 45s")
    return value * _UNITS[unit]
