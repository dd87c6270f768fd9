"""Where graphtape spends its time when recording (benchmark 1) and in long conversations (benchmark 3).

    python benchmarks/profile_recording.py            # ablations + per-function timings + cProfile
    python benchmarks/profile_recording.py --reps 40  # more repetitions for the ablations
    python benchmarks/profile_recording.py --ablations-only --reps 60
    python benchmarks/profile_recording.py --in-situ-only --reps 40

Four views of the same 50-node linear graph recorded with a ``SqliteSaver``
as shipped (benchmark 1's failing configuration):

* **Ablations**: the recording with one graphtape component switched off
  (monkeypatched in this process only), interleaved with the baseline; the
  difference to the full recording is what that component costs per step,
  in wall time and in process CPU (all threads: steadier than the wall,
  which follows the disk's fsync latency).
* **In situ**: the baseline and the recording interleaved, timed from
  inside: the run's thread's CPU per step, LangGraph's ``run_with_retry``
  per task (the node with LangGraph's wrapping and graphtape's task wrapper)
  and the user's saver per call (the same code either way: a difference is
  contention with the recording's other threads).
* **Per-function wall time** across all threads (LangGraph writes
  checkpoints from a background thread, which ``cProfile`` does not see):
  graphtape's entry points are wrapped with timers.
* **cProfile** of the main thread (``durability="sync"``), graphtape frames.

Then the agent-shaped run of benchmark 4 (``create_agent`` against the local
fake OpenAI server: wall and main-thread CPU per run, recorded and not, and
a cProfile of the recorded run) and a cProfile of the recorded 200-turn
conversation of benchmark 3, with its time per turn over the last turns.

This script patches graphtape internals by name to switch components off;
a component whose name no longer exists is skipped with a note.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import random
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

import graphtape
import graphtape.recorder as recorder_mod
from graphtape.record import context as context_mod
from graphtape.record import llm as llm_mod
from graphtape.record import session as session_mod
from graphtape.record import task_runner as task_runner_mod
from graphtape.record import writer as writer_mod
from graphtape.record.checkpoints import TapSaver
from graphtape.record.tasks import TaskRecorder
from graphtape.store.sqlite import SqliteTapeStore

STEPS = bench.N_NODES


class Patch:
    """Temporarily replace attributes; skips (with a note) the ones that do not exist."""

    def __init__(self, *items: tuple[Any, str, Any]):
        self.items = [(o, n, v) for o, n, v in items if hasattr(o, n)]
        self.missing = [f"{getattr(o, '__name__', o)}.{n}" for o, n, _ in items if not hasattr(o, n)]
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> Patch:
        for obj, name, value in self.items:
            self.saved.append((obj, name, obj.__dict__[name] if name in vars(obj) else getattr(obj, name)))
            setattr(obj, name, value)
        return self

    def __exit__(self, *exc: Any) -> None:
        for obj, name, value in reversed(self.saved):
            setattr(obj, name, value)
        self.saved.clear()


def _tap_without_flush(self: TapSaver, config: dict[str, Any], checkpoint: Any, metadata: Any) -> None:
    session = context_mod.session_of(config)
    if session is not None:
        session.on_checkpoint(config, checkpoint, metadata)


def _finished_without_writes(self: TaskRecorder, opened: Any, outputs: Any) -> None:
    """``TaskRecorder.finished`` without the task's writes: the node's output is neither viewed,
    serialised and hashed (at the next flush) nor stored as a blob; the event itself is kept."""
    started, ns, _, _ = opened
    self._row("task_finished", {"task": ns, "duration": round(self._clock() - started, 6), "writes": None})


NO_TASK_EVENTS = (task_runner_mod, "_recorders_for", lambda task: ())
NO_TASK_WRITES = (TaskRecorder, "finished", _finished_without_writes)
NO_TAP = (TapSaver, "_tap", lambda self, *a: None)
TAP_NO_FLUSH = (TapSaver, "_tap", _tap_without_flush)
NO_STATUS = (recorder_mod.RecordedGraph, "_status", lambda self, config: ("finished", []))
#: nothing reaches the tape file (background writes and the run's end alike); the lease is still taken
NO_STORE_WRITES = (SqliteTapeStore, "write", lambda self, batch, fence=None: None)

ABLATIONS: dict[str, tuple[tuple[Any, str, Any], ...]] = {
    "graphtape full": (),
    "- task events (TaskRecorder)": (NO_TASK_EVENTS,),
    "- the task's writes (its output's blob)": (NO_TASK_WRITES,),
    "- background tape writes (events kept)": (TAP_NO_FLUSH,),
    "- checkpoint tap (no event, no flush)": (NO_TAP,),
    "- end-of-run get_state (_status)": (NO_STATUS,),
    "- tape store writes (nothing written)": (NO_STORE_WRITES,),
    "- task events, tap and _status": (NO_TASK_EVENTS, NO_TAP, NO_STATUS),
    "- all of the above (the wrapper alone)": (NO_TASK_EVENTS, NO_TAP, NO_STATUS, NO_STORE_WRITES),
}


def ablations(tmp: Path, reps: int, durability: str) -> dict[str, tuple[float, float]]:
    """Median wall and median process CPU (every thread: LangGraph's savers, the tape writer) per
    super-step, in ms, of the baseline and of each ablation.

    Process CPU does not wait for the disk, so it is much steadier than wall time on a shared
    machine whose fsync latency moves from one minute to the next; the wall is what a user feels.
    """
    builder = bench.linear_graph()
    plain = builder.compile()
    baseline = builder.compile(checkpointer=bench.sqlite_saver(tmp / f"abl-base-{durability}.db"))
    tape = graphtape.connect(f"sqlite:///{tmp}/abl-tape-{durability}.db")
    rec = tape.record(plain, checkpointer=bench.sqlite_saver(tmp / f"abl-user-{durability}.db"))
    missing: set[str] = set()
    cpu: dict[str, list[float]] = defaultdict(list)

    def cpu_timed(name: str, run: Any) -> Any:
        def go() -> Any:
            c0 = time.process_time()
            try:
                return run()
            finally:
                cpu[name].append(time.process_time() - c0)

        return go

    def variant(patches: tuple[tuple[Any, str, Any], ...]):
        def go() -> Any:
            with Patch(*patches) as p:
                missing.update(p.missing)
                return rec.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability=durability)

        return go

    base_name = "baseline (SqliteSaver as shipped)"
    variants = {
        base_name: cpu_timed(
            base_name, lambda: baseline.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability=durability)
        )
    }
    variants.update({name: cpu_timed(name, variant(p)) for name, p in ABLATIONS.items()})
    samples = bench.interleave(variants, reps)
    tape.close()
    if missing:
        print(f"  note: not found, ablation incomplete: {sorted(missing)}")
    # the warm-up runs are timed by cpu_timed too: only the last ``reps`` are the interleaved ones
    return {
        k: (statistics.median(v) * 1000 / STEPS, statistics.median(cpu[k][-reps:]) * 1000 / STEPS)
        for k, v in samples.items()
    }


# -- per-function wall time across threads -------------------------------------------

TIMED = [
    (SqliteSaver, "put", "SqliteSaver.put (LangGraph, inner)"),
    (SqliteSaver, "put_writes", "SqliteSaver.put_writes (LangGraph, inner)"),
    (TapSaver, "_tap", "TapSaver._tap (checkpoint event + asking for a write)"),
    (writer_mod.TapeWriter, "flush", "  TapeWriter.flush (all flushes)"),
    (SqliteTapeStore, "write", "    SqliteTapeStore.write (one transaction)"),
    (TaskRecorder, "opened", "TaskRecorder.opened"),
    (TaskRecorder, "finished", "TaskRecorder.finished"),
    (recorder_mod.RecordedGraph, "_open", "RecordedGraph._open (list_runs + start + flush)"),
    (recorder_mod.RecordedGraph, "_status", "RecordedGraph._status (get_state)"),
    (recorder_mod.RecordedGraph, "_close", "RecordedGraph._close (finish + flush)"),
]


def timed_functions(tmp: Path, runs: int, durability: str) -> tuple[dict[str, tuple[float, float]], float, float]:
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    builder = bench.linear_graph()
    plain = builder.compile()
    baseline = builder.compile(checkpointer=bench.sqlite_saver(tmp / f"fn-base-{durability}.db"))
    tape = graphtape.connect(f"sqlite:///{tmp}/fn-tape-{durability}.db")
    rec = tape.record(plain, checkpointer=bench.sqlite_saver(tmp / f"fn-user-{durability}.db"))
    for _ in range(2):  # warm up unpatched
        rec.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability=durability)
        baseline.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability=durability)
    patches = [(o, n, _timer(getattr(o, n), label, totals, counts)) for o, n, label in TIMED if hasattr(o, n)]
    wall_rec = wall_base = 0.0
    with Patch(*patches):
        for _ in range(runs):
            t0 = time.perf_counter()
            rec.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability=durability)
            wall_rec += time.perf_counter() - t0
        rec_totals, rec_counts = dict(totals), dict(counts)
        totals.clear()
        counts.clear()
        for _ in range(runs):
            t0 = time.perf_counter()
            baseline.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability=durability)
            wall_base += time.perf_counter() - t0
        base_totals, base_counts = dict(totals), dict(counts)
    tape.close()
    per_step = 1e6 / (runs * STEPS)  # seconds total -> µs per super-step
    out = {}
    for _, _, label in TIMED:
        if label in rec_totals:
            out[label] = (rec_totals[label] * per_step, rec_counts[label] / runs)
    for label in ("SqliteSaver.put (LangGraph, inner)", "SqliteSaver.put_writes (LangGraph, inner)"):
        if label in base_totals:
            out[f"[baseline] {label}"] = (base_totals[label] * per_step, base_counts[label] / runs)
    return out, wall_rec * per_step, wall_base * per_step


IN_SITU = (
    "the run's thread CPU, µs/step",
    "run_with_retry, µs/task",
    "SqliteSaver.put, µs/call",
    "SqliteSaver.put_writes, µs/call",
    "wall, µs/step",
)


def in_situ(tmp: Path, reps: int, durability: str) -> dict[str, tuple[float, float]]:
    """The recording's cost where it lands, timed from inside interleaved runs: ``(baseline, recorded)``
    medians of each figure in :data:`IN_SITU`.

    ``run_with_retry`` (LangGraph's runner calls it once per task) holds the node, LangGraph's own
    wrapping of it and, recorded, graphtape's part: its wrapper, the task's copy and the task hooks.
    Its difference is what that part costs on the run's thread as it runs, several times what
    ``timeit`` gives for the same code in a loop. The user's saver calls are the same code either
    way: a difference there is contention (the interpreter lock, the disk) with the recording's
    other threads.
    """
    from langgraph.pregel import _runner

    builder = bench.linear_graph()
    baseline = builder.compile(checkpointer=bench.sqlite_saver(tmp / f"situ-base-{durability}.db"))
    tape = graphtape.connect(f"sqlite:///{tmp}/situ-tape-{durability}.db")
    rec = tape.record(builder.compile(), checkpointer=bench.sqlite_saver(tmp / f"situ-user-{durability}.db"))
    rec.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability=durability)  # graphtape's runner patch is in
    acc: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    per_run: dict[bool, list[tuple[float, ...]]] = {False: [], True: []}

    def variant(target: Any, recorded: bool) -> Any:
        def go() -> Any:
            acc.clear()
            calls.clear()
            c0 = time.thread_time()
            out = target.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability=durability)
            cpu = time.thread_time() - c0
            unseen = [k for k in ("task", "put", "put_writes") if not calls[k]]
            if unseen:  # a renamed LangGraph function: its timer would report nothing, not zero cost
                raise RuntimeError(f"in situ: no call reached the timer of {unseen}")
            per_run[recorded].append(
                (
                    cpu / STEPS,
                    acc["task"] / calls["task"],
                    acc["put"] / calls["put"],
                    acc["put_writes"] / calls["put_writes"],
                )
            )
            return out

        return go

    patches = (
        (_runner, "run_with_retry", _timer(_runner.run_with_retry, "task", acc, calls)),
        (SqliteSaver, "put", _timer(SqliteSaver.put, "put", acc, calls)),
        (SqliteSaver, "put_writes", _timer(SqliteSaver.put_writes, "put_writes", acc, calls)),
    )
    with Patch(*patches):
        samples = bench.interleave({"baseline": variant(baseline, False), "recorded": variant(rec, True)}, reps)
    tape.close()
    out = {}
    for i, name in enumerate(IN_SITU[:4]):
        out[name] = tuple(statistics.median(x[i] for x in per_run[r][-reps:]) * 1e6 for r in (False, True))
    out[IN_SITU[4]] = tuple(statistics.median(samples[k]) * 1e6 / STEPS for k in ("baseline", "recorded"))
    return out  # type: ignore[return-value]


def cprofile_sync(tmp: Path, runs: int) -> str:
    builder = bench.linear_graph()
    tape = graphtape.connect(f"sqlite:///{tmp}/prof-tape.db")
    rec = tape.record(builder.compile(), checkpointer=bench.sqlite_saver(tmp / "prof-user.db"))
    rec.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability="sync")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        rec.invoke(bench.LINEAR_INPUT, bench.new_thread(), durability="sync")
    prof.disable()
    tape.close()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).sort_stats("cumulative")
    stats.print_stats(r"graphtape/|callbacks/manager.py.*(handle_event|get_child|on_chain)", 25)
    return _trim(buf.getvalue(), runs * STEPS, "super-step")


def cprofile_conversation(tmp: Path, turns: int) -> tuple[str, dict[str, float]]:
    """Benchmark 3's chat-sized conversation, recorded and unrecorded turn by turn: main-thread CPU per turn
    over the first and last 20 turns (is the recording's work independent of the history?), and a cProfile
    of the recorded last 20 turns."""
    tape = graphtape.connect(f"sqlite:///{tmp}/prof-conv.db")
    rec = tape.record(bench.chat_graph(bench.make_model(1, paragraphs=True)).compile(), checkpointer=InMemorySaver())
    plain = bench.chat_graph(bench.make_model(1, paragraphs=True)).compile(checkpointer=InMemorySaver())
    rng = random.Random(7)
    cfg = {"configurable": {"thread_id": "conversation"}}
    cpu: dict[str, list[float]] = {"recorded": [], "unrecorded": []}
    prof = cProfile.Profile()
    for turn in range(turns):
        msg = {"messages": [HumanMessage(f"Turn {turn}: {bench.sentence(rng)}")]}
        for name, target in (("recorded", rec), ("unrecorded", plain))[:: 1 if turn % 2 else -1]:
            c0 = time.thread_time()
            target.invoke(msg, cfg)
            cpu[name].append(time.thread_time() - c0)
    # the profile: 20 more recorded turns on another thread with the same history (timings above unprofiled)
    state = rec.get_state(cfg).values["messages"]
    other = {"configurable": {"thread_id": "conversation-profiled"}}
    rec.invoke({"messages": state[:-2]}, other)
    prof.enable()
    for turn in range(20):
        rec.invoke({"messages": [HumanMessage(f"Profiled turn {turn}: {bench.sentence(rng)}")]}, other)
    prof.disable()
    tape.close()
    figures = {}
    for name, xs in cpu.items():
        figures[f"{name}: first 20 turns, CPU ms/turn"] = statistics.median(xs[:20]) * 1000
        figures[f"{name}: last 20 turns, CPU ms/turn"] = statistics.median(xs[-20:]) * 1000
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(r"graphtape/|load/dump.py.*dumpd|zlib", 22)
    return _trim(buf.getvalue(), 20, "turn"), figures


#: graphtape's entry points in a recorded agent run, timed in wall time (benchmark 4 is a figure in ms per run)
AGENT_TIMED = [
    (recorder_mod.RecordedGraph, "_open", "RecordedGraph._open (lease, run start)"),
    (llm_mod, "begin_llm", "llm.begin_llm (request, messages, fingerprint)"),
    (session_mod.Session, "end_live", "Session.end_live (a live call's response)"),
    (TaskRecorder, "opened", "TaskRecorder.opened"),
    (TaskRecorder, "finished", "TaskRecorder.finished"),
    (TapSaver, "put", "TapSaver.put (with InMemorySaver.put, in line)"),
    (TapSaver, "put_writes", "TapSaver.put_writes (with InMemorySaver's)"),
    (writer_mod.TapeWriter, "flush", "TapeWriter.flush (background and the end's)"),
    (recorder_mod.RecordedGraph, "_close", "RecordedGraph._close (run end, last write)"),
]


def agent_overhead(tmp: Path, runs: int) -> tuple[dict[str, float], str]:
    """Benchmark 4's agent run (``create_agent``, 3 LLM + 2 tool calls): wall and main-thread CPU per run,
    recorded and unrecorded interleaved, then graphtape's entry points timed (wall, every thread) and
    a cProfile of the recorded run (graphtape frames)."""
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    with bench.agent_server() as url:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key="sk-bench", max_retries=0)
        tools = [bench.order_status, bench.refund_policy]
        tape = graphtape.connect(f"sqlite:///{tmp}/prof-agent.db")
        targets = {
            "unrecorded": create_agent(model, tools, checkpointer=InMemorySaver()),
            "recorded": tape.record(create_agent(model, tools), name="agent", checkpointer=InMemorySaver()),
        }
        question = {"messages": [HumanMessage("Where is my order A-17, and can I get a refund if it is late?")]}
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in targets}
        for k in targets:  # warm up
            targets[k].invoke(question, bench.new_thread())
        for rep in range(runs):
            for k in list(targets) if rep % 2 else list(targets)[::-1]:
                c0, t0 = time.thread_time(), time.perf_counter()
                targets[k].invoke(question, bench.new_thread())
                samples[k].append((time.perf_counter() - t0, time.thread_time() - c0))
        totals: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        timers = [
            (o, n, _timer(getattr(o, n), label, totals, counts) if hasattr(o, n) else None)
            for o, n, label in AGENT_TIMED
        ]
        with Patch(*timers) as p:
            if p.missing:
                print(f"  note: not found, timers incomplete: {sorted(p.missing)}")
            for _ in range(runs):
                targets["recorded"].invoke(question, bench.new_thread())
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(runs):
            targets["recorded"].invoke(question, bench.new_thread())
        prof.disable()
        tape.close()
    out = {}
    for k, xs in samples.items():
        out[f"{k}: wall ms/run"] = statistics.median(x[0] for x in xs) * 1000
        out[f"{k}: main-thread CPU ms/run"] = statistics.median(x[1] for x in xs) * 1000
    timed = [f"  {'entry point (inclusive, wall)':52s} {'ms/run':>8s}  calls/run"]
    for _, _, label in AGENT_TIMED:
        if counts[label]:
            timed.append(f"  {label:52s} {totals[label] / runs * 1000:8.3f}  {counts[label] / runs:6.1f}")
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(r"graphtape/", 25)
    return out, "\n".join(timed) + "\n\n" + _trim(buf.getvalue(), runs, "run")


def _timer(fn: Any, label: str, totals: dict[str, float], counts: dict[str, int]) -> Any:
    """``fn`` adding its wall time to ``totals[label]`` and its calls to ``counts[label]`` (any thread)."""
    lock = threading.Lock()

    @functools.wraps(fn)
    def timed(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            dt = time.perf_counter() - t0
            with lock:
                totals[label] += dt
                counts[label] += 1

    return timed


def _trim(text: str, per: int, unit: str) -> str:
    """pstats output with the per-unit cumulative time (µs) added in front."""
    lines = []
    started = False
    for line in text.splitlines():
        if line.strip().startswith("ncalls"):
            started = True
            lines.append(f"{'cum µs/' + unit:>14}  {'ncalls':>12}        function")
            continue
        if started and line.strip():
            parts = line.split()
            try:
                cum = float(parts[3])
            except (IndexError, ValueError):
                continue
            where = " ".join(parts[5:]).replace(str(Path(sys.prefix)), "<venv>")
            where = where.replace(str(Path(__file__).resolve().parent.parent), "")
            lines.append(f"{cum / per * 1e6:14.1f}  {parts[0]:>12} calls  {where}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--ablations-only", action="store_true", help="only the ablations (a few minutes)")
    parser.add_argument("--in-situ-only", action="store_true", help="only the in-situ timings (about a minute)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory(prefix="graphtape-prof-") as d:
        tmp = Path(d)
        for durability in ("sync", "async") if not args.in_situ_only else ():
            print(
                f"\n== Ablations, durability={durability} ({args.reps} interleaved reps, median ms/super-step: "
                "wall, and process CPU of every thread)"
            )
            res = ablations(tmp, args.reps, durability)
            base, base_cpu = res["baseline (SqliteSaver as shipped)"]
            full, full_cpu = res["graphtape full"]
            for name, (v, c) in res.items():
                saved = f"   saves {full - v:+.3f} ms wall, {full_cpu - c:+.3f} ms CPU" if name.startswith("-") else ""
                print(f"  {name:42s} {v:7.3f} ms {v / base:5.2f}x   CPU {c:7.3f} ms {c / base_cpu:5.2f}x{saved}")
        if args.ablations_only:
            return 0
        for durability in ("sync", "async"):
            print(
                f"\n== In situ, durability={durability} ({args.reps} interleaved reps, medians; timed from inside "
                "the runs)"
            )
            print(f"  {'':36s} {'baseline':>10s} {'recorded':>10s} {'difference':>11s}")
            for name, (b, r) in in_situ(tmp, args.reps, durability).items():
                print(f"  {name:36s} {b:10.1f} {r:10.1f} {r - b:+11.1f}")
        if args.in_situ_only:
            return 0
        for durability in ("sync", "async"):
            print(f"\n== Per-function wall time, all threads, durability={durability} (µs per super-step, inclusive)")
            out, wall_rec, wall_base = timed_functions(tmp, args.reps, durability)
            print(
                f"  wall: recorded {wall_rec:.0f} µs/step, baseline {wall_base:.0f} µs/step "
                f"(timers add a little overhead)"
            )
            for label, (us, calls) in out.items():
                print(f"  {label:52s} {us:8.1f} µs   ({calls:.0f} calls/run)")
        print("\n== cProfile, main thread, durability=sync (graphtape frames and callback dispatch)")
        print(cprofile_sync(tmp, args.reps))
        print(f"\n== Agent run (benchmark 4: create_agent, 3 LLM + 2 tool calls), {args.reps} interleaved runs")
        figures, text = agent_overhead(tmp, args.reps)
        for name, value in figures.items():
            print(f"  {name:42s} {value:8.2f}")
        print(text)
        print(f"\n== cProfile, {args.turns}-turn conversation (benchmark 3), recorded")
        text, figures = cprofile_conversation(tmp, args.turns)
        for name, value in figures.items():
            print(f"  {name:42s} {value:8.2f}")
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
