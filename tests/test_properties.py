"""Property tests (hypothesis): serialization and storage round trips."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import graphtape
from graphtape import serde
from graphtape.store.base import EventRow, RunRecord, WriteBatch
from graphtape.store.codec import EVENT_TEMPLATES_3

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
exotic = (
    st.datetimes()
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.binary(max_size=20)
    | st.tuples(st.integers(), st.text())
)
messages = st.builds(
    lambda content, ident, kind, calls: (
        HumanMessage(content=content, id=ident)
        if kind == 0
        else AIMessage(
            content=content,
            id=ident,
            tool_calls=[{"name": f"t{i}", "args": {"x": i}, "id": f"c{i}"} for i in range(calls)],
            usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        )
        if kind == 1
        else ToolMessage(content=content, tool_call_id=ident or "x", name="t")
    ),
    st.text(max_size=40),
    st.none() | st.text(min_size=1, max_size=10),
    st.integers(0, 2),
    st.integers(0, 2),
)
values = st.recursive(
    json_values | exotic | messages,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


@given(values)
@settings(max_examples=300, deadline=None)
def test_encode_decode_round_trip(value):
    env = serde.encode_value(value)
    again = serde.decode_value(serde.json_round_trip(env))
    assert again == value
    # encoding is canonical: encoding the decoded value gives the same bytes
    assert serde.canonical_bytes(serde.encode_value(again)) == serde.canonical_bytes(env)


@given(json_values)
def test_canonical_json_is_order_independent(value):
    if isinstance(value, dict):
        reversed_value = dict(reversed(list(value.items())))
        assert serde.canonical_json(value) == serde.canonical_json(reversed_value)


run_records = st.builds(
    RunRecord,
    run_id=st.uuids().map(str),
    thread_id=st.text(min_size=1, max_size=12),
    graph=st.text(min_size=1, max_size=12),
    status=st.sampled_from(["running", "finished", "failed", "interrupted", "diverged"]),
    started_at=st.floats(0, 2e9),
    ended_at=st.none() | st.floats(0, 2e9),
    parent_run_id=st.none() | st.uuids().map(str),
    replay_of=st.none() | st.uuids().map(str),
    mode=st.sampled_from(["record", "strict", "flight"]),
    llm_calls=st.integers(0, 1000),
    tokens=st.integers(0, 10**9),
    error=st.none() | st.text(max_size=30),
    meta=st.dictionaries(st.text(max_size=6), json_scalars, max_size=3),
)


#: values as the hot events hold them (ids and addresses, which formats 2 and 3 store as 16 bytes)
id_like = (
    st.uuids().map(str)
    | st.uuids().map(lambda u: u.hex)
    | st.tuples(st.text(max_size=5), st.uuids()).map(lambda t: f"{t[0]}:{t[1]}")
)
#: an event body: any JSON under one key, or a body with a format-3 template's keys (any values)
event_bodies = json_values.map(lambda v: {"d": v}) | st.sampled_from(EVENT_TEMPLATES_3).flatmap(
    lambda keys: st.tuples(*[json_values | id_like] * len(keys)).map(lambda vs: dict(zip(keys, vs)))
)


@given(
    run=run_records,
    events=st.lists(st.tuples(st.text(min_size=1, max_size=10), event_bodies), max_size=6),
    blobs=st.lists(st.binary(max_size=3000), max_size=5),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_store_round_trip(new_store_url, run, events, blobs):
    tape = graphtape.connect(new_store_url())
    try:
        batch = WriteBatch(new_runs=[run])
        for seq, (kind, data) in enumerate(events):
            batch.events.append(EventRow(run.run_id, seq, kind, 1.5 + seq, data))
        for b in blobs:
            batch.blobs[serde.digest(b)] = b
        parent = None
        for b in blobs:
            cid = serde.digest(f"{parent or ''}/{serde.digest(b)}")
            batch.chains[cid] = (parent, serde.digest(b))
            parent = cid
        tape.store.write(batch)
        tape.store.write(WriteBatch(blobs=dict(batch.blobs), chains=dict(batch.chains)))  # idempotent
        assert tape.store.get_run(run.run_id) == run
        got = tape.store.events(run.run_id)
        assert [(e.seq, e.kind, e.data) for e in got] == [(e.seq, e.kind, e.data) for e in batch.events]
        assert tape.store.get_blobs(batch.blobs) == batch.blobs
        assert tape.store.get_chain(parent) == [serde.digest(b) for b in blobs]
    finally:
        tape.close()


def test_exotic_values_survive(tape):
    value = {"when": dt.datetime(2026, 1, 2, 3, 4, 5), "id": uuid.uuid4(), "n": decimal.Decimal("1.10")}
    assert serde.decode_value(serde.json_round_trip(serde.encode_value(value))) == value
