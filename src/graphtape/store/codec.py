"""How an event body is stored: the bytes every backend keeps for it.

Every backend stores an event body as :func:`pack_event` makes it and reads it
back with :func:`unpack_event` (which addresses a body refers to is said by its
type, :func:`graphtape.events.refs`). Kept apart from the store interface
(:mod:`graphtape.store.base`) because it is a format: a stored byte depends on
it, where the interface only says what a store must do.
"""

from __future__ import annotations

import binascii
import json
import re
import zlib
from typing import Any

from graphtape.jsontext import one_shot

#: Preset dictionary for compressing event bodies (format 1). Never edit it:
#: stored events depend on it byte for byte. A new dictionary is a new format byte.
EVENT_ZDICT_1 = (
    b'"branch":"__pregel_push,"call_id":"","checkpoint_id":"","cost":0.0,"fingerprint":"","latency":0.0,'
    b'"messages":"","model":"","node_path":"","ordinal":0,"request":"","response":"","source":"tape",'
    b'"served_from":"","recorded_latency":0.0,"tokens":,"parent_id":"1f1","ns":"","source":"loop","step":,'
    b'"duration":0.00,"writes":"","status":"finished","output":"","input":"","config":"","versions":"",'
    b'"task":"tools:agent:","name":"source":"live",'
)


def pack_event(data: dict[str, Any]) -> bytes:
    """An event body as stored: compact JSON, deflated with a preset dictionary when that pays.

    Events are small and full of the same keys; per-event deflate with a
    shared dictionary halves them (about 8 us each) while every event stays
    its own row, readable on its own.
    """
    return pack_event_json(_event_json(data).encode("utf-8"))  # json.dumps's text with these options (see below)


def pack_event_json(raw: bytes) -> bytes:
    """:func:`pack_event` of an event whose JSON (:func:`pack_event_plain`) the caller already has."""
    if len(raw) < 96:
        return raw
    c = _PRIMED_2.copy()  # format 1 deflates with format 2's settings: 16.0 -> 15.3 us for a 420-byte event
    packed = b"\x01" + c.compress(raw) + c.flush()
    return packed if len(packed) < len(raw) else raw


#: Lowercase UUIDs and 32-digit hex addresses in an event's JSON (one group: ``split`` keeps them):
#: most of an event's bytes, and what deflate cannot shrink (a small event gets fixed Huffman
#: codes: 8 bits a digit).
#: (The two share their first 8 digits, written once: the same matches as the plain alternation
#: ``UUID|[0-9a-f]{32}``, tried in the same order, in less than half its time: the scan no longer
#: starts both alternatives at every hex digit of the text.)
_IDS = re.compile(rb"([0-9a-f]{8}(?:-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{24}))")
#: In format 2, the marker of an address (16 bytes follow) and of a UUID (16 bytes follow).
#: Compact JSON text never holds a control byte (``json.dumps`` escapes them).
_HEX_MARK, _UUID_MARK = 1, 2
#: A marker and the 16 bytes it stands for, in one match (``split`` keeps both groups): a marker byte
#: among those 16 bytes is part of the match, never read as a marker.
_MARKED = re.compile(rb"([\x01\x02])(.{16})", re.S)


#: Compact, key-sorted JSON, one encoder for every event: ``json.dumps`` with these options builds
#: a new ``JSONEncoder`` per call (about a fifth of the time of encoding a small event).
_EVENT_JSON = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


#: :data:`_EVENT_JSON`'s text, without a new C encoder per event (see :func:`graphtape.jsontext.one_shot`)
_event_json = one_shot(_EVENT_JSON)

#: A deflate stream (format 2's settings) that has read the preset dictionary and nothing else:
#: each event deflates with a copy of it. Setting the dictionary again for every event cost more
#: than the copy; the bytes are the same (the copy is the state the dictionary left).
_PRIMED_2 = zlib.compressobj(6, zlib.DEFLATED, -10, 2, zdict=EVENT_ZDICT_1)

