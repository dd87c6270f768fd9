"""The run queue: runs started over HTTP, their stream events, threads and assistants, kept in the store.

The Studio server (``graphtape dev``/``graphtape serve``) used to keep its
runs in the memory of the process that started them. Here they live in the
tape's database instead, so that every server process on one store sees the
same runs, threads and assistants, and a run outlives the process that began
executing it. The database is the coordinator; there is no broker:

* a **queued run** is a row (:class:`QueuedRun`): ``pending`` until a worker
  :meth:`~RunQueue.claim`\\ s it, then ``running`` under a **lease** the worker
  renews (:meth:`~RunQueue.heartbeat`), then ``success``, ``error``,
  ``interrupted`` or ``timeout`` (:meth:`~RunQueue.finish`);
* **one run executes at a time per thread**: only the oldest active (pending
  or running) run of a thread can be claimed, so a thread's runs execute in
  the order they were queued;
* a ``running`` run whose lease expired (its process died) is claimed again
  by any worker, with ``attempt`` one higher: that worker recovers it;
* **cancel** is a flag in the row (:meth:`~RunQueue.request_cancel`) that the
  executing worker reads with each heartbeat, whichever process it is in;
* a run's **events** (:class:`RunEvent`) are appended in order with ``seq``
  1, 2, 3... by the run's current owner only (:meth:`~RunQueue.append` is
  fenced by the lease), and read after any ``seq``: a viewer reconnecting
  with ``Last-Event-ID`` to any process gets every missed event once.

Backends (:mod:`runqueue_sqlite`, :mod:`runqueue_postgres`,
:mod:`runqueue_redis`) create their own tables or keys (``gt_q_*``, ``P q:*``)
on first use, beside the tape's and never touching them, on their own
connection. :func:`run_queue_for` opens the queue of a tape's store.

Claims compare lease expiries with the clock of the process that claims
(``time.time()``): the processes sharing a queue must have clocks in step
(NTP), as the tape's thread leases already require.

Rejected: a broker (Celery, RQ): one more service to run, and a second source
of truth beside the tape; PostgreSQL advisory locks held for a run's life:
they die with a pooled connection, not with the worker, and give no fencing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphtape.store.runqueue_base import (
    ACTIVE,
    ENDED,
    RUN_STATUSES,
    AssistantRow,
    Enqueued,
    QueuedRun,
    RunEvent,
    RunQueue,
    ThreadRow,
)

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = [
    "ACTIVE",
    "ENDED",
    "RUN_STATUSES",
    "AssistantRow",
    "Enqueued",
    "QueuedRun",
    "RunEvent",
    "RunQueue",
    "ThreadRow",
    "run_queue_for",
]


def run_queue_for(tape: Tape) -> RunQueue:
    """The run queue in the store of ``tape`` (same database, its own connection); an ended run's
    kwargs keep the tape's ``redact=`` keys redacted, beside the secret-looking ones."""
    queue = _open(tape)
    queue.redact_keys = frozenset(tape.redact_keys)
    return queue


def _open(tape: Tape) -> RunQueue:
    store = tape.store
    from graphtape.store.sqlite import SqliteTapeStore

    if isinstance(store, SqliteTapeStore):
        from graphtape.store.runqueue_sqlite import SqliteRunQueue

        return SqliteRunQueue(store.path, busy_timeout=store.busy_timeout)
    kind = type(store).__module__  # import a backend's driver only when its store is in use
    if kind == "graphtape.store.postgres":
        from graphtape.store.postgres import PostgresTapeStore
        from graphtape.store.runqueue_postgres import PostgresRunQueue

        assert isinstance(store, PostgresTapeStore)
        return PostgresRunQueue.for_store(store)
    if kind == "graphtape.store.redis":
        from graphtape.store.redis import RedisTapeStore
        from graphtape.store.runqueue_redis import RedisRunQueue

        assert isinstance(store, RedisTapeStore)
        return RedisRunQueue.for_store(store)
    from graphtape.errors import StoreError

    raise StoreError(f"the store {store.url} has no run queue; serve from a SQLite, PostgreSQL or Redis store")
