"""A recorded run that ended is indexed once per store: a later replay of it reads none of its events.

A replay reads each recorded run's events, its calls' responses and messages,
and its input and config (``engine._recorded_runs``). A run that ended never
changes, so that index is kept (per store, a bounded number of runs) and the
next replay of the same run reads nothing of it again; it must do and report
exactly what the first one did. A run still ``running`` is read every time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from langgraph.types import Command

from graphtape.replay import engine
from tests import graphs


def _reads(monkeypatch: Any, store: Any) -> list[str]:
    """The run ids ``store.events`` is asked for, from now on."""
    seen: list[str] = []
    original = store.events

    def events(run_id: str, kinds: Any = None) -> Any:
        seen.append(run_id)
        return original(run_id, kinds)

    monkeypatch.setattr(store, "events", events)
    return seen


def _report(tape: Any, result: Any) -> dict[str, Any]:
    """What a replay reports, and its runs' rows as read back (ids and times left out)."""
    d = result.to_dict()
    for key in ("run_id", "run_ids", "thread_id"):
        d.pop(key)
    d["rows"] = [
        [
            (e.kind, {k: v for k, v in e.data.items() if k in ("fingerprint", "response", "source", "writes")})
            for e in tape.store.events(rid)
        ]
        for rid in result.run_ids
    ]
    d["runs"] = [
        (r.status, r.mode, r.llm_calls, r.tool_calls, r.served_calls, r.live_calls, r.tokens)
        for r in (tape.run(rid) for rid in result.run_ids)
    ]
    return d


def test_a_second_replay_of_a_run_reads_none_of_its_events_and_reports_the_same(tape, monkeypatch):
    rec = tape.record(graphs.build_linear(), name="linear")
    rec.invoke({"topic": "cats"})
    run_id = rec.last_run_id
    engine._KEPT.pop(tape.store, None)
    seen = _reads(monkeypatch, tape.store)
    with graphs.forbid():
        first = tape.replay(run_id, graphs.build_linear())
    assert seen.count(run_id) == 1
    with graphs.forbid():
        second = tape.replay(run_id, graphs.build_linear())
    assert seen.count(run_id) == 1  # kept: not read again
    assert first.status == "finished" and first.output_matches and first.served > 0
    assert _report(tape, first) == _report(tape, second)


def test_a_kept_chain_of_runs_replays_the_same(tape):
    graph = graphs.build_review()
    rec = tape.record(graph, name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "kept-hitl"}}
    rec.invoke({}, cfg)
    answers = {i.id: f"ok-{i.value['question']}" for i in rec.get_state(cfg).interrupts}
    rec.invoke(Command(resume=answers), cfg)
    rec.invoke(Command(resume="yes"), cfg)
    last = rec.last_run_id
    with graphs.forbid():
        first = tape.replay(last, graphs.build_review())
        second = tape.replay(last, graphs.build_review())
    assert first.status == "finished" and len(first.run_ids) == 3 and first.output_matches
    assert _report(tape, first) == _report(tape, second)


def test_a_run_still_running_is_read_again(tape):
    rec = tape.record(graphs.build_linear(), name="linear")
    rec.invoke({"topic": "cats"})
    run = tape.run(rec.last_run_id)
    engine._KEPT.pop(tape.store, None)
    engine._recorded_runs(tape, [dataclasses.replace(run, status="running")])
    assert run.run_id not in engine._KEPT.get(tape.store, {})
    indexed = engine._recorded_runs(tape, [run])[run.run_id]
    assert engine._KEPT[tape.store][run.run_id][0] is indexed
    assert engine._recorded_runs(tape, [run])[run.run_id] is indexed


def _three_runs(tape: Any) -> list[Any]:
    """Three recorded runs of the linear graph (their rows), none of them kept yet."""
    rec = tape.record(graphs.build_linear(), name="linear")
    runs = []
    for _ in range(3):
        rec.invoke({"topic": "cats"})
        runs.append(tape.run(rec.last_run_id))
    engine._KEPT.pop(tape.store, None)
    return runs


def test_the_kept_runs_are_bounded_per_store(tape, monkeypatch):
    monkeypatch.setattr(engine, "_KEPT_MAX", 2)
    runs = _three_runs(tape)
    for run in runs:
        engine._recorded_runs(tape, [run])
    assert list(engine._KEPT[tape.store]) == [r.run_id for r in runs[1:]]


def test_the_kept_runs_are_bounded_in_bytes_per_store(tape, monkeypatch):
    runs = _three_runs(tape)
    sizes = [engine._recorded_runs(tape, [run])[run.run_id].size for run in runs]
    assert min(sizes) > 300
    engine._KEPT.pop(tape.store, None)
    monkeypatch.setattr(engine, "_KEPT_BYTES", sizes[1] + sizes[2])  # the last two runs, not all three
    for run in runs:
        engine._recorded_runs(tape, [run])
    assert list(engine._KEPT[tape.store]) == [r.run_id for r in runs[1:]]
    size = sizes[0]
    monkeypatch.setattr(engine, "_KEPT_BYTES", size - 1)  # a run larger than the whole budget is not kept
    engine._KEPT.pop(tape.store, None)
    engine._recorded_runs(tape, [runs[0]])
    assert runs[0].run_id not in engine._KEPT[tape.store]


def test_a_kept_run_whose_row_reads_otherwise_is_read_again(tape, monkeypatch):
    """A run deleted and imported again under its id (another tape's content) is not served from the index."""
    rec = tape.record(graphs.build_linear(), name="linear")
    rec.invoke({"topic": "cats"})
    run = tape.run(rec.last_run_id)
    engine._KEPT.pop(tape.store, None)
    seen = _reads(monkeypatch, tape.store)
    engine._recorded_runs(tape, [run])
    engine._recorded_runs(tape, [run])
    assert seen.count(run.run_id) == 1
    engine._recorded_runs(tape, [dataclasses.replace(run, ended_at=(run.ended_at or 0.0) + 1.0)])
    assert seen.count(run.run_id) == 2
