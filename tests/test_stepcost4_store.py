"""The store's JSON is the same text when its encoders are built once instead of per value.

``pack_event_compact`` (every event a run writes) and ``dump_meta`` (a checkpoint's
metadata and channel addresses, run metadata) used ``JSONEncoder.encode``, which builds a
new C encoder for each value. ``graphtape.jsontext.one_shot`` builds it once: these tests compare its
text with ``JSONEncoder.encode`` (and so ``json.dumps``) on the values a store writes and on
the odd ones (non-ASCII text, NaN, objects only ``default`` turns into text, a value that
contains itself), from several threads at once.
"""

from __future__ import annotations

import json
import math
import threading
import uuid
from decimal import Decimal
from typing import Any

import pytest

from graphtape.jsontext import one_shot
from graphtape.store import codec
from tests.test_stepcost_events import _events


class _Named:
    def __str__(self) -> str:
        return "named-thing"


def _values() -> list[Any]:
    # the events a run writes (tests/test_stepcost_events.py's), a checkpoint's metadata, then odd values
    out: list[Any] = list(_events())
    for i in range(30):
        out.append({"source": "loop", "step": i, "parents": {}, "graphtape_run_id": str(uuid.UUID(int=i))})
    out += [
        {"b": 1, "a": [True, None, 1.5e300, -0.0, 10**30], "c": {"z": "é", "y": '\u2028\x00"\\'}},
        {"nan": math.nan, "inf": math.inf, "neg": -math.inf},
        {"nested": [[[[{"k": ["v"]}]]]], "": "empty key", "Ünï": "cödé"},
        "a bare string",
        12,
        [1, "two", 3.0],
        {},
        [],
    ]
    return out


def test_event_json_is_the_encoders_text() -> None:
    for value in _values():
        assert codec._event_json(value) == codec._EVENT_JSON.encode(value), value
        assert codec._event_json(value) == json.dumps(value, separators=(",", ":"), sort_keys=True)


def test_meta_json_is_the_encoders_text_with_default_str() -> None:
    odd = {"when": Decimal("1.10"), "who": _Named(), "set": frozenset(), "ok": [1, {"x": _Named()}]}
    for value in [*_values(), odd]:
        assert codec.dump_meta(value) == codec._META_JSON.encode(value), value
        assert codec.dump_meta(value) == json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def test_a_value_containing_itself_is_reported_as_json_does() -> None:
    loop: dict[str, Any] = {"a": 1}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular reference"):
        codec._event_json(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        codec.dump_meta(loop)
    # and the encoder is still good afterwards
    assert codec.dump_meta({"b": 2, "a": 1}) == '{"a":1,"b":2}'


def test_events_are_the_same_bytes_as_through_the_encoder() -> None:
    """What is stored does not change: format 2 bodies through the shared encoder and through encode()."""
    for value in _values():
        if not isinstance(value, dict):
            continue
        raw = codec._EVENT_JSON.encode(value).encode("utf-8")
        c = codec._PRIMED_2.copy()
        packed = b"\x02" + c.compress(codec._squeeze(raw)) + c.flush()
        expected = packed if len(packed) < len(raw) else raw
        assert codec.pack_event_compact(value) == expected
        assert codec.unpack_event(expected) == json.loads(raw)


def test_the_shared_encoders_from_threads() -> None:
    values = _values()
    expected = [codec._EVENT_JSON.encode(v) for v in values]
    metas = [codec._META_JSON.encode(v) for v in values]
    failures: list[str] = []

    def work() -> None:
        for _ in range(200):
            for v, e, m in zip(values, expected, metas):
                if codec._event_json(v) != e or codec.dump_meta(v) != m:
                    failures.append(repr(v))
                    return

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_without_the_c_encoder_the_public_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    encoder = json.JSONEncoder(separators=(",", ":"), sort_keys=True)
    encode = one_shot(encoder)
    assert encode == encoder.encode
    assert encode({"b": [1], "a": "x"}) == '{"a":"x","b":[1]}'
