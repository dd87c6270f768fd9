"""The lease heartbeat is one thread per process (a thread per run cost milliseconds per run to start
and join): it must still renew every held lease in time, and a released lease must stay released."""

from __future__ import annotations

import threading
import time

from graphtape.runtime.lease import HEARTBEATS, ThreadLease


def test_held_leases_are_renewed_by_one_thread(tape) -> None:
    leases = [ThreadLease(tape.store, f"t{i}", ttl=0.3, owner=f"me-{i}") for i in range(3)]
    for lease in leases:
        lease.acquire()
    try:
        time.sleep(0.9)  # three ttls: without renewal every lease would have expired
        for i, lease in enumerate(leases):
            assert not lease.lost
            assert tape.store.acquire_lease(lease.name, f"other-{i}", 0.3) is None
            assert tape.store.lease_holder(lease.name)[0] == f"me-{i}"
        beaters = [t for t in threading.enumerate() if t.name.startswith("graphtape-lease")]
        assert len(beaters) == 1
    finally:
        for lease in leases:
            lease.release()
    for i, lease in enumerate(leases):
        # released at once, and no renewal takes it back
        assert tape.store.acquire_lease(lease.name, f"other-{i}", 30) is not None
    time.sleep(0.25)
    for i, lease in enumerate(leases):
        assert tape.store.lease_holder(lease.name)[0] == f"other-{i}"


def test_a_lease_taken_over_is_noted_as_lost(tape) -> None:
    lease = ThreadLease(tape.store, "x", ttl=0.6, owner="me")
    lease.acquire()
    try:
        time.sleep(0.9)  # renewed meanwhile
        assert not lease.lost
        HEARTBEATS.remove(lease)  # a stalled process: no more renewals
        time.sleep(0.9)
        assert tape.store.acquire_lease(lease.name, "other", 30) is not None
        lease.beat()
        assert lease.lost
    finally:
        lease.release()
    assert tape.store.lease_holder(lease.name)[0] == "other"
