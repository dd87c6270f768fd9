"""One writer per thread: a lease with expiry and a fencing token.

Two processes invoking the same LangGraph thread interleave their super-steps:
both run the same task and one's writes are silently lost. graphtape takes a
lease on ``thread:<id>`` in the store before a run starts:

* it is held for ``ttl`` seconds and renewed by a heartbeat thread while the
  run is alive, so a process that dies (SIGKILL, lost host) frees the thread
  after at most ``ttl`` seconds, with no operator;
* each change of owner increments a **fencing token**; every tape and
  checkpoint write of the run carries it and the store refuses it if the
  lease moved on (``LeaseLost``), so a process that was paused past its
  lease (GC pause, suspended VM) cannot write over the new owner's work.

Rejected: PostgreSQL advisory locks alone (they die with the connection,
which a pooled connection outlives, and give no fencing), and OS file locks
(not shared between hosts, and not available for Redis).
"""

from __future__ import annotations

import os
import socket
import threading
import time

from graphtape import clock
from graphtape.errors import ThreadBusy
from graphtape.store.base import TapeStore, WriteBatch

DEFAULT_TTL = 30.0


def lease_name(thread_id: str) -> str:
    return f"thread:{thread_id}"


#: (pid, "host:pid") of this process: every run names its owner with it (asked of the OS once per process)
_HOST_PID: tuple[int, str] = (0, "")


def new_owner() -> str:
    """An owner id naming the host and process (shown in ``ThreadBusy`` errors)."""
    global _HOST_PID
    pid = os.getpid()
    if _HOST_PID[0] != pid:  # the first run, or the first in a forked child
        _HOST_PID = (pid, f"{socket.gethostname()}:{pid}")
    # from graphtape's pool of random bytes: an os.urandom call per run lets go of the interpreter lock
    return f"{_HOST_PID[1]}:{clock.random_hex()}"


class ThreadLease:
    """The lease of one thread for one run; a context manager."""

    def __init__(
        self, store: TapeStore, thread_id: str, *, ttl: float = DEFAULT_TTL, wait: float = 0.0, owner: str | None = None
    ):
        self.store = store
        self.thread_id = thread_id
        self.name = lease_name(thread_id)
        self.ttl = ttl
        self.wait = wait
        self.owner = owner or new_owner()
        self.token: int | None = None
        self.lost = False
        self._stop = threading.Event()
        self._beat_lock = threading.Lock()
        #: when the heartbeat renews it next (monotonic seconds)
        self.due = 0.0

    @property
    def fence(self) -> tuple[str, int] | None:
        return (self.name, self.token) if self.token is not None else None

    def acquire(self) -> int:
        deadline = time.monotonic() + self.wait
        delay = 0.02
        while True:
            token = self.store.acquire_lease(self.name, self.owner, self.ttl)
            if token is not None:
                self.token = token
                self._start_heartbeat()
                return token
            if time.monotonic() >= deadline:
                holder = self.store.lease_holder(self.name)
                who = f" by {holder[0]} for {max(0.0, holder[1] - time.time()):.0f}s more" if holder else ""
                raise ThreadBusy(
                    f"thread {self.thread_id} is being run by another process{who}; wait for it "
                    f"(record(..., wait=SECONDS)) or use another thread id"
                )
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.5)

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        HEARTBEATS.add(self)

    def beat(self) -> None:
        """Renew the lease (called by the process's heartbeat thread); a lost lease is noted, not raised."""
        with self._beat_lock:
            if self._stop.is_set() or self.token is None:
                return
            try:
                if self.store.acquire_lease(self.name, self.owner, self.ttl) != self.token:
                    self.lost = True
                    self._stop.set()
            except Exception:  # a store hiccup: try again next beat; fencing still protects writes
                pass

    def release(self) -> None:
        self.stop_renewing()
        if self.token is not None:
            try:
                self.store.release_lease(self.name, self.owner)
            finally:
                self.token = None

    def stop_renewing(self) -> None:
        """No more renewals (the lease stays held until it is released or expires); waits for one under way.

        Before a write that releases the lease in its own transaction
        (``WriteBatch.releases``), so a renewal cannot take it back afterwards.
        """
        self._stop.set()
        HEARTBEATS.remove(self)
        with self._beat_lock:
            pass

    def released_by_write(self) -> None:
        """The store gave the lease up in a write of this run (``WriteBatch.releases``): nothing left to do."""
        self.stop_renewing()
        self.token = None

    def release_in(self, batch: WriteBatch) -> bool:
        """Have ``batch``'s write give the lease up, if the store can do both in one transaction.

        Returns whether it was added; then call :meth:`released_by_write`
        once that write succeeded (:meth:`release` otherwise: it is
        idempotent).
        """
        if not self.store.releases_in_write or self.token is None:
            return False
        self.stop_renewing()
        batch.releases.append((self.name, self.owner))
        return True

    def __enter__(self) -> ThreadLease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Heartbeats:
    """One thread per process renews every held lease every ``ttl / 3`` seconds.

    A thread per run cost more than the run's own recording on short runs: starting it
    and joining it at the end each wait for the thread to be scheduled (milliseconds on
    a busy machine). Runs register their lease here and unregister it on release; the
    thread starts with the first lease (again after a fork) and idles when none is held.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._leases: dict[int, ThreadLease] = {}
        self._thread: threading.Thread | None = None
        #: when the sleeping thread wakes up next (monotonic seconds)
        self._wake_at = 0.0

    #: the longest the thread sleeps: a lease with a ttl of 3 s or more added meanwhile needs no wake-up
    IDLE = 1.0

    def reset(self) -> None:
        """Forget every lease and the thread (in a forked child: neither is its own)."""
        self._cond = threading.Condition()
        self._leases = {}
        self._thread = None
        self._wake_at = 0.0

    def add(self, lease: ThreadLease) -> None:
        with self._cond:
            lease.due = time.monotonic() + max(lease.ttl / 3, 0.05)
            self._leases[id(lease)] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="graphtape-leases", daemon=True)
                self._thread.start()
            elif lease.due < self._wake_at:
                # woken only when it would sleep past this lease's renewal: a wake-up costs the
                # running graph a switch of the interpreter lock
                self._cond.notify()

    def remove(self, lease: ThreadLease) -> None:
        with self._cond:
            self._leases.pop(id(lease), None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [lease for lease in self._leases.values() if lease.due <= now]
                for lease in due:
                    lease.due = now + max(lease.ttl / 3, 0.05)
                if not due:
                    nearest = min((lease.due for lease in self._leases.values()), default=now + self.IDLE)
                    self._wake_at = min(nearest, now + self.IDLE)
                    self._cond.wait(timeout=max(self._wake_at - now, 0.01))
                    continue
            for lease in due:
                lease.beat()


#: the process's lease heartbeat
HEARTBEATS = Heartbeats()

if hasattr(os, "register_at_fork"):
    # a child has no heartbeat thread, and the parent's may have held the lock at the fork
    os.register_at_fork(after_in_child=HEARTBEATS.reset)
