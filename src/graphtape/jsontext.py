"""JSON text from an encoder's options without building a C encoder per value.

``json.dumps`` with options, and ``JSONEncoder.encode``, build a new C
encoder (and a closure) for every value they encode: about half the time of
encoding a small value, and graphtape encodes several per call and per step
(events, checkpoint metadata, stored payloads, canonical requests). The
encoder built here once has the same options, so the text is the same.
"""

from __future__ import annotations

import json
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
