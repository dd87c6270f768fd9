"""Fault injection: SIGKILL a recording worker at random moments, recover, check nothing repeated.

    python benchmarks/faults.py [--trials 100] [--backends sqlite,postgresql,redis]

Each trial runs ``tests/crash_worker.py`` (plan -> work: LLM, charge (an effect
with an idempotency key), LLM -> finish: notify (effect), LLM) on a fresh store
with a timer that kills it at a random moment of the run (uniform over 1.2x the
length of an uncrashed run of the same worker, measured first on each backend:
a fixed window ended before the run began on a loaded machine), then waits for its lease
to expire and runs ``graphtape.Tape.recover``. A trial passes when:

* the thread's final state equals an uncrashed reference run's;
* every effect ran exactly once (the worker's fsynced ledger);
* no model call that was on the tape when the process died was sent again
  (a call still in flight at the kill may be re-sent: it never completed);
* no checkpoint of the crashed run is lost (its checkpoint events are all in
  the store's checkpoints).

Prints one line per backend and exits 1 if any trial failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import graphtape  # noqa: E402

POSTGRES = os.environ.get("GRAPHTAPE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("GRAPHTAPE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def store_url(backend: str, tmp: Path) -> str:
    name = f"gt_fault_{uuid.uuid4().hex[:10]}"
    if backend == "sqlite":
        return f"sqlite:///{tmp}/{name}.db"
    if backend == "postgresql":
        return f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}schema={name}"
    return f"{REDIS}{'&' if '?' in REDIS else '?'}prefix={name}:"


def drop(backend: str, url: str) -> None:
    if backend == "postgresql":
        import psycopg

        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    elif backend == "redis":
        import redis

        prefix = url.rsplit("prefix=", 1)[1]
        client = redis.Redis.from_url(REDIS)
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)


#: seconds over which a trial's kill moment is drawn (set per backend from its reference run)
KILL_WINDOW = 0.12


def worker(url: str, ledger: Path, thread: str, crash: str = "", recover: bool = False) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "GT_KILL_WINDOW": str(KILL_WINDOW),
    }
    args = [sys.executable, "-m", "tests.crash_worker", url, str(ledger), thread, crash]
    if recover:
        args.append("recover")
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def ledger(path: Path) -> tuple[Counter, Counter]:
    llm, effects = Counter(), Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            e = json.loads(line)
            (llm if e["kind"] == "llm" else effects)[e.get("prompt") or (e["name"], e["key"])] += 1
    return llm, effects


def final_state(url: str, thread: str) -> dict:
    from tests import crash_worker

    tape = graphtape.connect(url)
    try:
        return (
            tape.record(crash_worker.graph, checkpointer=tape.saver)
            .get_state({"configurable": {"thread_id": thread}})
            .values
        )
    finally:
        tape.close()


def _any_run(url: str) -> bool:
    tape = graphtape.connect(url)
    try:
        return bool(tape.runs(limit=1))
    finally:
        tape.close()


def trial(backend: str, tmp: Path, seed: int, reference: dict, ref_effects: Counter) -> tuple[bool, str, str]:
    """(passed, why not, what happened: finished | killed-before-start | killed-mid-run)."""
    url = store_url(backend, tmp)
    path = tmp / f"ledger-{backend}-{seed}"
    try:
        first = worker(url, path, "t", f"random:{seed}")
        killed = first.returncode == -9
        tape = graphtape.connect(url)
        recorded_prompts: Counter = Counter()
        checkpoints_before: set[str] = set()
        try:
            for run in tape.runs(limit=None):
                for call in tape.calls(run.run_id):
                    if call.kind == "llm":
                        recorded_prompts[tape.request(call)["messages"][-1]["content"]] += 1
                checkpoints_before |= {e.data["checkpoint_id"] for e in tape.events(run.run_id, ["checkpoint"])}
        finally:
            tape.close()
        started = bool(checkpoints_before or recorded_prompts) or _any_run(url)
        what = "finished" if not killed else ("killed-mid-run" if started else "killed-before-start")
        if killed and not started:
            # killed before the run reached the store: nothing to recover, the job starts afresh
            again = worker(url, path, "t")
            if again.returncode != 0:
                return False, f"fresh start failed: {again.stderr.strip()[-300:]}", what
        elif killed:
            time.sleep(0.7)  # the dead worker's lease (ttl 0.5 s) expires
            rec = worker(url, path, "t", recover=True)
            if rec.returncode != 0:
                return False, f"recovery failed: {rec.stderr.strip()[-300:]}", what
            results = json.loads(rec.stdout)
            if any(r["status"] != "finished" for r in results):
                return False, f"recovered run not finished: {results}", what
        elif first.returncode != 0:
            return False, f"worker failed: {first.stderr.strip()[-300:]}", what
        state = final_state(url, "t")
        if state != reference:
            return False, f"final state differs: {state} != {reference}", what
        llm, effects = ledger(path)
        if effects != ref_effects:
            return False, f"effects ran {dict(effects)}, expected {dict(ref_effects)}", what
        repeated = [p for p in recorded_prompts if llm[p] > 1]
        if repeated:
            return False, f"completed model calls sent again: {repeated}", what
        tape = graphtape.connect(url)
        try:
            stored = {c.checkpoint_id for c in tape.store.list_checkpoints(thread_id="t")}
        finally:
            tape.close()
        if not checkpoints_before <= stored:
            return False, f"lost checkpoints: {sorted(checkpoints_before - stored)[:3]}", what
        return True, "", what
    finally:
        drop(backend, url)


def main() -> int:
    global KILL_WINDOW
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--backends", default="sqlite,postgresql,redis")
    args = parser.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for backend in args.backends.split(","):
            ref_url = store_url(backend, tmp)
            ref_ledger = tmp / f"reference-{backend}"
            done = worker(ref_url, ref_ledger, "t")
            if done.returncode != 0:
                print(f"{backend}: reference run failed: {done.stderr.strip()[-300:]}")
                return 1
            run_seconds = [
                float(line.split(":")[1]) for line in done.stderr.splitlines() if line.startswith("run seconds:")
            ]
            KILL_WINDOW = 1.2 * run_seconds[-1] if run_seconds else 0.12
            reference = final_state(ref_url, "t")
            _, ref_effects = ledger(ref_ledger)
            drop(backend, ref_url)
            t0 = time.perf_counter()
            passed = 0
            outcomes: Counter = Counter()
            problems: list[str] = []
            for seed in range(args.trials):
                ok, why, what = trial(backend, tmp, seed, reference, ref_effects)
                outcomes[what] += 1
                if ok:
                    passed += 1
                else:
                    problems.append(f"seed {seed}: {why}")
            failed += args.trials - passed
            print(
                f"{backend}: {passed}/{args.trials} trials passed "
                f"({outcomes['killed-mid-run']} killed mid-run, {outcomes['killed-before-start']} before the run "
                f"started, {outcomes['finished']} finished first; kill window {KILL_WINDOW * 1000:.0f} ms) "
                f"in {time.perf_counter() - t0:.1f} s"
            )
            for p in problems[:10]:
                print(f"  {p}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
