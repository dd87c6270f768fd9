"""The graphtape tour: record three agents, replay one strictly, re-run one after a prompt edit,
then serve them in the Studio.

``make demo`` (``python -m examples.demo``) records the examples when the
store has no runs yet, tells that story in a few lines, then starts
``graphtape dev`` on ``examples/langgraph.json`` and prints its address: the
examples' graphs and their recorded runs, until Ctrl-C. ``make demo-record``
(``python -m examples.demo --no-serve``) records and replays, then exits:
the form for scripts. It uses the embedded default store
(``.graphtape/tape.db`` in the working directory, or ``$GRAPHTAPE_URL``) and
the offline seeded models, so it needs no network and no API key; set
``GRAPHTAPE_MODEL`` to use a real provider instead.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

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
        # the thread persists between the call that pauses and the one that answers: graphtape's saver
        rec = tape.record(research_assistant.build_graph(), name="research_assistant", checkpointer=tape.saver)
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


def tour(tape: graphtape.Tape, runs: dict[str, str], *, short: bool = False) -> int:
    """Replay the research assistant strictly, re-run two examples after a prompt edit; 1 if a replay went wrong."""
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
    if strict.divergence and not short:
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
    if short:
        return 0

    console.rule("what next")
    console.print("source .venv/bin/activate            put `graphtape` on the PATH (or run .venv/bin/graphtape)")
    console.print("graphtape runs                       list everything recorded")
    console.print(f"graphtape show {runs['refund_agent'][:8]}              the refund run as a timeline")
    console.print(f"graphtape replay {runs['doc_pipeline'][:8]} --graph examples/doc_pipeline.py:graph")
    console.print(
        f"graphtape export {runs['refund_agent'][:8]} -o run.jsonl && graphtape import run.jsonl "
        "--into sqlite:///shared.db"
    )
    console.print("make demo                            the Studio on these runs (graphtape dev)")
    return 0


#: the port ``graphtape dev`` (and ``langgraph dev``) listen on by default
DEFAULT_PORT = 2024


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _any_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(port: int) -> int:
    """``graphtape dev`` on the examples' ``langgraph.json`` until Ctrl-C (another port when ``port`` is taken)."""
    from graphtape.cli import main as graphtape_cli

    if not _port_free(port):
        taken, port = port, _any_free_port()
        console.print(f"port {taken} is in use; serving on {port} instead")
    console.rule("the Studio")
    console.print(f"[bold]open http://127.0.0.1:{port}[/]: the examples' graphs and their recorded runs")
    console.print(
        "graphtape is installed in .venv: `source .venv/bin/activate`, then `graphtape runs` in another shell",
        highlight=False,
    )
    config = Path(__file__).resolve().parent / "langgraph.json"
    try:
        graphtape_cli(["dev", "--config", str(config), "--port", str(port)])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.demo",
        description="Record the examples (when the store has no runs), replay them, then serve them in the Studio.",
    )
    parser.add_argument(
        "--no-serve", action="store_true", help="record and replay the examples, then exit (for scripts)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="the Studio's port (default: %(default)s)")
    args = parser.parse_args(argv)

    tape = graphtape.connect()
    try:
        console.print(f"[bold]graphtape demo[/] — store: {tape.url}\n")
        if args.no_serve:
            return tour(tape, record_examples(tape))
        if tape.runs(limit=1):
            console.print("the store has recorded runs already: serving them (`make demo-record` records more)")
        else:
            code = tour(tape, record_examples(tape), short=True)
            if code:
                return code
    finally:
        tape.close()
    return serve(args.port)


if __name__ == "__main__":
    sys.exit(main())
