"""CLI commands for tapes: ``runs``, ``show``, ``run``, ``replay``, ``export`` and ``import``.

Registered on the app of :mod:`graphtape.cli.base` when imported (``graphtape.cli.app`` imports it).

A little over 500 lines because it holds the six commands a user meets first, each with its
options and help text; their rendering lives in ``render_run``/``render_replay``.
"""

from __future__ import annotations

import asyncio
import enum
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.text import Text

import graphtape
from graphtape import clock, events, serde
from graphtape.cli import render, render_run
from graphtape.cli.base import (
    EXIT_BAD_RESULT,
    CliError,
    app,
    echo_json,
    fail,
    handle_errors,
    one_line,
    open_tape,
    parse_json_option,
    print_replay_result,
    progress_bar,
    stderr,
    stdout,
)
from graphtape.cli.new_store import new_store_removed_on_error
from graphtape.debug.explain import counted_calls, unused_reasons
from graphtape.errors import GraphtapeError
from graphtape.store.base import RUN_STATUSES


class ReplayMode(enum.StrEnum):
    strict = "strict"
    flight = "flight"


def _needs_async(graph: Any) -> bool:
    """Whether a node of the graph has only an async implementation."""
    for node in (getattr(graph, "nodes", None) or {}).values():
        bound = getattr(node, "bound", None)
        if bound is not None and getattr(bound, "func", True) is None and getattr(bound, "afunc", None) is not None:
            return True
    return False


def _is_async_only_error(exc: BaseException) -> bool:
    return isinstance(exc, TypeError) and "No synchronous function provided" in str(exc)


# ---------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------


@app.command("runs")
def runs_cmd(
    ctx: typer.Context,
    thread: str | None = typer.Option(None, "--thread", "-t", help="Only runs of this thread."),
    status: str | None = typer.Option(
        None, "--status", "-s", help=f"Only runs with this status ({', '.join(RUN_STATUSES)})."
    ),
    limit: int = typer.Option(20, "--limit", "-n", help="At most this many runs, newest first (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the runs as a JSON list."),
    archived: bool = typer.Option(
        False, "--archived", help="List the archived threads instead: where each went (graphtape archive)."
    ),
) -> None:
    """List recorded runs, newest first."""
    if archived:
        from graphtape.cli.archive_cmds import print_archived

        print_archived(ctx, thread=thread, as_json=as_json)
        return
    with handle_errors():
        if status is not None and status not in RUN_STATUSES:
            raise CliError(f"unknown status {status!r}; use one of {', '.join(RUN_STATUSES)}")
        if limit < 0:
            raise CliError("--limit must be 0 (all) or more")
        with open_tape(ctx) as tape:
            runs = [counted_calls(tape, r) for r in tape.runs(thread_id=thread, status=status, limit=limit or None)]
            url = tape.url
        if as_json:
            echo_json([render_run.run_to_json(r) for r in runs])
            return
        console = stdout()
        if not runs:
            filters = " and ".join(
                f for f in (f"thread {thread!r}" if thread else "", f"status {status!r}" if status else "") if f
            )
            console.print(f"no runs{' with ' + filters if filters else ''} in {url}")
            return
        console.print(render_run.runs_table(runs, console.width))


# ---------------------------------------------------------------------------
# show
# ---------------------------------------------------------------------------


