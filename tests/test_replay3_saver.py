"""The replay saver's in-line submit leaves LangGraph's executor as its own submit and done callback would.

A call that returned is not kept in the executor's ``tasks`` (LangGraph's done callback
takes a successful future out at once); a failed one is kept, with its flags, so the
executor's exit re-raises it (or not, with ``__reraise_on_exit__=False``).
"""

from __future__ import annotations

import pytest
from langgraph.errors import GraphInterrupt
from langgraph.pregel._executor import BackgroundExecutor

from graphtape.replay import saver as replay_saver
from graphtape.replay.saver import ReplaySaver


class _Loop:
    """What LangGraph submits ``put`` on: a bound method of a loop whose checkpointer is the saver."""

    def __init__(self, checkpointer):
        self.checkpointer = checkpointer

    def put(self, value):
        if isinstance(value, BaseException):
            raise value
        return value


@pytest.fixture
def loop(tape):
    saver = ReplaySaver(tape.store)
    assert replay_saver.PATCH.current is not None
    return _Loop(saver)


def test_a_call_that_returned_is_done_and_not_kept(loop):
    with BackgroundExecutor({}) as submit:
        future = submit(loop.put, 7, __reraise_on_exit__=True)
        assert future.done() and future.result() == 7
        executor = submit.__self__
        assert executor.tasks == {}


def test_calls_that_returned_none_share_one_finished_future_that_cannot_change(loop):
    with BackgroundExecutor({}) as submit:
        first, second = submit(loop.put, None), submit(loop.put, None)
        assert first is second is replay_saver._NONE
        assert first.done() and first.result() is None and not first.cancel() and not first.cancelled()
        called = []
        first.add_done_callback(called.append)  # runs at once, is not kept
        assert called == [first] and first._done_callbacks == []
        assert submit.__self__.tasks == {}
    assert replay_saver._NONE.result() is None


def test_a_call_that_failed_is_kept_and_re_raised_on_exit(loop):
    with pytest.raises(RuntimeError, match="disk"):
        with BackgroundExecutor({}) as submit:
            future = submit(loop.put, RuntimeError("disk"))
            assert isinstance(future.exception(), RuntimeError)
            assert list(submit.__self__.tasks.values()) == [(False, True)]


def test_a_failure_not_to_re_raise_is_kept_with_its_flags(loop):
    with BackgroundExecutor({}) as submit:
        future = submit(loop.put, RuntimeError("quiet"), __reraise_on_exit__=False, __cancel_on_exit__=True)
        assert isinstance(future.exception(), RuntimeError)
        assert list(submit.__self__.tasks.values()) == [(True, False)]


def test_an_interrupt_is_not_kept(loop):
    with BackgroundExecutor({}) as submit:
        future = submit(loop.put, GraphInterrupt(()))
        assert isinstance(future.exception(), GraphInterrupt)
        assert submit.__self__.tasks == {}


# -- the replay's own new thread is not read before the replay writes on it ----------------------


def _reads(monkeypatch, store) -> list[str]:
    """The thread of every checkpoint read from ``store`` from now on."""
    seen: list[str] = []
    original = store.get_checkpoint

    def spy(thread_id, *args, **kwargs):
        seen.append(thread_id)
        return original(thread_id, *args, **kwargs)

    monkeypatch.setattr(store, "get_checkpoint", spy)
    return seen


def _review_chain(tape):
    from langgraph.types import Command

    from tests import graphs

    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "hitl"}}
    rec.invoke({}, cfg)
    rec.invoke(Command(resume={i.id: "ok" for i in rec.get_state(cfg).interrupts}), cfg)
    rec.invoke(Command(resume="yes"), cfg)
    return rec


def test_a_strict_replay_reads_no_checkpoint_of_its_new_thread_before_writing_one(tape, monkeypatch):
    from tests import graphs

    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    rec.invoke({"topic": "cats"})
    seen = _reads(monkeypatch, tape.store)
    with graphs.forbid():
        result = tape.replay(rec.last_run_id, graphs.build_linear())
    assert result.status == "finished" and result.output_matches
    assert seen == []
    # what it wrote reads back through the same saver
    assert rec.get_state({"configurable": {"thread_id": result.thread_id}}).values == result.output


def test_the_runs_after_the_first_of_a_chain_read_the_checkpoints_it_wrote(tape, monkeypatch):
    from tests import graphs

    rec = _review_chain(tape)
    seen = _reads(monkeypatch, tape.store)
    with graphs.forbid():
        result = tape.replay(rec.last_run_id, graphs.build_review())
    assert result.status == "finished" and result.output_matches and len(result.run_ids) == 3
    assert result.thread_id in seen  # the resumed runs read where the run before stopped


def test_a_thread_the_caller_names_is_read(tape, monkeypatch):
    from graphtape.replay import engine
    from tests import graphs

    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    rec.invoke({"topic": "cats"})
    seen = _reads(monkeypatch, tape.store)
    with graphs.forbid():
        result = engine.replay(tape, rec.last_run_id, graphs.build_linear(), thread_id="mine")
    assert result.status == "finished" and result.thread_id == "mine"
    assert seen[:1] == ["mine"]


def test_the_fresh_thread_is_read_once_written(tape):
    saver = ReplaySaver(tape.store, fresh_thread="new")
    cfg = {"configurable": {"thread_id": "new", "checkpoint_ns": ""}}
    assert saver.get_tuple(cfg) is None
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    saver.put(cfg, checkpoint, {"source": "input", "step": -1}, {})
    assert saver._fresh == set()
    got = saver.get_tuple(cfg)
    assert got is not None and got.checkpoint["id"] == checkpoint["id"]
