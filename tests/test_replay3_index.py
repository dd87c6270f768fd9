"""How a strict replay indexes the tape: recorded calls read from their stored bodies, responses parsed once.

``RecordedCall.from_event`` reads a call event's stored keys directly (no event
dataclass built first); it must give what reading it through the typed event
(``graphtape.events.parse``) gives. A chat response parsed while the tape is indexed
(for its message addresses) is handed to the first serve only: a value decoded from
it may share parts of it, so a second serve of the same call parses again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from graphtape import events
from graphtape.calls import CALL_KINDS, RecordedCall
from graphtape.replay.matcher import Matcher
from graphtape.store.base import EventRow
from tests import graphs


def _through_event(row: EventRow) -> RecordedCall:
    """The recorded call as read through the typed event (how it was read before)."""
    ev = events.parse(row)
    assert isinstance(ev, events.CallEvent)
    return RecordedCall(
        call_id=ev.call_id,
        run_id=row.run_id,
        seq=row.seq,
        kind=ev.CALL_KIND,
        node=(ev.extra or {}).get("node", ""),
        node_path=ev.node_path if ev.node_path is not None else "",
        branch=ev.branch if ev.branch is not None else "",
        step=ev.step,
        ordinal=ev.ordinal if ev.ordinal is not None else 0,
        fingerprint=ev.fingerprint,
        request_ref=ev.request,
        messages_ref=ev.messages,
        response_ref=ev.response,
        error=ev.error,
        tokens=int(ev.tokens or 0),
        cost=float(ev.cost or 0.0),
        latency=float(ev.latency or 0.0),
        name=ev.title,
        code=ev.code,
    )


def _fields(call: RecordedCall) -> dict[str, Any]:
    return {f.name: getattr(call, f.name) for f in dataclasses.fields(call) if f.compare}


def test_recorded_calls_read_from_stored_rows_are_the_typed_events_calls(tape):
    recorded = tape.record(graphs.build_linear(), name="linear")
    recorded.invoke({"topic": "cats"})
    rows = tape.store.events(recorded.last_run_id, list(CALL_KINDS))
    assert {r.kind for r in rows} == {"llm_call", "tool_call", "effect_call"}
    for row in rows:
        assert _fields(RecordedCall.from_event(row)) == _fields(_through_event(row))


BASE = {"call_id": "c1", "fingerprint": "f" * 32, "request": "a" * 32}


@pytest.mark.parametrize(
    "kind, data",
    [
        ("llm_call", {**BASE, "model": "m1", "tokens": 12, "cost": 0.25, "latency": 1.5, "messages": "b" * 32}),
        ("tool_call", {**BASE, "name": "search", "model": "ignored", "code": "x", "step": 3, "ordinal": 2}),
        ("effect_call", {**BASE, "error": {"type": "ValueError", "message": "no"}, "branch": "__pregel_push,1"}),
        ("tool_call", {**BASE, "node": "old", "node_path": None, "branch": None, "ordinal": None}),  # an older tape
        ("llm_call", {**BASE, "node_path": "sub/inner", "tokens": None, "cost": None, "response": "c" * 32}),
        ("tool_call", {**BASE, "future_key": [1, 2]}),  # a key a later graphtape writes
    ],
)
def test_recorded_call_fields_match_the_typed_event_for_odd_bodies(kind, data):
    row = EventRow(run_id="r", seq=7, kind=kind, ts=0.0, data=data)
    assert _fields(RecordedCall.from_event(row)) == _fields(_through_event(row))


@pytest.mark.parametrize(
    "kind, data",
    [
        ("llm_call", {"fingerprint": "f", "request": "a"}),  # no call id
        ("tool_call", {"call_id": "c", "request": "a"}),  # no fingerprint
        ("effect_call", {"call_id": "c", "fingerprint": "f"}),  # no request
        ("task_finished", BASE),  # not a call
        ("no_such_kind", BASE),
    ],
)
def test_an_incomplete_or_other_row_is_not_a_recorded_call(kind, data):
    with pytest.raises(ValueError, match="not a complete recorded call"):
        RecordedCall.from_event(EventRow(run_id="r", seq=1, kind=kind, ts=0.0, data=data))


def test_a_chat_response_parsed_while_indexing_is_served_once_then_parsed_again(tape):
    recorded = tape.record(graphs.build_linear(), name="linear")
    recorded.invoke({"topic": "cats"})
    rows = tape.store.events(recorded.last_run_id, list(CALL_KINDS))
    matcher = Matcher.from_events(tape.store, rows)
    (llm,) = [c for c in matcher.calls if c.kind == "llm" and c.messages_ref is not None][:1]
    parsed = llm.parsed_env
    assert parsed is not None and parsed == tape.store.get_json(llm.response_ref)
    first = llm.response_env(tape.store)
    assert first is parsed and llm.parsed_env is None
    second = llm.response_env(tape.store)
    assert second == first and second is not first
    # a tool's response is not parsed while indexing: each serve parses its own
    tool = next(c for c in matcher.calls if c.kind == "tool")
    assert tool.parsed_env is None
    assert tool.response_env(tape.store) is not tool.response_env(tape.store)


def test_a_served_answer_changed_by_the_node_does_not_reach_a_second_serve(tape):
    recorded = tape.record(graphs.build_linear(), name="linear")
    recorded.invoke({"topic": "cats"})
    rows = tape.store.events(recorded.last_run_id, list(CALL_KINDS))
    matcher = Matcher.from_events(tape.store, rows)
    for call in matcher.calls:
        env = call.response_env(tape.store)
        env["changed"] = True
        assert "changed" not in call.response_env(tape.store)


def _blob_reads(monkeypatch, store) -> list[list[str]]:
    seen: list[list[str]] = []
    original = store.get_blobs

    def spy(hashes):
        hashes = list(hashes)
        seen.append(hashes)
        return original(hashes)

    monkeypatch.setattr(store, "get_blobs", spy)
    return seen


def test_a_strict_replay_reads_the_recorded_input_with_the_responses(tape, monkeypatch):
    from graphtape.replay import engine

    rec = tape.record(graphs.build_linear(), name="linear")
    rec.invoke({"topic": "cats"})
    run = tape.run(rec.last_run_id)
    rows = tape.store.events(run.run_id, list(engine._RECORDED_KINDS))
    refs = engine._input_refs(rows)
    assert len(refs) == 2  # the input and the config
    seen = _blob_reads(monkeypatch, tape.store)
    with graphs.forbid():
        result = tape.replay(run.run_id, graphs.build_linear())
    assert result.status == "finished" and result.output_matches
    # the first read holds the responses and the input and config; the input is read nowhere else
    assert set(refs) <= set(seen[0])
    assert not any(refs[0] in hashes for hashes in seen[1:])


def test_the_recorded_input_is_the_same_read_along_in_part_or_not_at_all(tape):
    from graphtape.replay import engine

    rec = tape.record(graphs.build_linear(), name="linear")
    rec.invoke({"topic": "cats"})
    run = tape.run(rec.last_run_id)
    rows = tape.store.events(run.run_id, list(engine._RECORDED_KINDS))
    refs = engine._input_refs(rows)
    everything = tape.store.get_blobs(refs)
    plain = engine._recorded_input(tape, run, None, rows)
    for read in (everything, {refs[0]: everything[refs[0]]}, {refs[1]: everything[refs[1]]}, {}, None):
        value, config, started = engine._recorded_input(tape, run, None, rows, read)
        assert (value, config, started) == plain
    assert engine._input_refs([]) == []


def _tasks_through_events(rows_by_run):
    """StateCheck's recorded tasks as read through the typed events (how they were read before)."""
    from collections import defaultdict

    from graphtape.replay.statecheck import TASK_KINDS

    tasks = defaultdict(list)
    for rid, rows in rows_by_run.items():
        started = {}
        for row in rows:
            if row.kind not in TASK_KINDS:
                continue
            ev = events.parse(row)
            ns = ev.task or ""
            if isinstance(ev, events.TaskStarted):
                started[ns] = (ev.node_path or "", ev.step)
            elif ns in started:
                tasks[started[ns]].append((rid, ev.writes))
    return dict(tasks)