_unhex = binascii.unhexlify


def _squeeze(raw: bytes) -> bytes:
    """Compact JSON with its UUIDs and addresses as a marker and 16 bytes each."""
    parts = _IDS.split(raw)
    if len(parts) == 1:
        return raw
    for i in range(1, len(parts), 2):
        text = parts[i]
        parts[i] = b"\x02" + _unhex(text.replace(b"-", b"")) if len(text) == 36 else b"\x01" + _unhex(text)
    return b"".join(parts)


def pack_event_compact(data: dict[str, Any]) -> bytes:
    """An event body as stored in format 2: :func:`pack_event`'s JSON with every lowercase UUID
    and 32-digit hex address replaced by a marker and its 16 bytes, then deflated with the
    same dictionary; plain JSON when that is not smaller.

    About 40% smaller than format 1 for the events a run writes (checkpoint ids, task ids,
    addresses), for 2-3 microseconds more. Read by :func:`unpack_event` like every format.
    The SQLite store writes it for every event that format 3 does not take (see
    :func:`pack_event_templated`): hence the shared encoder and the primed deflate stream,
    which give the same bytes as :func:`pack_event`'s steps (``tests/test_stepcost_events.py``
    pins them).
    """
    raw = _event_json(data).encode("utf-8")
    c = _PRIMED_2.copy()
    packed = b"\x02" + c.compress(_squeeze(raw)) + c.flush()
    return packed if len(packed) < len(raw) else raw


#: Format 3's templates: the key sets of the events every super-step writes (a task's start and end,
#: a checkpoint), each in the order its writer builds it (``record/tasks.py``,
#: ``record/session.py``; ``graphtape.events`` lays the typed events out the same way). A body
#: names its template by number and holds the values alone. Never edit or reorder them: stored
#: events depend on them; a new key set is a new number at the end.
EVENT_TEMPLATES_3: tuple[tuple[str, ...], ...] = (
    ("node_path", "step", "task"),
    ("task", "duration", "writes"),
    ("checkpoint_id", "parent_id", "ns", "step", "source"),
)
#: key tuple -> the two bytes a format-3 body starts with
_TEMPLATE_HEADS = {keys: bytes((3, number)) for number, keys in enumerate(EVENT_TEMPLATES_3, 1)}
#: template number -> (its keys sorted, the index of each sorted key's value in the stored list):
#: a body reads back with its keys in the order of every other format's JSON (sorted)
_TEMPLATE_READS = {
    number: (tuple(sorted(keys)), tuple(sorted(range(len(keys)), key=keys.__getitem__)))
    for number, keys in enumerate(EVENT_TEMPLATES_3, 1)
}


def pack_event_templated(data: dict[str, Any]) -> bytes:
    """An event body as the SQLite store writes it: format 3 if its keys are a template's, else format 2.

    Format 3 is ``0x03``, the template's number, then the JSON array of the
    values (the keys are the template's), with ids and addresses as format 2
    writes them, not deflated. Deflating was most of the cost of packing the
    three events of a super-step (7-11 us each in format 2, 3-5 us in format 3), and
    without their keys the bodies are about as small as deflated ones: the
    dictionary mostly spared the keys, and deflate cannot shrink the ids.
    """
    head = _TEMPLATE_HEADS.get(tuple(data))
    if head is None:
        return pack_event_compact(data)
    return head + _squeeze(_event_json(list(data.values())).encode("utf-8"))


def _unpack_templated(blob: bytes) -> dict[str, Any]:
    read = _TEMPLATE_READS.get(blob[1]) if len(blob) > 1 else None
    if read is None:
        raise ValueError(f"event body of format 3 with an unknown template {blob[1:2].hex() or '(none)'}")
    keys, order = read
    values = _loads(_unsqueeze(blob[2:]))
    if type(values) is not list or len(values) != len(keys):
        raise ValueError(f"event body of format 3 does not hold the {len(keys)} values of its template")
    return {key: values[i] for key, i in zip(keys, order)}


