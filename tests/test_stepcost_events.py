"""Format 2 event bodies (the SQLite store's) keep their bytes while they are made faster.

``pack_event_compact`` runs for every event of a recorded run (three per super-step) inside
the store's write transaction, so it shares one JSON encoder and deflates with copies of a
stream primed with the dictionary. Stored events depend on the format byte for byte: these
tests compare it with the format's definition written out step by step.
"""

from __future__ import annotations

import json
import threading
import uuid
import zlib

from graphtape.store.codec import EVENT_ZDICT_1, pack_event_compact, unpack_event


def ids_as_bytes(raw: bytes) -> bytes:
    """JSON text with every lowercase UUID as 0x02 + its 16 bytes and every 32-digit address as 0x01 +
    its 16 bytes, as formats 2 and 3 document it."""
    import re

    ids = re.compile(rb"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})")
    parts = ids.split(raw)
    for i in range(1, len(parts), 2):
        text = parts[i].decode()
        if len(text) == 36:
            parts[i] = b"\x02" + bytes.fromhex(text.replace("-", ""))
        else:
            parts[i] = b"\x01" + bytes.fromhex(text)
    return b"".join(parts)


def _reference(data: dict) -> bytes:
    """Format 2 as documented: sorted compact JSON, ids as marker + 16 bytes, deflated with the dictionary."""
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode("utf-8")
    c = zlib.compressobj(6, zlib.DEFLATED, -10, 2, zdict=EVENT_ZDICT_1)
    packed = b"\x02" + c.compress(ids_as_bytes(raw)) + c.flush()
    return packed if len(packed) < len(raw) else raw


def _events() -> list[dict]:
    out: list[dict] = []
    for i in range(40):
        task = f"n{i:02d}:{uuid.UUID(int=i * 7919 + 1)}"
        out.append({"node_path": f"n{i:02d}", "step": i, "task": task})
        out.append({"task": task, "duration": 0.000183 + i, "writes": f"{i:032x}"})
        out.append(
            {
                "checkpoint_id": str(uuid.UUID(int=i + 10**30)),
                "parent_id": None if i == 0 else str(uuid.UUID(int=i - 1 + 10**30)),
                "ns": "",
                "step": i,
                "source": "loop",
            }
        )
    out.append({"name": "short"})  # no id: plain JSON, not deflated
    out.append({"text": "UPPER 0123456789ABCDEF0123456789ABCDEF stays text", "x": [1, 2, {"é": "ü"}]})
    return out


def test_compact_events_are_the_formats_bytes() -> None:
    for data in _events():
        packed = pack_event_compact(data)
        assert packed == _reference(data), data
        assert unpack_event(packed) == data


def test_compact_events_pinned_bytes() -> None:
    # a task_finished body as a recorded run writes it, stored before this change
    data = {"task": "n01:554078e0-6435-4e2f-9381-a199daacc66e", "duration": 0.000183, "writes": "6bf1fe4a" * 4}
    stored = bytes.fromhex(
        "02ab46738e81a18531dc843c03432ba650878a0729a67efa931b17cebcb5e6589e12928b19b33ffef342c64ab500"
    )
    assert pack_event_compact(data) == stored
    assert unpack_event(stored) == data


def test_compact_events_from_threads() -> None:
    """The primed stream is copied, never written to: threads packing at once get the same bytes."""
    events = _events()
    want = [_reference(d) for d in events]
    errors: list[str] = []

    def go() -> None:
        for _ in range(20):
            if [pack_event_compact(d) for d in events] != want:
                errors.append("differs")

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
