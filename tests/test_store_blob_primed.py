"""codec.pack_blob deflates small blobs, and pack_event_json (format 1) events, with copies of primed streams:
the stored bytes are those of a stream set up with the preset dictionary for each one (as before), for every
size and window."""

from __future__ import annotations

import json
import os
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from graphtape.store.codec import (
    BLOB_ZDICT_1,
    DICT_BLOB_MAX,
    EVENT_ZDICT_1,
    compress_blob,
    pack_blob,
    pack_event_json,
    unpack_blob,
    unpack_event,
)


def fresh_pack_blob(data: bytes, *, over: int) -> tuple[str, bytes]:
    """pack_blob as written before the primed streams: a new stream with the dictionary per blob."""
    if len(data) <= over:
        return "raw", data
    if len(data) <= DICT_BLOB_MAX:
        wbits = min(15, max(9, (len(data) + len(BLOB_ZDICT_1) - 1).bit_length()))
        c = zlib.compressobj(6, zlib.DEFLATED, -wbits, max(1, wbits - 7), zdict=BLOB_ZDICT_1)
        packed, enc = c.compress(data) + c.flush(), "d1"
    else:
        packed, enc = compress_blob(data), "z"
    return (enc, packed) if len(packed) < len(data) else ("raw", data)


_TEXT = (
    b'{"t":"msg","h":"","id":"lc_run--0af3","type":"ai","content":"The weather in Paris is mild today, '
    b'with a light breeze from the west and a chance of rain in the evening. "}'
)


def test_every_window_boundary_gives_the_same_bytes() -> None:
    # sizes on both sides of each window size's limit (the dictionary counts), up to the d1 limit and past it
    sizes = {1, 40, 41, 100}
    for wbits in range(10, 14):
        edge = (1 << wbits) - len(BLOB_ZDICT_1)
        sizes.update({edge - 1, edge, edge + 1})
    sizes.update({DICT_BLOB_MAX - 1, DICT_BLOB_MAX, DICT_BLOB_MAX + 1, 9000})
    for size in sorted(s for s in sizes if s > 0):
        for data in ((_TEXT * (size // len(_TEXT) + 1))[:size], os.urandom(size)):
            got = pack_blob(data, over=40)
            assert got == fresh_pack_blob(data, over=40), size
            assert unpack_blob(*got) == data


def test_a_copy_leaves_the_primed_stream_as_it_was() -> None:
    # the same blob twice, and another in between: each deflates from the dictionary alone
    first = pack_blob(_TEXT * 3, over=40)
    pack_blob(_TEXT[::-1] * 5, over=40)
    assert pack_blob(_TEXT * 3, over=40) == first == fresh_pack_blob(_TEXT * 3, over=40)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=DICT_BLOB_MAX + 200),
        st.text(max_size=3000).map(lambda t: t.encode("utf-8")),
        st.lists(st.sampled_from([_TEXT, b'"content":"', b"weather ", b"\x00", b"{}"]), max_size=60).map(b"".join),
    ),
    st.sampled_from([0, 40]),
)
def test_same_bytes_as_a_stream_set_up_per_blob(data: bytes, over: int) -> None:
    got = pack_blob(data, over=over)
    assert got == fresh_pack_blob(data, over=over)
    assert unpack_blob(*got) == data


def fresh_pack_event_json(raw: bytes) -> bytes:
    """codec.pack_event_json as written before: a new stream with the event dictionary per event."""
    if len(raw) < 96:
        return raw
    c = zlib.compressobj(6, zlib.DEFLATED, -10, 2, zdict=EVENT_ZDICT_1)
    packed = b"\x01" + c.compress(raw) + c.flush()
    return packed if len(packed) < len(raw) else raw


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["call_id", "request", "response", "node_path", "model", "tokens", "cost", "x"]),
        st.one_of(st.text(max_size=200), st.integers(), st.floats(allow_nan=False)),
    )
)
def test_format_1_events_deflate_as_with_a_stream_per_event(data: dict[str, object]) -> None:
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode("utf-8")
    assert pack_event_json(raw) == fresh_pack_event_json(raw)
    assert unpack_event(pack_event_json(raw)) == json.loads(raw)
    assert pack_event_json(raw * 3) == fresh_pack_event_json(raw * 3)  # longer, repetitive text
