"""A strict replay of unchanged code does not import the state diff (``graphtape.debug``).

Every task of such a replay writes what the recorded task wrote, stored at the
same address, so the state check accepts it without a diff. Importing
``graphtape.debug`` for the diff cost a process's first strict replay ~40-90 ms
(the CLI's ``graphtape replay``, a test that replays once). It is imported
when a task's writes differ, and the divergence is reported as before
(``tests/test_strict_state.py``); checked here in a fresh interpreter, since
the test process has imported it already.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

_SCRIPT = textwrap.dedent(
    """
    import sys
    from datetime import datetime
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    import graphtape

    class S(TypedDict):
        n: int
        stamp: str

    STAMP = {"value": "recorded"}

    def step(state):
        return {"n": state["n"] + 1, "stamp": STAMP["value"]}

    builder = StateGraph(S)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    graph = builder.compile()

    tape = graphtape.connect(sys.argv[1])
    recorded = tape.record(graph, name="lazy")
    recorded.invoke({"n": 0, "stamp": ""}, {"configurable": {"thread_id": "t"}})
    run_id = recorded.last_run_id

    same = tape.replay(run_id, graph, mode="strict")
    print("same", same.status, same.output_matches, "graphtape.debug" in sys.modules)

    STAMP["value"] = datetime(2026, 1, 1).isoformat()  # the node now writes something else
    changed = tape.replay(run_id, graph, mode="strict")
    print("changed", changed.status, (changed.divergence or {}).get("kind"), "graphtape.debug" in sys.modules)
    tape.close()
    """
)


def test_unchanged_strict_replay_skips_the_diff_import_and_a_changed_one_still_diverges(tmp_path: Path) -> None:
    script = tmp_path / "lazy.py"
    script.write_text(_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), f"sqlite:///{tmp_path}/t.db"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert "same finished True False" in lines, out.stdout
    assert "changed diverged state True" in lines, out.stdout
