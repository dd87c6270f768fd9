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
    assert replay_saver._PATCH is not None
    return _Loop(saver)


def test_a_call_that_returned_is_done_and_not_kept(loop):
    with BackgroundExecutor({}) as submit:
        future = submit(loop.put, 7, __reraise_on_exit__=True)
        assert future.done() and future.result() == 7
        executor = submit.__self__
        assert executor.tasks == {}


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
