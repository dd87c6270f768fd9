"""Golden tapes: committed recordings that the current code must (or must not) reproduce.

Like Temporal's replayer tests, these catch a change to the test graphs or to
graphtape's matching that silently makes old tapes unreplayable. Re-record
them deliberately with ``python -m tests.tapes.make_golden``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import graphs
from tests.graphs import forbid

TAPES = Path(__file__).parent / "tapes"

REPLAYABLE = {
    "linear.jsonl": graphs.build_linear,
    "fanout.jsonl": graphs.build_fanout,
    "agent.jsonl": graphs.build_agent,
    "functional.jsonl": graphs.build_functional,
    "review_thread.jsonl": graphs.build_review,
}


@pytest.mark.parametrize("name", sorted(REPLAYABLE))
def test_golden_tape_replays_strictly(name, graphtape_replay):
    with forbid():
        results = graphtape_replay(TAPES / name, REPLAYABLE[name]())
    for result in results:
        assert result.status == "finished"
        assert result.live == 0 and result.unused == 0
        assert result.output_matches is True


def test_golden_tape_with_old_prompt_must_diverge(graphtape_tape):
    run_ids = graphtape_tape.import_file(TAPES / "linear_old_prompt.must_diverge.jsonl")
    with forbid():
        result = graphtape_tape.replay(run_ids[0], graphs.build_linear())
    assert result.status == "diverged"
    assert result.divergence["node"] == "write"
    assert "-[human] Write a sonnet about cats" in result.divergence["diff"]
    assert "+[human] Write about cats" in result.divergence["diff"]


def test_golden_tapes_re_export_byte_identical(graphtape_tape, tmp_path):
    for path in sorted(TAPES.glob("*.jsonl")):
        run_ids = graphtape_tape.import_file(path)
        runs = [graphtape_tape.run(r) for r in run_ids]
        out = tmp_path / path.name
        if len(runs) == 1:
            graphtape_tape.export_run(runs[0].run_id, out)
        else:
            graphtape_tape.export_thread(runs[0].thread_id, out)
        assert out.read_bytes() == path.read_bytes(), path.name
