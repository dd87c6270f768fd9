"""Ctrl-C during ``graphtape run`` or ``graphtape replay``: the run is left ``interrupted``, not failed.

The CLI runs in a real subprocess that is sent SIGINT while a node waits for
a gate file; it must say which run it left and how to continue it, and
``graphtape recover`` must then finish the run, serving the call it had
completed. ``recover --dry-run`` also lists runs whose lease is still held.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import graphtape
from graphtape.cli import main
from graphtape.runtime.lease import ThreadLease
from graphtape.store.base import RunRecord, WriteBatch

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")

ROOT = Path(__file__).resolve().parents[1]

SLOW = """
import os
import time
from pathlib import Path
from typing import TypedDict

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

from graphtape.testing import SeededChatModel

model = SeededChatModel(seed=5)


class State(TypedDict, total=False):
    topic: str
    first: str
    second: str


def first(state):
    return {"first": model.invoke([HumanMessage("first about " + state["topic"])]).content}


def wait(state):
    Path(os.environ["GT_READY"]).write_text("waiting")
    while not Path(os.environ["GT_GATE"]).exists():
        time.sleep(0.02)
    return {"second": model.invoke([HumanMessage("second about " + state["topic"])]).content}


b = StateGraph(State)
b.add_node(first)
b.add_node(wait)
b.add_edge(START, "first")
b.add_edge("first", "wait")
b.add_edge("wait", END)
graph = b.compile()
"""


@pytest.fixture
def slow(tmp_path, monkeypatch):
    path = tmp_path / "slow_agent.py"
    path.write_text(SLOW, encoding="utf-8")
    monkeypatch.setenv("GT_READY", str(tmp_path / "ready"))
    monkeypatch.setenv("GT_GATE", str(tmp_path / "gate"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    return path


def cli_process(store_url: str, cwd: Path, *args: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "COLUMNS": "200",
        "NO_COLOR": "1",
    }
    env.pop("GRAPHTAPE_URL", None)
    return subprocess.Popen(
        [sys.executable, "-c", "from graphtape.cli import main; main()", "--url", store_url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        text=True,
    )


def ctrl_c_when_waiting(proc: subprocess.Popen, ready: Path) -> tuple[int, str, str]:
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the graph never reached the waiting node"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the CLI did not stop within 60 s of SIGINT; it printed:\n{out}\n{err}")
    return proc.returncode, out, err


def cli(capsys, store_url: str, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["--url", store_url, *argv])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_ctrl_c_during_run_leaves_it_interrupted_and_recover_finishes_it(store_url, slow, tmp_path, capsys):
    graphtape.connect(store_url).close()
    proc = cli_process(
        store_url, tmp_path, "run", f"{slow}:graph", "--input", '{"topic": "cats"}', "--thread", "t-ctrl-c"
    )
    code, _, err = ctrl_c_when_waiting(proc, tmp_path / "ready")
    assert code == 130
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: stopped by Ctrl-C: run ") and "is left interrupted" in lines[0]
    with graphtape.connect(store_url) as tape:
        (run,) = tape.runs(thread_id="t-ctrl-c")
        assert run.status == "interrupted" and run.meta["stopped_by"] == "KeyboardInterrupt"
        assert run.error and "recover" in run.error
        assert run.llm_calls == 1  # the call of `first`, completed before Ctrl-C
    assert f"graphtape recover --run {run.run_id} --graph {slow}:graph" in lines[0]

    # nothing waits for an answer: --resume says to recover instead
    code, _, err = cli(capsys, store_url, "run", f"{slow}:graph", "--thread", "t-ctrl-c", "--resume", '"x"')
    assert code == 2 and "not paused at an interrupt()" in err and f"recover --run {run.run_id}" in err

    (tmp_path / "gate").write_text("open")
    code, out, _ = cli(capsys, store_url, "recover", "--dry-run")
    assert code == 0 and run.run_id[:8] in out
    code, out, err = cli(capsys, store_url, "recover", "--run", run.run_id, "--graph", f"{slow}:graph", "--json")
    assert code == 0, err
    (rec,) = json.loads(out)
    assert rec["crashed_run_id"] == run.run_id and rec["status"] == "finished"
    # continued from the checkpoint after `first`: only `wait` runs (its call live), `first` is not run again
    assert (rec["served"], rec["live"]) == (0, 1)
    with graphtape.connect(store_url) as tape:
        assert tape.run(run.run_id).meta["recovered_by"] == rec["run_id"]
        assert tape.orphaned_runs() == []  # finished: nothing left to recover
        recovered = tape.run(rec["run_id"])
        assert recovered.status == "finished" and recovered.thread_id == "t-ctrl-c" and recovered.llm_calls == 1


def test_ctrl_c_during_replay_leaves_the_replay_interrupted(store_url, slow, tmp_path, capsys):
    (tmp_path / "gate").write_text("open")
    with graphtape.connect(store_url) as tape:
        from graphtape.loading import load_graph

        agent = tape.record(load_graph(f"{slow}:graph"))
        agent.invoke({"topic": "dogs"}, {"configurable": {"thread_id": "t-replay"}})
        original = agent.last_run_id
    (tmp_path / "gate").unlink()
    (tmp_path / "ready").unlink()
    proc = cli_process(store_url, tmp_path, "replay", original, "--graph", f"{slow}:graph")
    code, _, err = ctrl_c_when_waiting(proc, tmp_path / "ready")
    assert code == 130
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "stopped by Ctrl-C: run " in lines[0] and "run the replay again" in lines[0]
    with graphtape.connect(store_url) as tape:
        replays = [r for r in tape.runs() if r.replay_of == original]
        assert [r.status for r in replays] == ["interrupted"]
        assert replays[0].meta["stopped_by"] == "KeyboardInterrupt" and replays[0].run_id in lines[0]
        assert tape.orphaned_runs() == []  # a replay is finished by replaying again, not by recover


def test_recover_dry_run_mentions_runs_whose_lease_is_held(tape, store_url, capsys):
    tape.store.write(
        WriteBatch(
            new_runs=[RunRecord(run_id="held-run-1", thread_id="busy-thread", graph="g", started_at=time.time())]
        )
    )
    lease = ThreadLease(tape.store, "busy-thread", ttl=60)
    lease.acquire()
    try:
        code, out, _ = cli(capsys, store_url, "recover", "--dry-run")
        assert code == 0
        text = " ".join(out.split())
        assert "1 run(s) marked running whose thread's lease is still held" in text and "held-run" in text
        assert "no orphaned runs" in text
        code, out, _ = cli(capsys, store_url, "recover", "--dry-run", "--json")
        (row,) = json.loads(out)
        assert row["run_id"] == "held-run-1" and row["lease_held"] and 0 < row["lease_expires_in"] <= 60
    finally:
        lease.release()
