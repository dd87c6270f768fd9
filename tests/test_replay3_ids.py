"""graphtape.clock's ids: the pool's bytes written out as ``str(uuid.UUID(bytes=..., version=4))`` does."""

from __future__ import annotations

import os
import uuid

from graphtape import clock


def test_pool_ids_are_the_uuid_module_s_version_4_form_of_the_pool_bytes(monkeypatch):
    # every value of the two bytes the version and the variant overwrite, and random ones around them
    pool = b"".join(
        os.urandom(6) + bytes([b]) + os.urandom(1) + bytes([c]) + os.urandom(7)
        for b, c in [(i, 255 - i) for i in range(256)]
    )
    monkeypatch.setattr(clock, "_pool", pool)
    monkeypatch.setattr(clock, "_pool_pos", 0)
    ids = [clock._uuid4() for _ in range(256)]
    expected = [str(uuid.UUID(bytes=pool[i : i + 16], version=4)) for i in range(0, len(pool), 16)]
    assert ids == expected
    assert all(uuid.UUID(i).version == 4 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)


def test_pool_ids_are_distinct_and_refill():
    ids = {clock._uuid4() for _ in range(3 * clock._POOL_IDS)}
    assert len(ids) == 3 * clock._POOL_IDS
