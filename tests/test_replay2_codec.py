"""Format 2's squeeze and unsqueeze (graphtape.store.codec) against their plain definitions.

The id pattern is written with its shared first 8 digits once, and the
markers are found with one ``split``: the bytes stored and read must be
exactly what the plain forms give, for every text (stored events depend on
them byte for byte).
"""

from __future__ import annotations

import random
import re
import uuid

from graphtape.store import codec

#: the plain pattern: a UUID, else 32 hex digits, at the leftmost place
_PLAIN_IDS = re.compile(rb"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})")


def _plain_unsqueeze(text: bytes) -> bytes:
    """A marker, then 16 bytes written out (as hex, or as a UUID); the search resumes after them."""
    out: list[bytes] = []
    at = 0
    while at < len(text):
        mark = text[at]
        if mark in (1, 2):
            value = text[at + 1 : at + 17].hex()
            if mark == 2:
                value = str(uuid.UUID(value))
            out.append(value.encode())
            at += 17
        else:
            out.append(text[at : at + 1])
            at += 1
    return b"".join(out)


def _texts(rng: random.Random, n: int) -> list[bytes]:
    """JSON-like texts full of hex runs of every length near 8, 24, 32 and 36, UUIDs and near-UUIDs."""
    pieces = [
        lambda: uuid.UUID(int=rng.getrandbits(128)).hex,
        lambda: str(uuid.UUID(int=rng.getrandbits(128))),
        lambda: "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice([7, 8, 9, 23, 24, 31, 33, 40, 64]))),
        lambda: str(uuid.UUID(int=rng.getrandbits(128)))[: rng.randrange(9, 36)],
        lambda: str(uuid.UUID(int=rng.getrandbits(128))).upper(),
        lambda: rng.choice(['"call_id":"', '","', '"step":3,', "face-", "-cafe", "deadbeef-", "x", "-"]),
    ]
    return ["".join(rng.choice(pieces)() for _ in range(rng.randrange(1, 12))).encode() for _ in range(n)]


def test_the_id_pattern_splits_as_the_plain_alternation() -> None:
    for text in _texts(random.Random(13), 3000):
        assert codec._IDS.split(text) == _PLAIN_IDS.split(text), text


def test_unsqueeze_writes_every_marker_out_as_the_plain_loop() -> None:
    rng = random.Random(7)
    for text in _texts(rng, 2000):
        squeezed = codec._squeeze(text)
        assert codec._unsqueeze(squeezed) == _plain_unsqueeze(squeezed) == text
    # raw bytes that hold marker bytes themselves are part of their address, never a marker
    tricky = b'{"a":"' + b"\x01" + bytes([1, 2] * 8) + b'","b":"' + b"\x02" + bytes([2] * 16) + b'"}'
    assert codec._unsqueeze(tricky) == _plain_unsqueeze(tricky)
    assert b"\x01" not in codec._unsqueeze(tricky) and b"\x02" not in codec._unsqueeze(tricky)


def test_events_pack_and_read_back_as_before() -> None:
    rng = random.Random(3)
    for _ in range(300):
        data = {
            "call_id": str(uuid.UUID(int=rng.getrandbits(128))),
            "request": uuid.UUID(int=rng.getrandbits(128)).hex,
            "node_path": rng.choice(["agent", "tools", "step1"]),
            "step": rng.randrange(50),
            "source": "tape",
            "fingerprint": uuid.UUID(int=rng.getrandbits(128)).hex,
        }
        packed = codec.pack_event_compact(data)
        assert packed[:1] == b"\x02"
        assert codec.unpack_event(packed) == data


def test_an_event_body_is_read_as_json_loads_reads_it() -> None:
    import json

    import pytest

    for text in [b'{"a":1,"b":[1,2.5,null,true],"c":"\\u00e9t\\u00e9 \xc3\xa9"}', b"[]", b'"x"', b"3", b"{}"]:
        assert codec._loads(text) == json.loads(text)
    for bad in [b'{"a":1}{"b":2}', b'{"a":1} x', b'{"a":', b"", b"\xff"]:
        with pytest.raises(ValueError):
            codec._loads(bad)
    assert codec._loads(b'{"a":1} ') == {"a": 1}  # trailing whitespace, as json.loads allows
