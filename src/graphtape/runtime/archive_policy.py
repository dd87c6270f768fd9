"""The archive policy: what an operator schedules, and the report of each run of it.

A policy is the two halves of keeping a store small without losing anything:
archive the threads that went quiet more than ``archive_after`` ago (see
:mod:`graphtape.runtime.archive`) and delete the archives made more than
``delete_archives_after`` ago, keeping threads paused at an interrupt for
``keep_interrupted_for`` if given. :func:`run_policy` applies it once and
returns a :class:`PolicyReport`: what was archived, kept and why, what was
deleted, the bytes freed, how long it took, and the store's index of archives
afterwards. ``graphtape archive --policy`` runs it from cron; a server can call
:func:`run_policy` on a schedule (it takes the tape and the policy, nothing
else).

Metrics. The index of archives is what ``graphtape stats`` and ``/metrics``
report (``graphtape_archived_threads``, ``graphtape_archive_bytes``,
``graphtape_last_archive_timestamp_seconds``), so a policy run shows there at
once. A run that archives nothing leaves those unchanged, so
:meth:`PolicyReport.to_prometheus` adds the run's own figures
(``graphtape_archive_policy_*``: when it last ran, whether it succeeded, how
many threads it archived and kept, archives deleted, bytes freed), for
node_exporter's textfile collector (``--metrics-file``) or a server's
``/metrics``: an alert on the last run's age catches a cron job that stopped.

A policy can be read from a small file (:func:`read_policy`: JSON, or TOML),
with durations as ``"30d"`` or seconds::

    {"archive_after": "30d", "delete_archives_after": "365d", "keep_interrupted_for": "90d",
     "to": "/mnt/cold/tapes"}
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphtape import clock
from graphtape.errors import GraphtapeError
from graphtape.runtime.archive import ArchivedThread, ArchiveResult, archive
from graphtape.runtime.retention import parse_duration
from graphtape.store.base import ArchiveEntry

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = ["Policy", "PolicyReport", "read_policy", "run_policy", "write_metrics_file"]

_DURATIONS = ("archive_after", "delete_archives_after", "keep_interrupted_for")


@dataclasses.dataclass(frozen=True)
class Policy:
    """When threads go to cold storage, where, and when their archives are deleted (durations in seconds)."""

    archive_after: float
    #: a directory, or an fsspec URL
    to: str
    delete_archives_after: float | None = None
    keep_interrupted_for: float | None = None
    #: only threads whose runs all have one of these statuses (None: any)
    statuses: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.to:
            raise GraphtapeError("an archive policy needs 'to': the directory or URL archives go to")
        for name in _DURATIONS:
            value = getattr(self, name)
            if value is not None and value < 0:
                raise GraphtapeError(f"{name} must be 0 seconds or more, not {value}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "the policy") -> Policy:
        """A policy from a mapping (a config file's): durations as ``"30d"``/``"12h"`` or seconds."""
        known = {*_DURATIONS, "to", "status", "statuses"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise GraphtapeError(f"{source}: unknown key {unknown[0]!r}; the keys are {', '.join(sorted(known))}")
        values: dict[str, Any] = {}
        for name in _DURATIONS:
            if data.get(name) is not None:
                values[name] = _seconds(data[name], f"{source}: {name}")
        if "archive_after" not in values:
            raise GraphtapeError(f"{source}: 'archive_after' is required (e.g. \"30d\")")
        to = data.get("to")
        if not isinstance(to, str) or not to:
            raise GraphtapeError(f"{source}: 'to' is required: the directory or URL archives go to")
        status = data.get("statuses", data.get("status"))
        if isinstance(status, str):
            status = [s.strip() for s in status.split(",") if s.strip()]
        if status is not None and (not isinstance(status, list) or not all(isinstance(s, str) for s in status)):
            raise GraphtapeError(f"{source}: 'status' must be a run status or a list of them")
        return cls(to=to, statuses=tuple(status) if status else None, **values)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["statuses"] = list(self.statuses) if self.statuses else None
        return data


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise GraphtapeError(f'{what}: give a duration such as "30d" or a number of seconds, not {value!r}')
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise GraphtapeError(f"{what}: {exc}") from None
    raise GraphtapeError(f'{what}: give a duration such as "30d" or a number of seconds, not {value!r}')


def read_policy(path: str | os.PathLike[str]) -> Policy:
    """The policy in a JSON or TOML file (by its suffix; ``.toml`` is TOML, anything else JSON)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise GraphtapeError(f"cannot read the policy file {p}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "TOML" if p.suffix == ".toml" else "JSON"
        raise GraphtapeError(f"the policy file {p} is not valid {kind}: {exc}") from None
    if not isinstance(data, dict):
        raise GraphtapeError(f"the policy file {p} must hold an object of settings")
    return Policy.from_mapping(data, source=str(p))


@dataclasses.dataclass
class PolicyReport:
    """What one run of a policy did (or, in a dry run, would do)."""

    policy: Policy
    dry_run: bool
    started_at: float
    finished_at: float
    archived: list[ArchivedThread]
    #: ``(thread_id, why)`` for threads that matched but stayed
    kept: list[tuple[str, str]]
    #: archives older than ``delete_archives_after`` deleted (or that would be)
    expired: list[ArchiveEntry]
    bytes_freed: int | None
    #: the store's index of archives after the run: threads, and bytes of their files
    archived_threads: int
    archive_bytes: int

    @classmethod
    def of(cls, policy: Policy, result: ArchiveResult, started_at: float, index: list[ArchiveEntry]) -> PolicyReport:
        return cls(
            policy=policy,
            dry_run=result.dry_run,
            started_at=started_at,
            finished_at=clock.now(),
            archived=result.threads,
            kept=result.skipped,
            expired=result.expired,
            bytes_freed=result.bytes_freed,
            archived_threads=len(index),
            archive_bytes=sum(e.size for e in index),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.to_dict(),
            "dry_run": self.dry_run,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "archived": [t.to_dict() for t in self.archived],
            "kept": [{"thread_id": t, "why": why} for t, why in self.kept],
            "expired": [e.to_dict() for e in self.expired],
            "bytes_freed": self.bytes_freed,
            "index": {"archived_threads": self.archived_threads, "archive_bytes": self.archive_bytes},
        }

    def to_prometheus(self) -> str:
        """This run's figures in Prometheus' text format (``graphtape_archive_policy_*``)."""
        lines: list[str] = []

        def gauge(name: str, help_: str, value: float) -> None:
            lines.append(f"# HELP graphtape_archive_policy_{name} {help_}")
            lines.append(f"# TYPE graphtape_archive_policy_{name} gauge")
            lines.append(f"graphtape_archive_policy_{name} {value}")

        gauge("last_run_timestamp_seconds", "When the archive policy last ran (alert when it stops).", self.finished_at)
        gauge("last_run_duration_seconds", "How long its last run took.", round(self.finished_at - self.started_at, 3))
        gauge("archived_threads", "Threads its last run archived.", len(self.archived))
        gauge("kept_threads", "Threads its last run found due but kept, with a reason.", len(self.kept))
        gauge("expired_archives", "Archives its last run deleted.", len(self.expired))
        gauge(
            "bytes_freed", "Bytes of store its last run freed (0 when the store does not say).", self.bytes_freed or 0
        )
        return "\n".join(lines) + "\n"


def run_policy(tape: Tape, policy: Policy, *, dry_run: bool = False, now: float | None = None) -> PolicyReport:
    """Apply ``policy`` to ``tape``'s store once: archive what is due, delete expired archives; report it."""
    started = clock.now()
    result = archive(
        tape,
        older_than=policy.archive_after,
        to=policy.to,
        statuses=policy.statuses,
        dry_run=dry_run,
        expire_after=policy.delete_archives_after,
        keep_interrupted_for=policy.keep_interrupted_for,
        now=now,
    )
    return PolicyReport.of(policy, result, started, tape.store.archived_threads())


def write_metrics_file(report: PolicyReport, path: str | os.PathLike[str]) -> None:
    """Write the report's metrics to ``path`` atomically (node_exporter's textfile collector reads it)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{int(time.time() * 1000)}.tmp")
    try:
        tmp.write_text(report.to_prometheus(), encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise GraphtapeError(f"cannot write the metrics file {target}: {exc.strerror or exc}") from None
