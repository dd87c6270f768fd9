"""Event format 3 (the SQLite store's bodies of a task's start and end and of a checkpoint).

The three events every recorded super-step writes are stored as a template number and the JSON
array of their values, ids and addresses as 16 bytes, not deflated. Stored events depend on the
format byte for byte: these tests compare it with its definition written out step by step, pin
the bytes of one body per template, and read every body back as it was written.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import pytest

from graphtape.store.base import EventRow, WriteBatch
from graphtape.store.codec import (
    EVENT_TEMPLATES_3,
    pack_event_compact,
    pack_event_templated,
    unpack_event,
)
from graphtape.store.sqlite import SqliteTapeStore
from tests.test_stepcost_events import _events, ids_as_bytes


def _reference(data: dict) -> bytes:
    """Format 3 as documented: 0x03, the template's number, the values' compact JSON with ids squeezed."""
    number = EVENT_TEMPLATES_3.index(tuple(data)) + 1
    raw = json.dumps(list(data.values()), separators=(",", ":"), sort_keys=True).encode("utf-8")
    return bytes((3, number)) + ids_as_bytes(raw)


def _hot_events() -> list[dict]:
    """format 2's test events with a template's keys, and checkpoints of a subgraph and of a run's input"""
    out = [d for d in _events() if tuple(d) in EVENT_TEMPLATES_3]
    for i in range(3):
        parent = None if i == 0 else str(uuid.UUID(int=i - 1 + 10**31))
        ns = f"sub:{uuid.UUID(int=i)}"
        out.append(
            {
                "checkpoint_id": str(uuid.UUID(int=i + 10**31)),
                "parent_id": parent,
                "ns": ns,
                "step": i - 1,
                "source": "input",
            }
        )
    return out


def test_hot_events_are_the_formats_bytes() -> None:
    for data in _hot_events():
        packed = pack_event_templated(data)
        assert packed == _reference(data), data
        back = unpack_event(packed)
        assert back == data
        assert list(back) == sorted(data)  # keys in the order every other format reads back (sorted JSON)


def test_pinned_bytes() -> None:
    # one body per template, as schema v13 stores them: these bytes must read back forever
    stored = {
        "0301" + b'["n01",2,"n01:'.hex() + "02" + "554078e064354e2f9381a199daacc66e" + b'"]'.hex(): {
            "node_path": "n01",
            "step": 2,
            "task": "n01:554078e0-6435-4e2f-9381-a199daacc66e",
        },
        "0302"
        + b'["n01:'.hex()
        + "02"
        + "554078e064354e2f9381a199daacc66e"
        + b'",0.000183,"'.hex()
        + "01"
        + "6bf1fe4a" * 4
        + b'"]'.hex(): {
            "task": "n01:554078e0-6435-4e2f-9381-a199daacc66e",
            "duration": 0.000183,
            "writes": "6bf1fe4a" * 4,
        },
        "0303" + b'["'.hex() + "02" + "1f1edb8442f36c2d800cdb9aca6adab7" + b'",null,"",-1,"input"]'.hex(): {
            "checkpoint_id": "1f1edb84-42f3-6c2d-800c-db9aca6adab7",
            "parent_id": None,
            "ns": "",
            "step": -1,
            "source": "input",
        },
    }
    for hexed, data in stored.items():
        assert pack_event_templated(data) == bytes.fromhex(hexed)
        assert unpack_event(bytes.fromhex(hexed)) == data


def test_other_bodies_stay_format_2() -> None:
    for data in (
        {"step": 1, "node_path": "n", "task": "n:x"},  # the keys of a template, in another order
        {"node_path": "n", "step": 1},  # fewer keys
        {"node_path": "n", "step": 1, "task": "t", "extra": 1},  # more
        {"checkpoint_id": str(uuid.UUID(int=7)), "ns": "", "step": 1},
    ):
        packed = pack_event_templated(data)
        assert packed == pack_event_compact(data)
        assert packed[:1] in (b"{", b"\x02")
        assert unpack_event(packed) == data


def test_values_of_any_json_type_read_back() -> None:
    odd = [
        'é\x01\x02\x00 "quoted" \\',  # control bytes are escaped by the JSON, never read as markers
        [1, {"b": 2, "a": [None, True]}],
        {"z": 1, "a": str(uuid.UUID(int=5))},
        1.5e300,
        -0.0,
        2**60,
        str(uuid.UUID(int=2**127)).upper(),  # upper case: left as text
        uuid.UUID(int=9).hex * 2,  # 64 digits: two addresses
        "",
        None,
    ]
    for keys in EVENT_TEMPLATES_3:
        for i in range(len(odd)):
            data = {k: odd[(i + j) % len(odd)] for j, k in enumerate(keys)}
            packed = pack_event_templated(data)
            assert packed[:1] == b"\x03"
            assert unpack_event(packed) == data


@pytest.mark.parametrize(
    "body",
    [b"\x03", b"\x03\x00[]", b"\x03\x04[1,2,3]", b"\x03\x01[1,2]", b"\x03\x01{}", b"\x03\x01[1,2,3,4]"],
)
def test_a_damaged_body_is_an_error(body: bytes) -> None:
    with pytest.raises(ValueError, match="format 3"):
        unpack_event(body)


def test_the_store_writes_format_3_and_reads_every_format(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SqliteTapeStore(path)
    hot = _hot_events()[:6]
    other = {"input": "x" * 200, "config": str(uuid.UUID(int=3))}
    try:
        store.write(WriteBatch(events=[EventRow("r", i, "e", 1.0 + i, d) for i, d in enumerate([*hot, other])]))
        # a body an earlier graphtape stored (format 2) next to them
        conn = sqlite3.connect(path)
        try:
            with conn:
                run_key, kind = conn.execute("SELECT run_key, kind FROM gt_event_rows LIMIT 1").fetchone()
                conn.execute(
                    "INSERT INTO gt_event_rows(run_key, seq, kind, ts, data) VALUES (?,?,?,?,?)",
                    (run_key, 99, kind, 9.0, pack_event_compact(hot[0])),
                )
            got = store.events("r")
            assert [e.data for e in got] == [*hot, other, hot[0]]
            firsts = [bytes(d[:1]) for (d,) in conn.execute("SELECT data FROM gt_event_rows ORDER BY seq")]
        finally:
            conn.close()
        assert firsts == [b"\x03"] * 6 + [b"\x02", b"\x02"]
        assert store.schema_version >= 13  # (v13: the version that brought format 3)
    finally:
        store.close()
