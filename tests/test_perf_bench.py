"""``benchmarks/run.py`` keeps its guard: ``--check`` exits 1 on a missed target and the docs table is written
by the command (figures are not checked here, only that the machinery runs and says what it found)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run as bench  # noqa: E402


def test_check_and_write_docs_run(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text(
        "# Benchmarks\n\nkept before\n\n" + bench.DOCS_BEGIN + "\nold table\n" + bench.DOCS_END + "\n\nkept after\n"
    )
    env = {**os.environ, "COLUMNS": "160"}
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/run.py",
            "--quick",
            "--only",
            "2,4",
            "--reps",
            "1",
            "--check",
            "--write-docs",
            str(docs),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    text = docs.read_text()
    assert "old table" not in text and "kept before" in text and "kept after" in text
    table = text.split(bench.DOCS_BEGIN)[1].split(bench.DOCS_END)[0]
    assert "| 2. strict replay vs live unrecorded |" in table and "| 4. agent run: recording overhead |" in table
    # the A/A control sits beside the overhead it is read against, as a difference in ms, never judged
    control = next(line for line in table.splitlines() if line.startswith("| 4. (A/A) agent run"))
    assert control.endswith("| - | context |") and " ms (" in control
    failed = "| FAIL |" in table
    # --check's exit status is the table's verdict
    assert done.returncode == (1 if failed else 0)
    assert ("missed targets:" in done.stdout) is failed


def test_verdicts() -> None:
    row = {"ratio": 1.2, "target": 1.1, "delta": 0.5, "unit": "ms/run"}
    assert bench.verdict(row) == "FAIL"
    assert bench.verdict({**row, "target": 1.3}) == "PASS"
    assert bench.verdict({**row, "target": None}) == "context"
    assert bench.verdict({**row, "target": None, "target_delta": 2.0}) == "PASS"
    assert bench.verdict({**row, "target": None, "target_delta": 0.1}) == "FAIL"
    combined = bench.combine([[{**row, "ratio": 1.0}], [row]])
    assert combined[0]["run_ratios"] == [1.0, 1.2] and combined[0]["verdict"] == "FAIL"
    # one run that missed is a miss, even if the last one met the target
    combined = bench.combine([[row], [{**row, "ratio": 1.0}]])
    assert combined[0]["run_ratios"] == [1.2, 1.0] and combined[0]["verdict"] == "FAIL"
    combined = bench.combine([[{**row, "ratio": 1.05}], [{**row, "ratio": 1.0}]])
    assert combined[0]["verdict"] == "PASS"


def test_a_control_row_is_read_as_a_difference() -> None:
    row = {"ratio": 1.01, "target": None, "delta": -0.4, "unit": "ms/run", "delta_first": True}
    assert bench.shows_delta(row) and bench.verdict(row) == "context"
    assert not bench.shows_delta({"ratio": 1.0, "target": 1.1, "delta": 0.1})
    combined = bench.combine([[{**row, "delta": 0.3}], [row]])
    assert combined[0]["run_deltas"] == [0.3, -0.4] and combined[0]["verdict"] == "context"