def pack_event_plain(data: dict[str, Any]) -> bytes:
    """An event body as its compact JSON, not deflated (what :func:`unpack_event` reads as format 0).

    For the rows of a strict replay, written once at its end: deflating its
    events was about a tenth of the replay's CPU (~10 us an event, whatever
    the level or strategy) for rows that repeat what the replayed run holds;
    plain, they are ~2.4x larger and read faster.
    """
    return _event_json(data).encode("utf-8")


def _unsqueeze(text: bytes) -> bytes:
    """Format 2's JSON with its UUIDs and addresses written out again.

    One ``split`` finds every marker with its 16 bytes; the pieces are then
    replaced in the list in place (half the time of a search loop per marker,
    for every event a replay, a listing or the garbage collection reads).
    """
    parts = _MARKED.split(text)
    n = len(parts)
    if n == 1:
        return text
    for i in range(2, n, 3):
        value = parts[i].hex()
        if parts[i - 1] == b"\x02":
            value = f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"
        parts[i - 1] = b""
        parts[i] = value.encode()
    return b"".join(parts)


_raw_decode = json.JSONDecoder().raw_decode


def _loads(text: bytes) -> Any:
    """``json.loads(text)`` for an event's UTF-8 JSON, in half its time: ``json.loads`` given bytes
    first works out their encoding; text that is not exactly one JSON value goes to it (its error)."""
    s = text.decode("utf-8")
    try:
        value, end = _raw_decode(s)
    except ValueError:
        return json.loads(s)
    return value if end == len(s) else json.loads(s)


def unpack_event(blob: bytes | str) -> dict[str, Any]:
    """An event body as :func:`pack_event`, :func:`pack_event_compact` or :func:`pack_event_templated`
    stored it (plain JSON text or bytes, format 1, 2 or 3)."""
    if isinstance(blob, str):
        return json.loads(blob)
    if blob[:1] == b"\x01":
        d = zlib.decompressobj(-10, zdict=EVENT_ZDICT_1)
        return _loads(d.decompress(blob[1:]) + d.flush())
    if blob[:1] == b"\x02":
        d = zlib.decompressobj(-10, zdict=EVENT_ZDICT_1)
        return _loads(_unsqueeze(d.decompress(blob[1:]) + d.flush()))
    if blob[:1] == b"\x03":
        return _unpack_templated(blob)
    return _loads(blob)


#: ``json.dumps(..., sort_keys=True, separators=(",", ":"), default=str)`` without a new encoder per
#: call (two calls per checkpoint: its metadata and its channel addresses)
_META_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
_meta_json = one_shot(_META_JSON)


def dump_meta(meta: dict[str, Any] | list[Any]) -> str:
    """A run's ``meta`` (or a checkpoint's metadata, or a record's header fields) as the JSON text a store keeps."""
    return _meta_json(meta)


def compress_blob(data: bytes) -> bytes:
    """A blob deflated in the zlib format (read back by ``zlib.decompress``), cheaply.

    ``zlib.compress`` sets up a 32 KiB window and 64 KiB of hash table for
    every call, which costs more than deflating a 500-byte message; a window
    just larger than the blob (at least 512 bytes, at most 32 KiB) finds the
    same repeats and is set up in a fraction of the time.
    """
    wbits = min(15, max(9, (len(data) - 1).bit_length()))
    c = zlib.compressobj(1, zlib.DEFLATED, wbits, max(1, wbits - 7))
    return c.compress(data) + c.flush()