@app.command("show")
def show_cmd(
    ctx: typer.Context,
    run: str = typer.Argument(..., help="Run id or a unique prefix of it (4+ characters).", show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print the run and its events as JSON."),
) -> None:
    """Show one run: steps, node tasks, every call and where its answer came from."""
    with handle_errors(), open_tape(ctx) as tape:
        record = counted_calls(tape, tape.run(run))
        rows = tape.events(record.run_id)
        if as_json:
            echo_json(render_run.run_json(record, rows, tape.payload))
            return
        console = stdout()
        width = max(40, console.width - 30)
        console.print(render_run.run_tree(record, rows, tape.payload, width=width))


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------


def _check_resumable(tape: graphtape.Tape, graph: Any, thread: str) -> None:
    previous = tape.runs(thread_id=thread, limit=1)
    if not previous:
        raise CliError(f"no runs on thread {thread!r} in {tape.url}: nothing to resume")
    last = previous[0]
    if last.status != "interrupted":
        raise CliError(
            f"the last run on thread {thread!r} ({render.short_id(last.run_id)}) is {last.status}, "
            "not interrupted: nothing to resume"
        )
    if (last.meta or {}).get("stopped_by"):
        raise CliError(
            f"the last run on thread {thread!r} ({render.short_id(last.run_id)}) was stopped "
            f"({last.meta['stopped_by']}), not paused at an interrupt(): nothing waits for an answer; "
            f"continue it with: graphtape recover --run {last.run_id}"
        )
    try:
        from langgraph.checkpoint.memory import InMemorySaver
    except ImportError:  # pragma: no cover
        return
    if isinstance(getattr(graph, "checkpointer", None), InMemorySaver):
        raise CliError(
            "the graph is compiled with an in-memory checkpointer, so its interrupted state did not survive "
            "the previous command; compile it without a checkpointer (graphtape keeps checkpoints beside "
            "the tape) or with a persistent one"
        )


def stopped_by_ctrl_c(tape: graphtape.Tape, run_id: str | None, how: str) -> NoReturn:
    """After Ctrl-C: say which run was left ``interrupted`` and how to continue it; exit 130 (as shells do)."""
    run = tape.store.get_run(run_id) if run_id else None
    if run is None:
        fail("stopped by Ctrl-C before a run was recorded", 130)
    fail(f"stopped by Ctrl-C: run {run.run_id} on thread {run.thread_id} is left {run.status}; {how}", 130)


def _invoke(recorded: Any, value: Any, config: dict[str, Any], use_async: bool) -> Any:
    if use_async:
        return asyncio.run(recorded.ainvoke(value, config))
    return recorded.invoke(value, config)


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    graph: str = typer.Argument(..., help="module:attr or path/to/file.py:attr", show_default=False),
    input_json: str | None = typer.Option(
        None, "--input", "-i", help="The graph input as JSON (or @file.json).", show_default=False
    ),
    thread: str | None = typer.Option(None, "--thread", "-t", help="Thread id (default: a new one)."),
    resume: str | None = typer.Option(
        None, "--resume", "-r", help="Resume the interrupted run on --thread with this JSON value (or @file.json)."
    ),
    name: str | None = typer.Option(None, "--name", help="Graph name stored on the run (default: GRAPH)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Record one run of a graph: invoke it with --input (or --resume an interrupted thread)."""
    with handle_errors():
        if input_json is None and resume is None:
            raise CliError("give --input JSON (or --resume JSON with --thread to answer an interrupt)")
        if input_json is not None and resume is not None:
            raise CliError("give either --input or --resume, not both")
        if resume is not None and not thread:
            raise CliError("--resume needs --thread: the thread whose run is waiting for input")
        if resume is not None:
            from langgraph.types import Command

            value: Any = Command(resume=parse_json_option(resume, "--resume"))
        else:
            value = parse_json_option(input_json or "", "--input")

        from graphtape.loading import load_graph
        from graphtape.recorder import thread_saver

        compiled = load_graph(graph)
        with open_tape(ctx, create=True) as tape:
            if resume is not None:
                _check_resumable(tape, compiled, thread or "")
            thread_id = thread or clock.new_id()
            # the thread persists (``--resume`` continues it), as on LangGraph's server: the graph's own
            # checkpointer, else graphtape's saver
            recorded = tape.record(compiled, name=name or graph, checkpointer=thread_saver(tape, compiled))
            use_async = _needs_async(compiled)
            failure: BaseException | None = None
            output: Any = None
            continue_it = f"continue it with: graphtape recover --run {{}} --graph {graph}"
            try:
                output = _invoke(recorded, value, {"configurable": {"thread_id": thread_id}}, use_async)
            except KeyboardInterrupt:
                stopped_by_ctrl_c(tape, recorded.last_run_id, continue_it.format(recorded.last_run_id))
            except GraphtapeError:
                raise
            except Exception as exc:
                failure = exc
            if failure is not None and not use_async and _is_async_only_error(failure):
                # a subgraph with async-only nodes: record again through the async API
                if not thread:
                    thread_id = clock.new_id()
                failure = None
                try:
                    output = _invoke(recorded, value, {"configurable": {"thread_id": thread_id}}, True)
                except KeyboardInterrupt:
                    stopped_by_ctrl_c(tape, recorded.last_run_id, continue_it.format(recorded.last_run_id))
                except GraphtapeError:
                    raise
                except Exception as exc:
                    failure = exc
            if recorded.last_run_id is None:  # pragma: no cover - the recorder always opens a run
                raise CliError("the graph did not start a run")
            run = tape.run(recorded.last_run_id)
            interrupts = [events.Interrupt.from_row(e) for e in tape.events(run.run_id, [events.Interrupt.KIND])]

        if as_json:
            echo_json(
                {
                    "run_id": run.run_id,
                    "thread_id": run.thread_id,
                    "graph": run.graph,
                    "status": run.status,
                    "output": serde.to_jsonable(output),
                    "interrupts": [i.to_data() for i in interrupts],
                    "error": run.error,
                    "llm_calls": run.llm_calls,
                    "tool_calls": run.tool_calls,
                    "effect_calls": run.effect_calls,
                    "tokens": run.tokens,
                    "duration": run.duration,
                }
            )
        else:
            _print_run_result(run, output, interrupts, graph)
        if failure is not None:
            fail(
                f"the graph raised {type(failure).__name__}: {one_line(str(failure))} "
                f"(recorded as failed run {render.short_id(run.run_id)})",
                EXIT_BAD_RESULT,
            )


def _print_run_result(run: Any, output: Any, interrupts: list[events.Interrupt], graph_spec: str) -> None:
    console = stdout()
    width = max(40, console.width - 20)
    head = Text("recorded run ")
    head.append(run.run_id, style="bold")
    head.append("  ")
    head.append_text(render.status_text(run.status))
    console.print(head)
    console.print(
        f"thread {run.thread_id}; {run.llm_calls} llm, {run.tool_calls} tool, {run.effect_calls} effect calls; "
        f"{run.tokens} tokens; {render.fmt_duration(run.duration)}",
        style="dim",
    )
    if run.status == "failed":
        return
    if interrupts:
        for intr in interrupts:
            console.print(Text(f"waiting for input: {render.summarize(intr.value, width)}", style="yellow"))
        console.print(
            f"resume with: graphtape run {graph_spec} --thread {run.thread_id} --resume '<json>'", style="dim"
        )
        return
    if output is not None:
        state = {k: v for k, v in output.items() if k != "__interrupt__"} if isinstance(output, dict) else output
        console.print("final state:")
        for key, summary in render.state_lines(serde.to_jsonable(state), width):
            console.print(f"  {key}: {summary}" if key else f"  {summary}")


# ---------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------


def _resolve_checkpoint(tape: graphtape.Tape, target: Any, prefix: str) -> str:
    """The full id of a checkpoint of ``target`` or an earlier run of its thread, from a prefix."""
    from graphtape.replay.engine import run_chain

    ids: list[str] = []
    for run in run_chain(tape, target):
        for row in tape.store.events(run.run_id, [events.Checkpoint.KIND]):
            ev = events.Checkpoint.from_row(row)
            cid = str(ev.checkpoint_id or "")
            if cid == prefix:
                return cid
            if cid.startswith(prefix) and not ev.ns and cid not in ids:
                ids.append(cid)
    if len(ids) == 1:
        return ids[0]
    if len(ids) > 1:
        raise CliError(f"checkpoint prefix {prefix!r} is ambiguous ({len(ids)} checkpoints); give more characters")
    return prefix  # let the replay say it is not one of the run's checkpoints


@app.command("replay")
def replay_cmd(
    ctx: typer.Context,
    run: str = typer.Argument(..., help="Run id or a unique prefix of it.", show_default=False),
    graph_spec: str = typer.Option(..., "--graph", "-g", help="The current code: module:attr or path/to/file.py:attr"),
    mode: ReplayMode = typer.Option(
        ReplayMode.strict,
        "--mode",
        "-m",
        help="strict: serve every call from the tape, stop at the first change; "
        "flight: serve unchanged calls, run changed ones live.",
    ),
    allow_live_effects: bool = typer.Option(
        False, "--allow-live-effects", help="Let changed @graphtape.effect calls run for real (flight mode)."
    ),
    from_checkpoint: str | None = typer.Option(
        None,
        "--from-checkpoint",
        "-c",
        help="Start from this root checkpoint of the run (id or unique prefix, see `graphtape show`) "
        "instead of its input.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the replay result as JSON."),
) -> None:
    """Re-run the current code of a graph against a recorded run (exit 1 if it diverged or failed)."""
    with handle_errors():
        from graphtape.loading import load_graph

        with open_tape(ctx) as tape:
            target = tape.run(run)
            checkpoint = _resolve_checkpoint(tape, target, from_checkpoint) if from_checkpoint else None
            graph = load_graph(graph_spec)
            replays_before = {r.run_id for r in tape.runs(limit=20)}
            err = stderr()
            with progress_bar(err) as progress:
                task = progress.add_task(f"replaying {render.short_id(target.run_id)}", total=None)

                def on_segment(index: int, total: int, original: Any) -> None:
                    progress.update(
                        task,
                        total=total,
                        completed=index,
                        description=f"replaying run {render.short_id(original.run_id)}",
                    )

                try:
                    result = tape.replay(
                        target.run_id,
                        graph,
                        mode=mode.value,
                        allow_live_effects=allow_live_effects,
                        from_checkpoint=checkpoint,
                        progress=on_segment,
                    )
                except KeyboardInterrupt:
                    progress.stop()
                    stopped = [
                        r
                        for r in tape.runs(limit=20)
                        if r.replay_of and (r.meta or {}).get("stopped_by") and r.run_id not in replays_before
                    ]
                    stopped_by_ctrl_c(
                        tape,
                        stopped[0].run_id if stopped else None,
                        f"run the replay again to finish: graphtape replay {target.run_id} "
                        f"--graph {graph_spec} --mode {mode.value}",
                    )
                progress.update(task, completed=progress.tasks[0].total or 1)
            reasons = unused_reasons(tape, result)
        print_replay_result(result, as_json, checkpoint, reasons)


# ---------------------------------------------------------------------------
# export / import
# ---------------------------------------------------------------------------


def _size(path: Path) -> str:
    try:
        n: float = path.stat().st_size
    except OSError:
        return "?"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


@app.command("export")
def export_cmd(
    ctx: typer.Context,
    run: str | None = typer.Argument(None, help="Run id or prefix (or use --thread).", show_default=False),
    thread: str | None = typer.Option(None, "--thread", "-t", help="Export every run of this thread instead."),
    output: Path = typer.Option(..., "--output", "-o", help="The JSONL file to write.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write one run, or every run of a thread, to a portable JSONL tape file."""
    with handle_errors():
        if (run is None) == (thread is None):
            raise CliError("give a RUN id or --thread THREAD (one of them)")
        with open_tape(ctx) as tape:
            if run is not None:
                record = tape.run(run)
                lines = tape.export_run(record.run_id, output)
                ids = [record.run_id]
                what = f"run {record.run_id}"
            else:
                assert thread is not None
                runs = tape.runs(thread_id=thread, limit=None)
                err = stderr()
                with progress_bar(err, counted=False) as progress:
                    progress.add_task(f"exporting {len(runs)} run(s) of thread {thread}", total=None)
                    lines = tape.export_thread(thread, output)
                ids = [r.run_id for r in sorted(runs, key=lambda r: r.started_at)]
                what = f"{len(ids)} run(s) of thread {thread}"
        if as_json:
            echo_json({"path": str(output), "lines": lines, "runs": ids, "bytes": output.stat().st_size})
        else:
            stdout().print(f"wrote {what} to {output} ({lines} lines, {_size(output)})")


@app.command("import")
def import_cmd(
    ctx: typer.Context,
    file: Path = typer.Argument(..., help="A tape file written by `graphtape export`.", show_default=False),
    into: str | None = typer.Option(
        None,
        "--into",
        help="The store to import into (default: --url, $GRAPHTAPE_URL or .graphtape/tape.db).",
        show_default=False,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the imported run ids as JSON."),
) -> None:
    """Add the runs of an exported tape file to the store (created if needed)."""
    from graphtape.export import read_file

    url = into or (ctx.obj or {}).get("url")
    with handle_errors():
        _, batch = read_file(file)  # a damaged or foreign file is refused before any store is created
        with new_store_removed_on_error(url), open_tape(ctx, create=True, url=url) as tape:
            present = [r.run_id for r in batch.new_runs if tape.store.get_run(r.run_id) is not None]
            if present:
                raise CliError(
                    f"run {present[0]} is already in {tape.url}; nothing was imported (it is the same run: "
                    "to copy it into another store, give that store with --into URL)"
                )
            ids = tape.import_file(file)
            runs = [tape.store.get_run(i) for i in ids]
            url = tape.url
    if as_json:
        echo_json({"path": str(file), "imported": ids, "into": url})
        return
    console = stdout()
    console.print(f"imported {len(ids)} run(s) from {file} into {url}")
    for r in runs:
        if r is None:  # pragma: no cover - just written
            continue
        line = Text(f"  {render.short_id(r.run_id)}  {r.graph}  thread {render.short_thread(r.thread_id)}  ")
        line.append_text(render.status_text(r.status))
        console.print(line)
