"""The graphtape tour: record three agents, replay one strictly, re-run one after a prompt edit.

Run it with ``make demo`` (or ``python -m examples.demo`` in the project's
environment). It uses the embedded default store (``.graphtape/tape.db``
in the working directory, or ``$GRAPHTAPE_URL``) and the offline seeded
models, so it needs no network and no API key; set ``GRAPHTAPE_MODEL`` to
use a real provider instead.
"""

from __future__ import annotations

import sys

from langgraph.types import Command
from rich.console import Console
from rich.table import Table

import graphtape
from examples import doc_pipeline, refund_agent, research_assistant

console = Console()


def record_examples(tape: graphtape.Tape) -> dict[str, str]:
    """Record one run of each example; returns the last run id of each."""
    runs: dict[str, str] = {}
    with console.status("recording the refund agent"):
        rec = tape.record(refund_agent.build_graph(), name="refund_agent")
        rec.invoke(refund_agent.EXAMPLE_INPUT)
        runs["refund_agent"] = rec.last_run_id

    with console.status("recording the research assistant (pauses for a human review)"):
        rec = tape.record(research_assistant.build_graph(), name="research_assistant")
        cfg = {"configurable": {"thread_id": f"research-{graphtape.serde.digest(str(id(rec)))[:8]}"}}
        rec.invoke(research_assistant.EXAMPLE_INPUT, cfg)
        console.print(
            f"  research assistant paused at an interrupt: run [bold]{rec.last_run_id[:8]}[/]"
            f" status {tape.run(rec.last_run_id).status}; answering {research_assistant.EXAMPLE_RESUME!r}"
        )
        rec.invoke(Command(resume=research_assistant.EXAMPLE_RESUME), cfg)
        runs["research_assistant"] = rec.last_run_id

    with console.status("recording the document pipeline"):
        rec = tape.record(doc_pipeline.build_graph(), name="doc_pipeline")
        rec.invoke(doc_pipeline.EXAMPLE_INPUT)
        runs["doc_pipeline"] = rec.last_run_id

    table = Table(title="Recorded runs")
    for col in ("example", "run", "status", "llm", "tool", "effect", "tokens", "seconds"):
        table.add_column(col)
    for name, run_id in runs.items():
        r = tape.run(run_id)
        table.add_row(
            name,
            run_id[:8],
            r.status,
            str(r.llm_calls),
            str(r.tool_calls),
            str(r.effect_calls),
            str(r.tokens),
            f"{r.duration or 0:.2f}",
        )
    console.print(table)
    return runs


def main() -> int:
    tape = graphtape.connect()
    console.print(f"[bold]graphtape demo[/] — store: {tape.url}\n")
    runs = record_examples(tape)

    # 1. Strict replay: the same code, every call served from the tape.
    console.rule("strict replay of the research assistant (the whole thread, human answer included)")
    result = tape.replay(runs["research_assistant"], research_assistant.build_graph(), mode="strict")
    console.print(
        f"status {result.status}; calls served {result.served}, live {result.live}; "
        f"final state identical to the recording: {result.output_matches}; "
        f"model time not spent: {result.time_saved:.2f}s"
    )
    if result.live or result.divergence:
        console.print(f"[red]unexpected: {result.error}[/]")
        return 1

    # 2. Flight-recorder re-run after a prompt edit: only what changed goes live.
    console.rule("flight re-run of the refund agent after editing the 'finalize' prompt")
    edited = refund_agent.build_graph(
        prompts={
            "finalize": "Write a short, warm reply to the customer. Apologise for the broken blender. Facts follow."
        }
    )
    strict = tape.replay(runs["refund_agent"], edited, mode="strict")
    console.print(f"strict replay of the edited code: [yellow]{strict.status}[/]")
    if strict.divergence:
        console.print(strict.divergence["diff"], markup=False, highlight=False)
    flight = tape.replay(runs["refund_agent"], edited, mode="flight")
    console.print(
        f"flight: status {flight.status}; calls served from tape {flight.served}, sent live {flight.live}; "
        f"tokens saved {flight.tokens_saved} (${flight.cost_saved:.4f}), live tokens {flight.live_tokens}; "
        f"model time saved {flight.time_saved:.2f}s"
    )

    # 3. Effects are never re-run silently.
    console.rule("flight re-run of the document pipeline after editing the 'translate' prompt")
    edited_doc = doc_pipeline.build_graph(
        prompts={"translate": "Translate the summary formally. Reply with the translation only."}
    )
    blocked = tape.replay(runs["doc_pipeline"], edited_doc, mode="flight")
    console.print(f"without permission: [yellow]{blocked.status}[/]: {blocked.error}")
    allowed = tape.replay(runs["doc_pipeline"], edited_doc, mode="flight", allow_live_effects=True)
    console.print(f"with allow_live_effects: {allowed.status}; served {allowed.served}, live {allowed.live}")

    console.rule("what next")
    console.print("source .venv/bin/activate            put `graphtape` on the PATH (or run .venv/bin/graphtape)")
    console.print("graphtape runs                       list everything recorded")
    console.print(f"graphtape show {runs['refund_agent'][:8]}              the refund run as a timeline")
    console.print(f"graphtape replay {runs['doc_pipeline'][:8]} --graph examples/doc_pipeline.py:graph")
    console.print(
        f"graphtape export {runs['refund_agent'][:8]} -o run.jsonl && graphtape import run.jsonl "
        "--into sqlite:///shared.db"
    )
    tape.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
