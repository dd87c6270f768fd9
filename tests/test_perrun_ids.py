"""graphtape's ids come from a pool of OS random bytes (clock._uuid4): still UUID4s, unique, fork-safe."""

from __future__ import annotations

import os
import uuid

import pytest

from graphtape import clock


def test_ids_are_unique_version4_uuids_across_pool_refills():
    ids = [clock._uuid4() for _ in range(clock._POOL_IDS * 3 + 5)]
    assert len(set(ids)) == len(ids)
    for text in ids[:: clock._POOL_IDS // 2]:
        u = uuid.UUID(text)
        assert str(u) == text and u.version == 4 and u.variant == uuid.RFC_4122


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_reuse_the_parents_pool():
    clock._uuid4()  # the parent has a pool with ids left in it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, clock._uuid4().encode())
        os._exit(0)
    os.close(write)
    child_id = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent_next = [clock._uuid4() for _ in range(clock._POOL_IDS)]
    assert uuid.UUID(child_id).version == 4
    assert child_id not in parent_next


def test_lease_owners_differ_per_lease_and_name_the_process():
    from graphtape.runtime.lease import new_owner

    owners = {new_owner() for _ in range(50)}
    assert len(owners) == 50
    assert all(o.split(":")[-2] == str(os.getpid()) and len(o.split(":")[-1]) == 8 for o in owners)
