"""The run queue's interface and rows (see :mod:`graphtape.store.runqueue`, which opens one).

Kept apart from the factory so that the backends import the interface
without importing the module that imports them."""

from __future__ import annotations

import abc
import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from graphtape import serde
from graphtape.errors import LeaseLost, StoreError
from graphtape.jsontext import json_depth

__all__ = [
    "ACTIVE",
    "ENDED",
    "MAX_STORED_DEPTH",
    "RUN_STATUSES",
    "THREAD_FIELDS",
    "AssistantRow",
    "Enqueued",
    "QueuedRun",
    "RunEvent",
    "RunQueue",
    "ThreadRow",
    "UnreadableValue",
    "check_readable",
    "check_thread_fields",
    "decoded",
    "ended_text",
    "json_text",
    "lease_lost",
    "listen_in_background",
    "reset_to_pending",
]

#: the statuses of a queued run
RUN_STATUSES = ("pending", "running", "success", "error", "interrupted", "timeout")
#: a run that has not ended
ACTIVE = ("pending", "running")
#: a run that has ended
ENDED = ("success", "error", "interrupted", "timeout")


#: the fields of a thread row that :meth:`RunQueue.update_thread` may change
THREAD_FIELDS = frozenset({"status", "graph_id", "metadata", "deleted"})


