"""The README's main-job command: ``make demo`` (``python -m examples.demo``).

With ``--no-serve`` it records the examples and replays them, then exits (the
scripts' form, ``make demo-record``). Without it, it records them only when
the store has no runs, then serves them with ``graphtape dev`` until Ctrl-C:
the printed address answers with the examples' graphs and recorded threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import graphtape
from tests.live_server import free_port, interrupt

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = {"doc_pipeline", "refund_agent", "research_assistant"}


def test_no_serve_records_the_examples_and_replays_them(tmp_path, monkeypatch):
    from examples import demo

    url = f"sqlite:///{tmp_path / 'demo.db'}"
    monkeypatch.setenv("GRAPHTAPE_URL", url)
    assert demo.main(["--no-serve"]) == 0
    with graphtape.connect(url) as tape:
        recorded = [r for r in tape.runs(limit=None) if r.replay_of is None]
        assert {r.graph for r in recorded} == GRAPHS
        assert all(r.status == "finished" for r in recorded if r.graph != "research_assistant")
        replays = [r for r in tape.runs(limit=None) if r.replay_of is not None]
        assert replays  # the strict replay and the flight re-runs are recorded too
    assert not (tmp_path / ".graphtape").exists()  # the store named by GRAPHTAPE_URL, nothing else


def _serve_demo(url: str, port: int) -> tuple[list[str], dict[str, list[dict]]]:
    """Start the demo, wait for the Studio's address, read what it serves, stop it with Ctrl-C."""
    pytest.importorskip("fastapi")
    import httpx

    env = {**os.environ, "GRAPHTAPE_URL": url, "COLUMNS": "200", "NO_COLOR": "1", "DISPLAY": ""}
    env.pop("WAYLAND_DISPLAY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "examples.demo", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while not any(line.startswith("graphtape Studio API on") for line in lines):
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "".join(lines) + (proc.stderr.read() if proc.stderr else "")
            assert time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        base = f"http://127.0.0.1:{port}"
        while True:
            try:
                answers = {
                    "assistants": httpx.post(f"{base}/assistants/search", json={}, timeout=10).json(),
                    "threads": httpx.post(f"{base}/threads/search", json={"limit": 100}, timeout=10).json(),
                }
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the Studio did not answer"
                time.sleep(0.05)
    finally:
        interrupt(proc)
    return lines, answers


def test_demo_records_an_empty_store_then_serves_it_and_only_serves_the_next_time(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    port = free_port()
    lines, answers = _serve_demo(url, port)
    text = "".join(lines)
    assert "Recorded runs" in text and "strict replay" in text
    assert f"open http://127.0.0.1:{port}" in text
    assert {a["graph_id"] for a in answers["assistants"]} == GRAPHS
    with graphtape.connect(url) as tape:
        runs = tape.runs(limit=None)
        threads = {r.thread_id for r in runs}
    assert threads <= {t["thread_id"] for t in answers["threads"]}

    # the store has runs now: the demo serves them without recording again
    lines, answers = _serve_demo(url, port)
    text = "".join(lines)
    assert "Recorded runs" not in text and "recorded runs already" in text
    with graphtape.connect(url) as tape:
        assert len(tape.runs(limit=None)) == len(runs)
    assert {a["graph_id"] for a in answers["assistants"]} == GRAPHS
