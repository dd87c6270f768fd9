"""Listing a thread's history: ``Tape.history`` versus LangGraph's ``get_state_history``.

Run from the repository root with the project's environment::

    python benchmarks/history.py                      # 10,000 checkpoints, 7 repetitions
    python benchmarks/history.py --checkpoints 2000   # quicker
    python benchmarks/history.py --json out.json      # also write the figures as JSON
    python benchmarks/history.py --check              # exit 1 if the 1/40 target is missed
    python benchmarks/history.py --state window       # a chat-like state (see below)

What is measured: one thread with ``--checkpoints`` checkpoints, recorded by
graphtape with its default saver, so the tape and the checkpoints are in one
SQLite file. The graph is a single node on a self-loop incrementing a
counter; one ``invoke`` (with a recursion limit above the step count) writes
every checkpoint. ``--state window`` adds a chat-like channel to the state:
the last 10 messages of a conversation, one new AI message per step (what
an agent's state looks like, without growing to 10,000 messages). Then, on
a fresh connection to that file, side by side:

* **graphtape**: ``tape.history(thread)``: every entry built (id, parent,
  step, source, time, run, writers, calls, next) and the branch tree;
* **LangGraph**: ``graph.get_state_history(config)`` consumed to the end, the
  graph compiled with graphtape's saver on the same file (LangGraph's own
  history API reading the same checkpoints).

The two run interleaved within each repetition (the first one alternates),
after a warm-up and a ``gc.collect()``; medians are reported, and the ratio
is the median of the per-repetition ratios.
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape.runtime.saver import saver_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import interleave

TARGET = 40  # graphtape must take at most 1/TARGET of LangGraph's time


class Counter(TypedDict):
    n: int


def last_ten(old: list[BaseMessage] | None, new: list[BaseMessage]) -> list[BaseMessage]:
    return ([*(old or []), *new])[-10:]


class Window(TypedDict):
    n: int
    messages: Annotated[list[BaseMessage], last_ten]


TEXT = (
    "The order was checked against the refund policy; the customer gets the amount back "
    "on the original card within five working days."
)


def build_graph(steps: int, state: str = "counter"):
    if state == "window":

        def inc(state: Window) -> dict[str, Any]:
            return {"n": state["n"] + 1, "messages": [AIMessage(f"{state['n']}: {TEXT}")]}

        b = StateGraph(Window)
    else:

        def inc(state: Counter) -> dict[str, Any]:  # type: ignore[misc]
            return {"n": state["n"] + 1}

        b = StateGraph(Counter)
    b.add_node(inc)
    b.add_edge(START, "inc")
    b.add_conditional_edges("inc", lambda s: "inc" if s["n"] < steps else END, ["inc", END])
    return b.compile()


def record_thread(path: Path, checkpoints: int, thread: str, state: str) -> float:
    """Record one run writing exactly ``checkpoints`` checkpoints (input, step 0, then one per step)."""
    steps = checkpoints - 2
    first: dict[str, Any] = {"n": 0}
    if state == "window":
        first["messages"] = [HumanMessage("Where is my refund for order A-1001?")]
    with graphtape.connect(f"sqlite:///{path}") as tape:
        recorded = tape.record(build_graph(steps, state), checkpointer=tape.saver)
        t0 = time.perf_counter()
        recorded.invoke(first, {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10})
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=10_000, help="checkpoints on the thread (default 10000)")
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions of each variant (default 7)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if graphtape takes more than 1/{TARGET}")
    parser.add_argument(
        "--state",
        choices=("counter", "window"),
        default="counter",
        help="counter: {n: int} (default); window: also the last 10 messages of a chat",
    )
    args = parser.parse_args(argv)
    if args.checkpoints < 3:
        parser.error("--checkpoints must be at least 3")

    thread = "history-bench"
    with tempfile.TemporaryDirectory(prefix="graphtape-history-") as tmp:
        path = Path(tmp) / "tape.db"
        print(f"recording {args.checkpoints} checkpoints on one thread into {path} ...", flush=True)
        build_s = record_thread(path, args.checkpoints, thread, args.state)
        with sqlite3.connect(path) as conn:
            stored = conn.execute("SELECT count(*) FROM gt_checkpoints WHERE thread_id=?", (thread,)).fetchone()[0]
            events = conn.execute("SELECT count(*) FROM gt_events").fetchone()[0]
        conn.close()
        size = path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob("tape.db-*"))
        assert stored == args.checkpoints, (stored, args.checkpoints)

        tape = graphtape.connect(f"sqlite:///{path}")
        graph = build_graph(args.checkpoints - 2, args.state).copy(update={"checkpointer": saver_for(tape.store)})
        config = {"configurable": {"thread_id": thread}}

        def ours() -> int:
            history = tape.history(thread)
            assert len(history.entries) == args.checkpoints and history.entries[-1].writers == ("inc",)
            return len(history.entries)

        def langgraph() -> int:
            n = sum(1 for _ in graph.get_state_history(config))
            assert n == args.checkpoints
            return n

        print(f"timing ({args.reps} repetitions, interleaved) ...", flush=True)
        samples = interleave({"graphtape": ours, "langgraph": langgraph}, args.reps, warmup=1)
        tape.close()

    med = {k: statistics.median(v) for k, v in samples.items()}
    ratios = [g / lg for g, lg in zip(samples["graphtape"], samples["langgraph"])]
    ratio = statistics.median(ratios)
    ok = ratio <= 1 / TARGET
    figures = {
        "checkpoints": args.checkpoints,
        "state": args.state,
        "reps": args.reps,
        "record_seconds": build_s,
        "file_bytes": size,
        "events": events,
        "graphtape_history_ms": med["graphtape"] * 1000,
        "langgraph_get_state_history_ms": med["langgraph"] * 1000,
        "graphtape_per_checkpoint_us": med["graphtape"] / args.checkpoints * 1e6,
        "langgraph_per_checkpoint_us": med["langgraph"] / args.checkpoints * 1e6,
        "ratio": ratio,
        "speedup": 1 / ratio,
        "target_ratio": 1 / TARGET,
        "target_met": ok,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "machine": platform.machine(),
    }
    print()
    print(
        f"thread of {args.checkpoints} checkpoints, {args.state} state "
        f"({events} tape events, {size / 1e6:.1f} MB file); "
        f"recorded in {build_s:.1f} s"
    )
    print(
        f"  graphtape  Tape.history(thread)              {figures['graphtape_history_ms']:9.1f} ms"
        f"   ({figures['graphtape_per_checkpoint_us']:.1f} us/checkpoint)"
    )
    print(
        f"  LangGraph  graph.get_state_history(config)   {figures['langgraph_get_state_history_ms']:9.1f} ms"
        f"   ({figures['langgraph_per_checkpoint_us']:.1f} us/checkpoint)"
    )
    print(
        f"  ratio (median of paired runs): {ratio:.4f} = 1/{1 / ratio:.1f}   "
        f"target <= 1/{TARGET}: {'met' if ok else 'MISSED'}"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
