"""pytest plugin (registered through the ``pytest11`` entry point).

Fixtures:

* ``graphtape_tape``: a tape in a temporary SQLite file, closed and removed
  after the test, for tests that record and replay without touching
  ``.graphtape/``.
* ``graphtape_replay``: a function ``(tape_file, graph, mode="strict")`` that
  imports a committed tape (``tests/tapes/*.jsonl``) into a temporary store,
  replays each of its runs against ``graph`` and fails the test with the
  divergence report if the current code no longer reproduces it.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def graphtape_tape(tmp_path):
    import graphtape

    tape = graphtape.connect(f"sqlite:///{tmp_path / 'graphtape-test.db'}")
    yield tape
    tape.close()


@pytest.fixture
def graphtape_replay(graphtape_tape):
    def replay_file(tape_file: str | Path, graph, *, mode: str = "strict"):
        run_ids = graphtape_tape.import_file(tape_file)
        runs = [graphtape_tape.run(r) for r in run_ids]
        # replay the last run of each thread: that replays the whole chain
        last = {}
        for run in sorted(runs, key=lambda r: r.started_at):
            last[run.thread_id] = run
        results = []
        for run in last.values():
            result = graphtape_tape.replay(run.run_id, graph, mode=mode)
            if result.divergence is not None:
                pytest.fail(f"{result.error}\n{result.divergence.get('diff', '')}", pytrace=False)
            if result.status == "failed":
                pytest.fail(f"replay of {run.run_id} failed: {result.error}", pytrace=False)
            results.append(result)
        return results

    return replay_file
