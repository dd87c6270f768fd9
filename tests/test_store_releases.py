"""A run's last write gives its thread's lease up in the same transaction (issue 13: one transaction fewer per run).

Every backend that sets ``TapeStore.releases_in_write`` must release exactly
as ``release_lease`` does, and only when the whole batch is written: a batch
fenced by a lease that moved on writes nothing and releases nothing.
"""

from __future__ import annotations

import time

import pytest

import graphtape
from graphtape.errors import LeaseLost
from graphtape.store.base import EventRow, WriteBatch


def _batch(run_id: str, seq: int) -> WriteBatch:
    batch = WriteBatch()
    batch.events.append(EventRow(run_id=run_id, seq=seq, kind="note", ts=time.time(), data={"n": seq}))
    batch.blobs["0" * 32] = b"{}"
    return batch


def test_the_last_write_gives_the_lease_up_with_its_rows(tape: graphtape.Tape) -> None:
    store = tape.store
    if not store.releases_in_write:
        pytest.skip(f"{type(store).__name__} releases leases on their own")
    token = store.acquire_lease("thread:t", "me", 30)
    assert token is not None
    batch = _batch("r1", 1)
    batch.releases.append(("thread:t", "me"))
    store.write(batch, fence=("thread:t", token))
    assert [e.seq for e in store.events("r1")] == [1]
    assert store.lease_holder("thread:t") is None
    # the next holder gets a larger token (the row and its token stayed)
    again = store.acquire_lease("thread:t", "other", 30)
    assert again is not None and again > token


def test_a_fenced_out_write_neither_writes_nor_releases(tape: graphtape.Tape) -> None:
    store = tape.store
    if not store.releases_in_write:
        pytest.skip(f"{type(store).__name__} releases leases on their own")
    old = store.acquire_lease("thread:t", "me", 0.2)
    assert old is not None
    time.sleep(0.3)
    new = store.acquire_lease("thread:t", "other", 30)
    assert new is not None and new > old
    batch = _batch("r2", 1)
    batch.releases.append(("thread:t", "me"))
    with pytest.raises(LeaseLost):
        store.write(batch, fence=("thread:t", old))
    assert store.events("r2") == []
    holder = store.lease_holder("thread:t")
    assert holder is not None and holder[0] == "other"


def test_a_release_names_its_owner(tape: graphtape.Tape) -> None:
    """Another owner's lease is not given up by a batch that names a different owner."""
    store = tape.store
    if not store.releases_in_write:
        pytest.skip(f"{type(store).__name__} releases leases on their own")
    assert store.acquire_lease("thread:t", "other", 30) is not None
    batch = _batch("r3", 1)
    batch.releases.append(("thread:t", "me"))
    store.write(batch)
    holder = store.lease_holder("thread:t")
    assert holder is not None and holder[0] == "other"
