"""graphtape's own clock and ids: one seam, so tests (and tools) can fix them.

Run ids, call ids, event timestamps and a run's ``started_at``/``ended_at``
come from :func:`now` and :func:`new_id`, never from ``time.time()`` or
``uuid.uuid4()`` directly, the way a Temporal workflow takes time and ids
from its context. Durations (latencies, flush intervals) are measured with
``time.perf_counter``/``time.monotonic`` and are not part of this seam: they
say how long something took, not when or which.

The user's code is not affected: what a node reads from the clock is the
user's business (``@graphtape.effect`` records it).

``fixed()`` replaces both for a block::

    with clock.fixed(start=1000.0, step=1.0, ids="run"):
        ...  # now() -> 1000.0, 1001.0, ...; new_id() -> "run-0000000001", ...
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator

_now: Callable[[], float] = time.time


#: random bytes for this many ids are drawn from the OS at once (see _uuid4)
_POOL_IDS = 256
_pool = b""
_pool_pos = 0
_pool_lock = threading.Lock()


def _uuid4() -> str:
    """A random (version 4) UUID string, as ``str(uuid.uuid4())`` but from a pool of OS random bytes.

    ``uuid.uuid4()`` reads 16 bytes with one ``os.urandom`` call, which lets
    go of the interpreter lock: with another Python thread busy beside it (as
    LangGraph's checkpoint threads are), taking the lock back made an id cost
    59-116 us against 7-34 us from the pool (a micro-benchmark on the 2-vCPU
    machine; whole runs showed no difference beyond their noise). The bytes
    come from the same source, ``_POOL_IDS`` ids' worth
    at a time; each id takes its own 16 of them once (under a lock), and a
    forked child drops the pool it inherited (``_drop_pool``) so parent and
    child never hand out the same id.
    """
    global _pool, _pool_pos
    with _pool_lock:
        pos = _pool_pos
        if pos >= len(_pool):
            _pool, pos = os.urandom(16 * _POOL_IDS), 0
        _pool_pos = pos + 16
        h = _pool[pos : pos + 16].hex()
    # ``str(uuid.UUID(bytes=raw, version=4))`` written out (~3 -> ~1 us; a strict replay takes 20+
    # ids): the version nibble (the 13th digit) becomes 4, the variant's two bits (the top of the
    # 17th digit) become 10; the other 122 bits are the random bytes as they were
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


#: a hex digit -> the digit with its top two bits set to ``10`` (RFC 4122's variant)
_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}


def random_hex() -> str:
    """Eight random hex digits from the same pool (a lease owner's suffix): never fixed by :func:`fixed`."""
    return _uuid4()[:8]


def _drop_pool() -> None:
    global _pool, _pool_pos, _pool_lock
    _pool, _pool_pos, _pool_lock = b"", 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_pool)


_new_id: Callable[[], str] = _uuid4
_lock = threading.Lock()


def now() -> float:
    """Seconds since the epoch, for graphtape's own timestamps."""
    return _now()


def new_id() -> str:
    """A new unique id (a UUID4 string unless fixed), for runs, calls and threads graphtape names."""
    return _new_id()


@contextlib.contextmanager
def use(now: Callable[[], float] | None = None, new_id: Callable[[], str] | None = None) -> Iterator[None]:
    """Take timestamps and/or ids from the given functions inside the block (process-wide)."""
    global _now, _new_id
    with _lock:
        saved = _now, _new_id
        if now is not None:
            _now = now
        if new_id is not None:
            _new_id = new_id
    try:
        yield
    finally:
        with _lock:
            _now, _new_id = saved


@contextlib.contextmanager
def fixed(start: float = 0.0, step: float = 0.0, ids: str = "id") -> Iterator[None]:
    """Deterministic time (``start``, then ``+step`` per reading) and ids (``<ids>-0000000001``, ...)."""
    ticks = itertools.count()
    counter = itertools.count(1)
    tick_lock = threading.Lock()

    def fixed_now() -> float:
        with tick_lock:
            return start + step * next(ticks)

    def fixed_id() -> str:
        with tick_lock:
            return f"{ids}-{next(counter):010d}"

    with use(fixed_now, fixed_id):
        yield
