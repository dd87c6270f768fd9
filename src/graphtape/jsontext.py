"""JSON text from an encoder's options without building a C encoder per value.

``json.dumps`` with options, and ``JSONEncoder.encode``, build a new C
encoder (and a closure) for every value they encode: about half the time of
encoding a small value, and graphtape encodes several per call and per step
(events, checkpoint metadata, stored payloads, canonical requests). The
encoder built here once has the same options, so the text is the same.
"""

from __future__ import annotations

import array
import itertools
import json
import re
from collections.abc import Callable
from typing import Any


def one_shot(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` with its C encoder built once.

    The C encoder is built without the cycle check's markers: a value that
    contains itself (never one graphtape writes) makes it recurse, and is then
    handed to ``encoder.encode``, which reports the cycle as ``json.dumps``
    does. Without the C accelerator, with ``indent``, or where the private
    constructor takes other arguments: ``encoder.encode`` itself.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None or encoder.indent is not None:
        return encoder.encode
    quote = json.encoder.encode_basestring_ascii if encoder.ensure_ascii else json.encoder.encode_basestring
    try:
        fast = make(
            None,
            encoder.default,
            quote,
            None,
            encoder.key_separator,
            encoder.item_separator,
            encoder.sort_keys,
            encoder.skipkeys,
            encoder.allow_nan,
        )
    except TypeError:  # another Python's private signature: the public path
        return encoder.encode
    join = "".join

    def encode(value: Any) -> str:
        try:
            return join(fast(value, 0))
        except RecursionError:
            return encoder.encode(value)

    return encode


_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
#: ``[`` and ``{`` become +1, ``]`` and ``}`` -1 (as signed bytes); every other byte is dropped
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[{]}")


def json_depth(text: bytes | str) -> int:
    """How deep the arrays and objects of JSON ``text`` nest (0 for a scalar), from its bytes alone.

    Brackets inside strings are not counted (escapes handled), and the text need not be valid:
    an unclosed ``[[[[`` counts as deep as it goes. Done with C-speed passes (regular
    expressions, ``bytes.translate``, ``accumulate``), so a body of megabytes is checked before
    any parser recurses into it."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if b"[" not in data and b"{" not in data:
        return 0
    data = _STRING.sub(b"", _ESCAPE.sub(b"", data))  # an escaped quote never ends a string
    steps = array.array("b", data.translate(_STEPS, _NOT_BRACKETS))
    return max(0, max(itertools.accumulate(steps), default=0))
