"""The PostgreSQL store's value encoding, without a server: the fast column path agrees with ``encode``."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("psycopg")

from graphtape.store.codec import dump_meta
from graphtape.store.postgres_schema import MARK, as_columns, encode, encode_column, jsonb_text

ODD = ["", "plain", "a\x00b", "\x00", MARK + "lead", "mid" + MARK, MARK, "é", None, 0, 7, 1.5, b"\x00bytes"]


@pytest.mark.parametrize("seed", range(200))
def test_encode_column_is_encode_value_by_value(seed):
    rng = random.Random(seed)
    column = [rng.choice(ODD) for _ in range(rng.randrange(0, 6))]
    assert encode_column(column) == [encode(v) for v in column]
    assert encode_column(tuple(column)) == [encode(v) for v in column]


def test_as_columns_transposes_and_encodes():
    rows = [("a", 1, b"x"), ("b\x00", 2, b"y")]
    assert as_columns(rows) == [["a", encode("b\x00")], [1, 2], [b"x", b"y"]]
    assert as_columns([]) == []


@pytest.mark.parametrize("meta", [{"a": 1}, {"n": "x\x00y"}, {}])
def test_jsonb_text_reuses_the_callers_text(meta):
    assert jsonb_text(meta, dump_meta(meta)) == jsonb_text(meta)
    assert "\\u0000" not in jsonb_text(meta)