@pytest.mark.parametrize(
    "build, inp",
    [
        (graphs.build_linear, {"topic": "cats"}),
        (graphs.build_fanout, {"topic": "cats"}),
        (graphs.build_subgraph_node, {"question": "why"}),
    ],
)
def test_the_state_check_reads_the_tasks_the_typed_events_give(tape, build, inp):
    from graphtape.replay.statecheck import StateCheck

    rec = tape.record(build(), name="g")
    rec.invoke(inp)
    rid = rec.last_run_id
    rows = {rid: tape.store.events(rid)}
    check = StateCheck.from_events(tape, rows)
    assert check is not None
    got = {key: [(t.run_id, t.writes_ref) for t in group] for key, group in check.tasks.items()}
    assert got == _tasks_through_events(rows)
    assert sum(len(g) for g in got.values()) >= 3


def test_task_rows_odd_and_foreign_are_read_as_the_typed_events_read_them(tape):
    from graphtape.replay.statecheck import StateCheck

    def row(seq, kind, data):
        return EventRow(run_id="r", seq=seq, kind=kind, ts=0.0, data=data)

    rows = {
        "r": [
            row(1, "task_started", {"node_path": "a", "step": 1, "task": "a:1"}),
            row(2, "task_started", {"node_path": None, "step": None, "task": None}),  # root, nothing named
            row(3, "llm_call", {"task": "a:1", "writes": "zz"}),  # not a task event
            row(4, "task_finished", {"task": "a:1", "writes": "w1"}),
            row(5, "task_finished", {"task": None, "writes": "w2", "future": 1}),
            row(6, "task_finished", {"task": "b:9", "writes": "w3"}),  # never started: skipped
        ]
    }
    check = StateCheck.from_events(tape, rows)
    assert check is not None
    got = {key: [(t.run_id, t.writes_ref) for t in group] for key, group in check.tasks.items()}
    assert got == _tasks_through_events(rows) == {("a", 1): [("r", "w1")], ("", None): [("r", "w2")]}