#: Preset dictionary for small blobs (encoding ``d1``): graphtape's own value envelopes and the keys
#: of LangChain messages as :func:`graphtape.serde.message_json` writes them. A 60-byte envelope
#: around one address deflates to the address alone. Never edit it: stored blobs depend on it byte
#: for byte. A new dictionary is a new encoding.
BLOB_ZDICT_1 = (
    b'"tool_calls":[{"name":"","args":{},"id":"call_","type":"tool_call"}],"invalid_tool_calls":[],'
    b'"additional_kwargs":{},"name":null,"tool_call_id":"","artifact":null,"status":"success",'
    b'"response_metadata":{"model_name":"","finish_reason":"stop","model_provider":"","system_fingerprint":null,'
    b'"token_usage":{"completion_tokens":,"prompt_tokens":,"total_tokens":},"logprobs":null},'
    b'"usage_metadata":{"input_tokens":,"output_tokens":,"total_tokens":,"input_token_details":{"cache_read":0}},'
    b'{"type":"system","content":"{"type":"tool","content":"{"type":"human","content":"{"type":"ai","content":"'
    b'{"t":"json","v":{"t":"pairs","v":[{"t":"tuple","v":[{"t":"dict","v":{"$m":"{"messages":{"$chain":"'
    b'"}}{"t":"dict","v":{"messages":{"t":"list","v":[{"t":"msg","h":"'
    b'{"t":"list","v":[{"t":"msg","h":"","id":"lc_run--'
)

#: Blobs up to this size are deflated with :data:`BLOB_ZDICT_1` (level 6: a few microseconds
#: at this size); larger ones with :func:`compress_blob`, whose setup the dictionary would not repay.
DICT_BLOB_MAX = 4096


#: :func:`pack_blob`'s ``d1`` deflate streams that have read :data:`BLOB_ZDICT_1` and nothing else, one per
#: window size up to 4 KiB (blobs up to about 3.3 KB): each such blob deflates with a copy, as events do with
#: :data:`_PRIMED_2` (same bytes). Reading the dictionary cost more than the copy: 6.5 -> 5.2 us for a 200-byte
#: blob, 10.6 -> 9.5 at 1.2 KB, 16.8 -> 16.1 at 3 KB; with an 8 KiB window the copy (four 16 KiB buffers) costs
#: what it saves, so the largest ``d1`` blobs set their stream up as before (CPU, old and new interleaved).
_PRIMED_D1 = {
    wbits: zlib.compressobj(6, zlib.DEFLATED, -wbits, wbits - 7, zdict=BLOB_ZDICT_1) for wbits in (10, 11, 12)
}


def pack_blob(data: bytes, *, over: int) -> tuple[str, bytes]:
    """A blob as a SQL store keeps it: ``(enc, stored bytes)``, read back by :func:`unpack_blob`.

    Blobs of ``over`` bytes or fewer, and any blob deflate would not make
    smaller, are kept as they are (``raw``); up to :data:`DICT_BLOB_MAX`
    bytes they are deflated with the preset dictionary (``d1``), above it
    in the zlib format (``z``).
    """
    if len(data) <= over:
        return "raw", data
    if len(data) <= DICT_BLOB_MAX:
        wbits = min(15, max(9, (len(data) + len(BLOB_ZDICT_1) - 1).bit_length()))
        primed = _PRIMED_D1.get(wbits)
        if primed is not None:
            c = primed.copy()
        else:
            c = zlib.compressobj(6, zlib.DEFLATED, -wbits, max(1, wbits - 7), zdict=BLOB_ZDICT_1)
        packed, enc = c.compress(data) + c.flush(), "d1"
    else:
        packed, enc = compress_blob(data), "z"
    return (enc, packed) if len(packed) < len(data) else ("raw", data)


def unpack_blob(enc: str, data: bytes) -> bytes:
    """A stored blob's bytes: ``enc`` is ``raw`` (as written), ``z`` (zlib) or ``d1`` (see :func:`pack_blob`)."""
    if enc == "z":
        return zlib.decompress(data)
    if enc == "d1":
        d = zlib.decompressobj(-15, zdict=BLOB_ZDICT_1)
        return d.decompress(data) + d.flush()
    return bytes(data)
