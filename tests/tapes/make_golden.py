"""Re-record the golden tapes beside the replay tests.

Run from the repository root: ``python -m tests.tapes.make_golden``. Only
needed when the tape format or the test graphs change on purpose; the
tapes are committed and replayed by ``tests/test_golden.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from langchain_core.messages import HumanMessage
from langgraph.types import Command
from tests import graphs

import graphtape

HERE = Path(__file__).parent


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tape = graphtape.connect(f"sqlite:///{tmp}/golden.db")
        for name, build, value in [
            ("linear", graphs.build_linear, {"topic": ""}),
            ("fanout", graphs.build_fanout, {"questions": []}),
            ("agent", graphs.build_agent, {"messages": [HumanMessage("find cats")]}),
            ("functional", graphs.build_functional, "cats"),
        ]:
            rec = tape.record(build(), name=name)
            rec.invoke(value, {"configurable": {"thread_id": f"golden-{name}"}})
            tape.export_run(rec.last_run_id, HERE / f"{name}.jsonl")

        rec = tape.record(graphs.build_review(), name="review")
        cfg = {"configurable": {"thread_id": "golden-review"}}
        rec.invoke({}, cfg)
        rec.invoke(Command(resume={i.id: f"ok {i.value['question']}" for i in rec.get_state(cfg).interrupts}), cfg)
        rec.invoke(Command(resume="yes"), cfg)
        tape.export_thread("golden-review", HERE / "review_thread.jsonl")

        # Recorded with an older prompt: the current code must diverge from it.
        old = graphs.PROMPTS["write"]
        graphs.PROMPTS["write"] = "Write a sonnet about"
        try:
            rec = tape.record(graphs.build_linear(), name="linear")
            rec.invoke({"topic": ""}, {"configurable": {"thread_id": "golden-old-prompt"}})
            tape.export_run(rec.last_run_id, HERE / "linear_old_prompt.must_diverge.jsonl")
        finally:
            graphs.PROMPTS["write"] = old
        tape.close()


if __name__ == "__main__":
    main()
