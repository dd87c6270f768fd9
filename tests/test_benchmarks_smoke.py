"""The benchmarks stay runnable: each runs in its smallest mode (figures are not checked here)."""

from __future__ import annotations

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
        ["benchmarks/profile_recording.py", "--ablations-only", "--reps", "1"],
        ["benchmarks/profile_recording.py", "--in-situ-only", "--reps", "1"],
    ],
)
def test_benchmark_runs(args, tmp_path):
    env = {**os.environ, "COLUMNS": "160"}
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip()
    # profile_recording.py patches graphtape's internals by name: one renamed would switch nothing off
    assert "ablation incomplete" not in done.stdout, done.stdout[-2000:]
