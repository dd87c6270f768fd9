"""``new_run_id``: replays, forks, overrides and invalidations take the id of their new run up front.

The tape API answers 202 with the new run's id before the run starts; these
check the library half of that promise on every backend: the run that replays
the target gets exactly that id, in a thread named after it, sync and async.
A replay of a thread with several runs (an interrupt answered) gives the id to
the run that replays the target, the last one.
"""

from __future__ import annotations

import asyncio
import uuid

from langgraph.types import Command

from tests import graphs
from tests.studio_graphs import build_doc


def _record_linear(tape):
    rec = tape.record(graphs.build_linear())
    rec.invoke({"topic": "cats"})
    return rec.last_run_id


def _checkpoint(tape, run_id: str, step: int) -> str:
    rows = tape.events(run_id, ["checkpoint"])
    return next(e.data["checkpoint_id"] for e in rows if e.data["step"] == step and not e.data["ns"])


def test_each_action_takes_its_new_run_id(tape):
    run_id = _record_linear(tape)
    graph = graphs.build_linear()
    chosen = [str(uuid.uuid4()) for _ in range(4)]
    results = [
        tape.replay(run_id, graph, new_run_id=chosen[0]),
        tape.fork(_checkpoint(tape, run_id, 1), graph, mode="strict", new_run_id=chosen[1]),
        tape.override(run_id, tape.calls(run_id)[0].call_id, 0.5, graph, from_start=True, new_run_id=chosen[2]),
        tape.invalidate_from(run_id, "rate", graph, allow_live_effects=True, new_run_id=chosen[3]),
    ]
    for result, new_id in zip(results, chosen, strict=True):
        assert result.run_id == new_id, result.error
        run = tape.run(new_id)
        assert run.replay_of == run_id and run.thread_id == f"replay-{new_id}"
    assert tape.run(chosen[1]).meta["fork_of"] == _checkpoint(tape, run_id, 1)


def test_async_forms_and_a_chain_of_runs(tape):
    rec = tape.record(build_doc(), checkpointer=tape.saver)
    config = {"configurable": {"thread_id": "doc-1"}}
    rec.invoke({"topic": "tides"}, config)
    rec.invoke(Command(resume="approve"), config)
    last = rec.last_run_id
    new_id = str(uuid.uuid4())
    result = asyncio.run(tape.areplay(last, build_doc(), new_run_id=new_id))
    assert result.status == "finished" and len(result.run_ids) == 2 and result.run_ids[-1] == new_id
    assert tape.run(new_id).replay_of == last and tape.run(result.run_ids[0]).thread_id == f"replay-{new_id}"
    other = str(uuid.uuid4())
    result = asyncio.run(tape.ainvalidate_from(last, "draft", build_doc(), new_run_id=other))
    assert result.run_id == other
