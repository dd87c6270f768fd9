"""The benchmarks stay runnable: each runs in its smallest mode (figures are not checked here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "args",
    [
        ["benchmarks/run.py", "--quick", "--only", "2,3", "--turns", "10"],
        ["benchmarks/history.py", "--checkpoints", "200", "--reps", "2"],
        ["benchmarks/faults.py", "--trials", "1", "--backends", "sqlite"],
        ["benchmarks/server.py", "--quick", "--viewers", "5"],
        ["benchmarks/server_queue.py", "--quick"],
        ["benchmarks/scale.py", "--sizes", "30,120", "--reps", "2", "--cache", "{tmp}"],
        ["benchmarks/profile_recording.py", "--ablations-only", "--reps", "1"],
        ["benchmarks/profile_recording.py", "--in-situ-only", "--reps", "1"],
    ],
)
def test_benchmark_runs(args, tmp_path):
    env = {**os.environ, "COLUMNS": "160"}
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip()
    # profile_recording.py patches graphtape's internals by name: one renamed would switch nothing off
    assert "ablation incomplete" not in done.stdout, done.stdout[-2000:]


def _langgraph_suite_missing() -> str | None:
    """Why benchmarks/langgraph_suite.py cannot run offline here (None: it can)."""
    import importlib.metadata
    import importlib.util

    version = importlib.metadata.version("langgraph")
    cache = Path(
        os.environ.get("GRAPHTAPE_LANGGRAPH_SUITE_CACHE") or Path.home() / ".cache" / "graphtape" / "langgraph-suite"
    )
    if not (cache / f"langgraph-{version}" / "tests" / "conftest.py").is_file():
        return f"LangGraph {version}'s tests are not in {cache} (fetch them once: make langgraph-suite)"
    for module in ("syrupy", "pytest_mock", "Crypto", "langgraph.checkpoint.postgres"):
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            found = None
        if found is None:
            return f"{module} is not installed: pip install -e '.[conformance]'"
    return None


@pytest.mark.skipif(_langgraph_suite_missing() is not None, reason=str(_langgraph_suite_missing()))
def test_langgraph_suite_runs(tmp_path):
    """The conformance harness on one small test of LangGraph's, both modes, from the cache (no network)."""
    report = tmp_path / "report.json"
    args = ["benchmarks/langgraph_suite.py", "--no-download", "--backend", "sqlite", "--files", "interruption"]
    args += ["-k", "test_interruption_without_state_updates", "--report", str(report)]
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    data = json.loads(report.read_text())
    # the sync and the async test, three durability modes each, with the in-memory saver and graphtape's
    assert data["saver"]["sqlite"]["tests"] == 6, data["saver"]
    assert "saver on sqlite: " in done.stdout and "replayed: " in done.stdout
    recorded = data["recorded"]
    assert recorded["compared"] == 6 and recorded["runs"] >= 6, recorded
    assert all(run["signature"] for run in recorded["non_exact"])
