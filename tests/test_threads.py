"""One writer per thread: a second writer waits or gets ThreadBusy; dead owners expire."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import graphtape
from graphtape.runtime.lease import lease_name
from tests import race_worker

ROOT = Path(__file__).resolve().parents[1]


def spawn(url: str, thread: str, name: str, wait: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.race_worker", url, thread, name, str(wait)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def valid_chain(tape, thread: str) -> list[str]:
    """The thread's checkpoints form one parent chain; returns the final log."""
    rec = tape.record(race_worker.graph, checkpointer=tape.saver)
    history = list(rec.get_state_history({"configurable": {"thread_id": thread}}))
    ids = {h.config["configurable"]["checkpoint_id"] for h in history}
    roots = [h for h in history if h.parent_config is None]
    assert len(roots) == 1
    for h in history:
        if h.parent_config is not None:
            assert h.parent_config["configurable"]["checkpoint_id"] in ids
    steps = [h.metadata["step"] for h in reversed(history)]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    return history[0].values["log"]


def test_second_process_waits_and_nothing_is_lost(tape, store_url):
    procs = [spawn(store_url, "shared", name, wait=30) for name in ("a", "b")]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [o[0].strip() for o in outs] == ["done", "done"], outs
    log = valid_chain(tape, "shared")
    # both runs' writes are there, one after the other, none interleaved or lost
    assert sorted(x for x in log if x.startswith("start-")) == ["start-a", "start-b"]
    first = log.index("start-a") if log.index("start-a") < log.index("start-b") else log.index("start-b")
    assert log[first + 1 : first + 5] == ["s0", "s1", "s2", "s3"]
    assert len(log) == 10
    runs = tape.runs(thread_id="shared")
    assert sorted(r.status for r in runs) == ["finished", "finished"]


def test_fail_fast_with_thread_busy(tape):
    gate = threading.Event()
    started = threading.Event()

    from langgraph.graph import END, START, StateGraph

    def slow(s):
        started.set()
        gate.wait(10)
        return {"log": ["slow"]}

    b = StateGraph(race_worker.State)
    b.add_node("slow", slow)
    b.add_edge(START, "slow")
    b.add_edge("slow", END)
    graph = b.compile()
    first = tape.record(graph, checkpointer=tape.saver)
    t = threading.Thread(target=first.invoke, args=({"log": []}, {"configurable": {"thread_id": "busy"}}))
    t.start()
    try:
        assert started.wait(10)
        second = tape.record(graph, checkpointer=tape.saver)
        t0 = time.monotonic()
        with pytest.raises(graphtape.ThreadBusy, match="thread busy is being run by another process"):
            second.invoke({"log": []}, {"configurable": {"thread_id": "busy"}})
        assert time.monotonic() - t0 < 2
        assert len(tape.runs(thread_id="busy")) == 1  # the refused run wrote nothing
    finally:
        gate.set()
        t.join()
    assert tape.run(first.last_run_id).status == "finished"


def test_a_dead_owner_frees_the_thread_after_its_ttl(tape):
    assert tape.store.acquire_lease(lease_name("orphan"), "dead-process", ttl=0.3) is not None
    rec = tape.record(race_worker.graph, wait=5, checkpointer=tape.saver)
    t0 = time.monotonic()
    rec.invoke({"log": []}, {"configurable": {"thread_id": "orphan"}})
    assert 0.1 < time.monotonic() - t0 < 5
    assert tape.run(rec.last_run_id).status == "finished"
