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
import uuid

from graphtape.errors import ThreadBusy
from graphtape.store.base import TapeStore

DEFAULT_TTL = 30.0


def lease_name(thread_id: str) -> str:
    return f"thread:{thread_id}"


def new_owner() -> str:
    """An owner id naming the host and process (shown in ``ThreadBusy`` errors)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
        self._heartbeat: threading.Thread | None = None

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
        def beat() -> None:
            interval = max(self.ttl / 3, 0.05)
            while not self._stop.wait(interval):
                try:
                    if self.store.acquire_lease(self.name, self.owner, self.ttl) != self.token:
                        self.lost = True
                        return
                except Exception:  # a store hiccup: try again next beat; fencing still protects writes
                    continue

        self._heartbeat = threading.Thread(target=beat, name=f"graphtape-lease-{self.thread_id}", daemon=True)
        self._heartbeat.start()

    def release(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=1.0)
        if self.token is not None:
            try:
                self.store.release_lease(self.name, self.owner)
            finally:
                self.token = None

    def __enter__(self) -> ThreadLease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
