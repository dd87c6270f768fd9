"""Crash recovery with real SIGKILLs: nothing completed is repeated, no effect runs twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import graphtape

ROOT = Path(__file__).resolve().parents[1]


def worker(url: str, ledger: Path, thread: str, crash: str = "", mode: str = "run") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    args = [sys.executable, "-m", "tests.crash_worker", url, str(ledger), thread, crash]
    if mode == "recover":
        args.append("recover")
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def final_state(url: str, thread: str) -> dict:
    from tests import crash_worker

    tape = graphtape.connect(url)
    try:
        rec = tape.record(crash_worker.graph, checkpointer=tape.saver)
        return rec.get_state({"configurable": {"thread_id": thread}}).values
    finally:
        tape.close()


def ledger_counts(path: Path) -> tuple[Counter, Counter]:
    llm, effects = Counter(), Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e["kind"] == "llm":
                llm[e["prompt"]] += 1
            else:
                effects[(e["name"], e["key"])] += 1
    return llm, effects


@pytest.fixture
def reference(new_store_url, tmp_path):
    url = new_store_url()
    ledger = tmp_path / "reference.ledger"
    done = worker(url, ledger, "reference")
    assert done.returncode == 0, done.stderr
    return final_state(url, "reference"), ledger_counts(ledger)


@pytest.mark.parametrize("crash", ["after-draft-llm", "after-charge", "after-check-llm", "in-charge", "before-notify"])
def test_recovery_after_sigkill_repeats_nothing(crash, store_url, tmp_path, reference):
    ref_state, (ref_llm, ref_effects) = reference
    ledger = tmp_path / "crash.ledger"
    crashed = worker(store_url, ledger, "t-crash", crash)
    assert crashed.returncode == -9, (crashed.returncode, crashed.stderr)

    tape = graphtape.connect(store_url)
    try:
        # the dead process's lease expires; then its run is an orphan
        time.sleep(0.7)
        orphans = tape.orphaned_runs()
        assert [r.thread_id for r in orphans] == ["t-crash"]
    finally:
        tape.close()

    recovered = worker(store_url, ledger, "t-crash", mode="recover")
    assert recovered.returncode == 0, recovered.stderr
    (result,) = json.loads(recovered.stdout)
    assert result["status"] == "finished", result

    assert final_state(store_url, "t-crash") == ref_state
    llm, effects = ledger_counts(ledger)
    assert effects == ref_effects  # every effect exactly once, none repeated
    assert llm == ref_llm  # no completed model call sent twice

    tape = graphtape.connect(store_url)
    try:
        crashed_run = tape.run(result["crashed_run_id"])
        assert crashed_run.status == "crashed" and crashed_run.meta["recovered_by"] == result["run_id"]
        # its row counts what it did before the crash (its session never wrote the counts)
        made = len(tape.store.events(crashed_run.run_id, ["llm_call", "tool_call", "effect_call"]))
        assert crashed_run.llm_calls >= 1  # every crash point comes after the draft's model call
        assert crashed_run.llm_calls + crashed_run.tool_calls + crashed_run.effect_calls == made
        new_run = tape.run(result["run_id"])
        assert new_run.mode == "recover" and new_run.meta["recovers"] == crashed_run.run_id
        assert tape.orphaned_runs() == []
    finally:
        tape.close()


def test_nothing_to_recover(tape):
    assert tape.recover(lambda run: None) == []


@pytest.mark.parametrize("seed", [3, 7, 11])
def test_sigkill_at_a_random_moment(seed, store_url, tmp_path, reference):
    """A few of the random trials ``benchmarks/faults.py`` runs a hundred of."""
    ref_state, (_ref_llm, ref_effects) = reference
    ledger = tmp_path / "random.ledger"
    first = worker(store_url, ledger, "t-rand", f"random:{seed}")
    tape = graphtape.connect(store_url)
    try:
        started = bool(tape.runs(thread_id="t-rand"))
        recorded = {
            tape.request(c)["messages"][-1]["content"]
            for r in tape.runs(thread_id="t-rand")
            for c in tape.calls(r.run_id)
            if c.kind == "llm"
        }
    finally:
        tape.close()
    if first.returncode == -9 and started:
        time.sleep(0.7)
        assert worker(store_url, ledger, "t-rand", mode="recover").returncode == 0
    elif first.returncode == -9:
        assert worker(store_url, ledger, "t-rand").returncode == 0  # killed before it began: start afresh
    else:
        assert first.returncode == 0, first.stderr
    assert final_state(store_url, "t-rand") == ref_state
    llm, effects = ledger_counts(ledger)
    assert effects == ref_effects
    assert all(llm[p] == 1 for p in recorded)  # nothing that was on the tape was sent again