def json_text(value: Any) -> str:
    """A JSON value as every backend stores it: compact, non-ASCII kept as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


#: the deepest nesting of a value given by a client that the queue stores (a run's kwargs and
#: metadata, a thread's metadata, an assistant's config): pydantic serialises at most 254 levels,
#: and an API answer wraps a stored value in a few more
MAX_STORED_DEPTH = 200


class UnreadableValue(StoreError):
    """A value nested too deep to be read back (answered as JSON) was not stored."""


def check_readable(what: str, *values: Any) -> None:
    """Refuse (:class:`UnreadableValue`) to store ``values`` nested deeper than
    :data:`MAX_STORED_DEPTH`: they would be stored, and then fail every answer that shows them."""
    for value in values:
        depth = json_depth(json_text(value))
        if depth > MAX_STORED_DEPTH:
            raise UnreadableValue(
                f"{what} nests {depth} levels deep; at most {MAX_STORED_DEPTH} can be stored and read back: "
                "send flatter JSON"
            )


log = logging.getLogger(__name__)

R = TypeVar("R")


def decoded(decode: Callable[[Any], R], raws: Iterable[Any], what: str) -> list[R]:
    """``decode`` each stored row of a listing, leaving out (with a warning in the log) a row that
    cannot be decoded (JSON nested deeper than the parser goes, stored before such values were
    refused): one bad row must not fail every listing after it."""
    out = []
    for raw in raws:
        try:
            out.append(decode(raw))
        except (ValueError, RecursionError) as exc:
            log.warning("graphtape run queue: a %s row cannot be read and is left out: %s", what, exc)
    return out


def ended_text(value: Any, redact_keys: frozenset[str]) -> str:
    """A run's ``kwargs`` or ``metadata`` as stored once the run has ended: JSON text with the values
    of secret-looking keys and of ``redact_keys`` (the tape's ``redact=``) replaced by a marker.

    A pending or running run keeps its whole config (a worker, in any process, runs it with its
    ``configurable``, and runs it again after a crash); an ended one is never executed again, so
    what it was given is kept only as the API shows it, redacted."""
    return json_text(serde.redact(value, redact_keys))


def check_thread_fields(fields: Mapping[str, Any]) -> None:
    """Refuse (``TypeError``) the fields :meth:`RunQueue.update_thread` cannot change."""
    unknown = set(fields) - THREAD_FIELDS
    if unknown:
        raise TypeError(f"update_thread() cannot change {sorted(unknown)}")


def lease_lost(run_id: str, worker: str) -> LeaseLost:
    """The error :meth:`RunQueue.append` raises when ``worker`` no longer holds the run."""
    return LeaseLost(f"run {run_id} is no longer held by worker {worker}; its events stop here")


def listen_in_background(name: str, listen: Callable[[threading.Event], None]) -> Callable[[], None]:
    """Run ``listen(stop)`` in a daemon thread called ``name`` until ``stop`` is set: the loop of
    :meth:`RunQueue.listen`. When ``listen`` fails (the server restarts) it is called again a second
    later; its users poll meanwhile. Returns the function that stops it."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                listen(stop)
            except Exception:  # listen again (the users poll meanwhile)
                stop.wait(1.0)

    threading.Thread(target=loop, name=name, daemon=True).start()
    return stop.set


@dataclasses.dataclass
class QueuedRun:
    """One run of the queue. ``kwargs``, ``metadata`` and ``result`` are JSON values."""

    run_id: str
    thread_id: str
    assistant_id: str
    graph_id: str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    multitask_strategy: str = "reject"
    status: str = "pending"
    #: Unix times
    created_at: float = 0.0
    updated_at: float = 0.0
    #: the worker holding the run's lease (while it runs), and when that lease expires
    worker: str | None = None
    lease_expires: float | None = None
    #: how many times a worker claimed the run (2 and more: it was recovered after a crash)
    attempt: int = 0
    cancel_requested: bool = False
    result: Any = None
    #: how many events the run has (the ``seq`` of its last one)
    events: int = 0

    @property
    def done(self) -> bool:
        return self.status in ENDED


def reset_to_pending(run: QueuedRun, now: float) -> None:
    """Make ``run`` the row :meth:`RunQueue.enqueue` stores at ``now``: pending, never claimed, no events."""
    run.status, run.attempt, run.events, run.worker, run.lease_expires = "pending", 0, 0, None, None
    run.created_at = run.created_at or now
    run.updated_at = now


@dataclasses.dataclass(frozen=True)
class RunEvent:
    """One event of a run's stream: its position (from 1), name and JSON text."""

    run_id: str
    seq: int
    event: str
    data: str


@dataclasses.dataclass
class ThreadRow:
    """A thread as the server's API knows it (its checkpoints and runs are on the tape).

    ``deleted`` rows hide a thread deleted over HTTP that the tape still has runs of."""

    thread_id: str
    graph_id: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    status: str = "idle"
    created_at: float = 0.0
    updated_at: float = 0.0
    deleted: bool = False


@dataclasses.dataclass
class AssistantRow:
    """An assistant made over HTTP: a graph with its own config, context and metadata."""

    assistant_id: str
    graph_id: str
    name: str | None = None
    description: str | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    context: dict[str, Any] = dataclasses.field(default_factory=dict)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    version: int = 1
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclasses.dataclass
class Enqueued:
    """What :meth:`RunQueue.enqueue` did: ``run`` is the queued row (None when refused);
    ``active`` the thread's runs that had not ended, oldest first, as they were before."""

    run: QueuedRun | None
    active: list[QueuedRun]


class RunQueue(abc.ABC):
    """Runs, their events, threads and assistants of the Studio server, shared by its processes."""

    #: the store URL (secrets removed)
    url: str
    #: only one process may execute runs (SQLite: a file on one machine, one writer)
    single_process: bool = False
    #: keys whose values an ended run's kwargs and metadata keep redacted, beside the secret-looking
    #: ones (the tape's ``redact=``; :func:`~graphtape.store.runqueue.run_queue_for` sets them)
    redact_keys: frozenset[str] = frozenset()

    # -- runs --------------------------------------------------------------------------

    @abc.abstractmethod
    def enqueue(self, run: QueuedRun, *, strategy: str = "enqueue", cancel_result: Any = None) -> Enqueued:
        """Queue ``run`` (``pending``; ``created_at`` set when 0) on its thread, atomically with what
        ``strategy`` asks when the thread has active runs: ``reject`` queues nothing;
        ``enqueue`` queues behind them; ``interrupt``/``rollback`` cancel them first (a pending
        one ends ``interrupted`` with ``cancel_result``, a running one gets ``cancel_requested``)."""

    @abc.abstractmethod
    def claim(self, worker: str, ttl: float) -> QueuedRun | None:
        """Take the oldest claimable run for ``worker`` for ``ttl`` seconds, or None.

        Claimable: the oldest active run of its thread, ``pending`` or ``running`` with an
        expired lease. The claimed row is returned ``running``, ``attempt`` one higher."""

    @abc.abstractmethod
    def heartbeat(self, run_id: str, worker: str, ttl: float) -> bool | None:
        """Renew ``worker``'s lease on the run for ``ttl`` seconds: the run's ``cancel_requested``,
        or None when the worker no longer holds it (it expired and another worker claimed it)."""

    @abc.abstractmethod
    def release(self, run_id: str, worker: str) -> bool:
        """Give a running run up (its lease expires now, its status stays ``running``) so that any
        worker claims it at once and resumes it; False when ``worker`` did not hold it."""

    @abc.abstractmethod
    def finish(self, run_id: str, worker: str, status: str, result: Any) -> bool:
        """End the run with ``status`` and ``result`` if ``worker`` still holds it (else False); its
        kwargs and metadata are then stored redacted (:func:`ended_text`), as on every other way a
        run ends (cancelled while pending, interrupted by a newer run)."""

    @abc.abstractmethod
    def request_cancel(self, run_ids: Sequence[str], cancel_result: Any = None) -> list[QueuedRun]:
        """Cancel runs: a pending one ends ``interrupted`` with ``cancel_result`` at once, a running
        one gets ``cancel_requested`` (its worker stops it). Returns the rows as they are after."""

    @abc.abstractmethod
    def get(self, run_id: str) -> QueuedRun | None:
        """The run, or None."""

    @abc.abstractmethod
    def list_runs(
        self,
        *,
        thread_id: str | None = None,
        statuses: Sequence[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[QueuedRun]:
        """Runs, newest first (by queue order), filtered by thread and status."""

    @abc.abstractmethod
    def delete_run(self, run_id: str) -> bool:
        """Remove a run and its events; False when there was none."""

    # -- events ------------------------------------------------------------------------

    @abc.abstractmethod
    def append(self, run_id: str, worker: str, event: str, data: str) -> int:
        """Append one event to the run's stream and return its ``seq``; only the worker holding the
        run may (else :class:`~graphtape.errors.LeaseLost`)."""

    @abc.abstractmethod
    def events(self, run_id: str, after: int = 0, limit: int | None = None) -> list[RunEvent]:
        """The run's events with ``seq`` greater than ``after``, in order."""

    # -- threads -----------------------------------------------------------------------

    @abc.abstractmethod
    def create_thread(self, row: ThreadRow) -> tuple[ThreadRow, bool]:
        """Insert ``row`` unless a thread with its id exists (a deleted one is replaced):
        ``(the stored row, whether it was created)``."""

    @abc.abstractmethod
    def put_thread(self, row: ThreadRow) -> None:
        """Insert or replace the thread's row."""

    @abc.abstractmethod
    def update_thread(self, thread_id: str, **fields: Any) -> ThreadRow | None:
        """Change some fields (``status``, ``graph_id``, ``metadata``, ``deleted``) of an existing thread
        and its ``updated_at``; the row after, or None when there is none."""

    @abc.abstractmethod
    def get_thread(self, thread_id: str) -> ThreadRow | None:
        """The thread's row (deleted ones too), or None."""

    @abc.abstractmethod
    def list_threads(self) -> list[ThreadRow]:
        """Every thread row, deleted ones too, newest first."""

    # -- assistants --------------------------------------------------------------------

    @abc.abstractmethod
    def put_assistant(self, row: AssistantRow) -> None:
        """Insert or replace an assistant."""

    @abc.abstractmethod
    def get_assistant(self, assistant_id: str) -> AssistantRow | None:
        """The assistant, or None."""

    @abc.abstractmethod
    def list_assistants(self) -> list[AssistantRow]:
        """Every assistant, oldest first."""

    @abc.abstractmethod
    def delete_assistant(self, assistant_id: str) -> bool:
        """Remove an assistant; False when there was none."""

    def listen(self, on_notice: Callable[[str, str], None]) -> Callable[[], None] | None:
        """Call ``on_notice(what, run_id)`` from a background thread when any process queued a run
        (``queued``), appended an event (``event``), asked to cancel (``cancel``) or ended one
        (``ended``); returns the function that stops listening, or None when the backend cannot
        (its users poll; they poll anyway, notices only make them quicker)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections. Safe to call twice."""
