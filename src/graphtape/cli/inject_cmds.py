"""CLI commands for logic injection: ``fork``, ``override``, ``resume`` and the interactive ``debug``.

Registered on the app of :mod:`graphtape.cli.base` when imported (``graphtape.cli.app`` imports it).
"""

from __future__ import annotations

import enum
import json
import shlex
import sys
from typing import Any

import typer

from graphtape import events
from graphtape.cli import render
from graphtape.cli.base import (
    EXIT_BAD_RESULT,
    CliError,
    app,
    echo_json,
    handle_errors,
    open_tape,
    parse_json_option,
    print_replay_result,
    stdout,
)
from graphtape.debug.explain import unused_reasons


class RunMode(enum.StrEnum):
    strict = "strict"
    flight = "flight"
    live = "live"


def _parse_sets(sets: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise CliError(f"--set takes key=JSON, e.g. --set 'topic=\"dogs\"' (got {item!r})")
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CliError(
                f"--set {key}: the value is not valid JSON ({exc.msg}); strings need quotes: --set '{key}=\"text\"'"
            ) from None
    return values


@app.command("fork")
def fork_cmd(
    ctx: typer.Context,
    checkpoint: str = typer.Argument(..., help="Checkpoint id (or a unique prefix) to fork from.", show_default=False),
    graph_spec: str = typer.Option(..., "--graph", "-g", help="The current code: module:attr or path/to/file.py:attr"),
    sets: list[str] = typer.Option(
        [], "--set", help="Edit the state: key=JSON (repeatable), checked against the schema."
    ),
    as_node: str | None = typer.Option(None, "--as-node", help="Apply the edit as if this node wrote it."),
    mode: RunMode = typer.Option(RunMode.flight, "--mode", "-m", help="strict, flight or live continuation."),
    allow_live_effects: bool = typer.Option(False, "--allow-live-effects", help="Let changed effects run for real."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Continue from a checkpoint in a new thread, optionally with an edited state (the original is untouched)."""
    with handle_errors():
        from graphtape.loading import load_graph

        values = _parse_sets(sets) or None
        with open_tape(ctx) as tape:
            result = tape.fork(
                checkpoint,
                load_graph(graph_spec),
                values=values,
                as_node=as_node,
                mode=mode.value,
                allow_live_effects=allow_live_effects,
            )
            reasons = unused_reasons(tape, result)
    print_replay_result(result, as_json, reasons=reasons)


@app.command("override")
def override_cmd(
    ctx: typer.Context,
    run: str = typer.Argument(..., help="The recorded run (id or prefix).", show_default=False),
    call: str = typer.Argument(..., help="The call to override (its call id or a unique prefix).", show_default=False),
    output: str = typer.Option(
        ..., "--output", "-o", help="The new output as JSON (an LLM answer: a string or AIMessage fields)."
    ),
    graph_spec: str = typer.Option(..., "--graph", "-g", help="The current code: module:attr or path/to/file.py:attr"),
    mode: RunMode = typer.Option(RunMode.flight, "--mode", "-m", help="How calls after the override are answered."),
    from_start: bool = typer.Option(
        False, "--from-start", help="Re-run from the run's input, not the checkpoint before the call."
    ),
    allow_live_effects: bool = typer.Option(False, "--allow-live-effects", help="Let changed effects run for real."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Re-run with one recorded LLM, tool or effect output replaced."""
    with handle_errors():
        from graphtape.loading import load_graph

        value = parse_json_option(output, "--output")
        with open_tape(ctx) as tape:
            target = tape.run(run)
            result = tape.override(
                target.run_id,
                call,
                value,
                load_graph(graph_spec),
                mode=mode.value,
                allow_live_effects=allow_live_effects,
                from_start=from_start,
            )
            reasons = unused_reasons(tape, result)
    print_replay_result(result, as_json, reasons=reasons)


@app.command("invalidate-from")
def invalidate_from_cmd(
    ctx: typer.Context,
    run: str = typer.Argument(..., help="The recorded run (id or prefix).", show_default=False),
    node: str = typer.Argument(
        ..., help="The node from whose first execution on every call runs live.", show_default=False
    ),
    graph_spec: str = typer.Option(..., "--graph", "-g", help="The current code: module:attr or path/to/file.py:attr"),
    allow_live_effects: bool = typer.Option(
        False, "--allow-live-effects", help="Let effects from NODE on run for real."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Re-run with every call from the first execution of NODE on made live; earlier calls are served."""
    with handle_errors():
        from graphtape.loading import load_graph

        with open_tape(ctx) as tape:
            target = tape.run(run)
            graph = load_graph(graph_spec)
            nodes = set(getattr(graph, "nodes", {}) or {})
            if nodes and node not in nodes and node.split("/")[0] not in nodes:
                raise CliError(
                    f"the graph has no node {node!r}; its nodes: "
                    f"{', '.join(sorted(n for n in nodes if not n.startswith('__')))}"
                )
            result = tape.invalidate_from(target.run_id, node, graph, allow_live_effects=allow_live_effects)
            reasons = unused_reasons(tape, result)
    print_replay_result(result, as_json, reasons=reasons)


@app.command("resume")
def resume_cmd(
    ctx: typer.Context,
    thread: str = typer.Argument(..., help="The thread waiting at an interrupt().", show_default=False),
    value: str = typer.Option(
        ..., "--value", help="The answer as JSON; with --by-id, a JSON object {interrupt_id: answer}."
    ),
    graph_spec: str = typer.Option(..., "--graph", "-g", help="The graph: module:attr or path/to/file.py:attr"),
    by_id: bool = typer.Option(False, "--by-id", help="Answer several pending interrupts by id."),
    as_json: bool = typer.Option(False, "--json", help="Print the new run as JSON."),
) -> None:
    """Answer a thread's pending interrupt(s); the answer is recorded so replays reproduce it."""
    with handle_errors():
        from graphtape.loading import load_graph

        answer = parse_json_option(value, "--value")
        if by_id and not isinstance(answer, dict):
            raise CliError("--by-id needs --value to be a JSON object of {interrupt_id: answer}")
        with open_tape(ctx) as tape:
            recorded = tape.resume(
                thread, load_graph(graph_spec), None if by_id else answer, by_id=answer if by_id else None
            )
            run = tape.run(recorded.last_run_id)
            pending = [events.Interrupt.from_row(e) for e in tape.events(run.run_id, [events.Interrupt.KIND])]
    if as_json:
        echo_json({"run": run.to_dict(), "pending_interrupts": [p.to_data() for p in pending]})
        return
    console = stdout()
    console.print(f"recorded run {run.run_id}  {run.status}")
    for p in pending:
        console.print(f"  waiting: interrupt {p.interrupt_id}: {json.dumps(p.value, ensure_ascii=False)}")


DEBUG_HELP = """commands:
  c | continue            run to the next breakpoint or the end
  s | step                run one super-step
  n | node                run to the start/end of the next node
  call                    run to the next LLM/tool/effect call
  b NODE | ba NODE        break before / after a node
  bc [KIND] [NAME]        break before calls (kind: llm, tool, effect)
  bw EXPR                 break when a Python expression over `state` becomes true
  breaks                  list breakpoints
  state                   show the state at the last checkpoint
  req                     show the paused call's request and recorded answer
  use JSON                answer the paused call with JSON instead of the recording
  live                    send the paused call live
  q | quit                stop"""


@app.command("debug")
def debug_cmd(
    ctx: typer.Context,
    run: str = typer.Argument(..., help="The recorded run to step through.", show_default=False),
    graph_spec: str = typer.Option(..., "--graph", "-g", help="The current code: module:attr or path/to/file.py:attr"),
    mode: RunMode = typer.Option(RunMode.strict, "--mode", "-m", help="strict (default) or flight."),
    before: list[str] = typer.Option([], "--break", "-b", help="Break before this node (repeatable)."),
    after: list[str] = typer.Option([], "--break-after", help="Break after this node (repeatable)."),
    calls: list[str] = typer.Option([], "--break-call", help="Break before calls: KIND or KIND:NAME (repeatable)."),
    allow_live_effects: bool = typer.Option(False, "--allow-live-effects", help="Let effects run live when asked."),
) -> None:
    """Step through a replay in the terminal: breakpoints, step, continue, show state, answer calls."""
    with handle_errors():
        from graphtape.debug.debugger import Debugger
        from graphtape.loading import load_graph

        with open_tape(ctx) as tape:
            target = tape.run(run)
            dbg = Debugger(
                tape, target.run_id, load_graph(graph_spec), mode=mode.value, allow_live_effects=allow_live_effects
            )
            for node in before:
                dbg.break_before(node)
            for node in after:
                dbg.break_after(node)
            for spec in calls:
                kind, _, name = spec.partition(":")
                dbg.break_on_call(kind or None, name or None)
            if not (before or after or calls):
                dbg._run_mode = "step"  # no breakpoint given: stop after the first super-step
            console = stdout()
            console.print(f"debugging run {target.run_id} ({mode.value}); `help` lists commands")
            pause = dbg.start()
            quit_early = _repl(dbg, pause, console)
            if not quit_early and dbg.result is not None and dbg.result.status in ("diverged", "failed"):
                raise typer.Exit(EXIT_BAD_RESULT)


def _repl(dbg: Any, pause: Any, console: Any) -> bool:
    """Read commands until the replay ends (False) or the user quits (True)."""
    while True:
        console.print(f"paused: {pause.describe()}")
        if pause.reason == "done":
            if dbg.result is not None and dbg.result.divergence is not None:
                console.print(dbg.result.divergence.get("diff", ""))
            return False
        try:
            console.print("(graphtape) ", end="")
            line = sys.stdin.readline()
        except KeyboardInterrupt:
            line = "q"
        if not line:
            line = "q"
        cmd, _, rest = line.strip().partition(" ")
        if not cmd:
            continue
        rest = rest.strip()
        try:
            args = shlex.split(rest)
        except ValueError:
            args = rest.split()
        try:
            if cmd in ("c", "continue"):
                pause = dbg.continue_()
            elif cmd in ("s", "step"):
                pause = dbg.step()
            elif cmd in ("n", "node"):
                pause = dbg.step_node()
            elif cmd == "call":
                pause = dbg.step_call()
            elif cmd == "b" and args:
                dbg.break_before(args[0])
            elif cmd == "ba" and args:
                dbg.break_after(args[0])
            elif cmd == "bc":
                dbg.break_on_call(args[0] if args else None, args[1] if len(args) > 1 else None)
            elif cmd == "bw" and rest:
                expr = rest
                code = compile(expr, "<breakpoint>", "eval")
                dbg.break_when(lambda state, code=code: eval(code, {}, {"state": state}), expr)
            elif cmd == "breaks":
                for b in dbg.breakpoints:
                    console.print(f"  {b.description}")
            elif cmd == "state":
                state = dbg.state()
                if not state:
                    console.print("no checkpoint yet: the state is shown after the first super-step")
                for line in render.readable_lines(state, max(40, console.width)):
                    console.print(line)
            elif cmd == "req":
                if pause.reason != "call":
                    console.print("not paused at a call")
                else:
                    call_id = pause.call.get("call_id")
                    console.print(
                        f"{pause.call['kind']} call {pause.call.get('name')} in node {pause.call.get('node')}"
                        + (f", recorded call #{call_id[:8]}" if call_id else ", not on the tape")
                    )
                    console.print(pause.call["request"])
                    recorded = pause.call.get("recorded")
                    if recorded is None:
                        console.print("recorded answer: (none)")
                    else:
                        console.print("recorded answer:")
                        for line in render.readable_lines(recorded, max(40, console.width)):
                            console.print(line)
            elif cmd == "use" and rest:
                pause = dbg.use(json.loads(rest))
            elif cmd == "live":
                pause = dbg.live()
            elif cmd in ("q", "quit", "exit"):
                dbg.stop()
                result = dbg.result
                if result is not None and result.run_id:
                    console.print(
                        f"stopped: replay run {result.run_id} is left interrupted ({result.served} "
                        f"served, {result.live} live)"
                    )
                else:
                    console.print("stopped")
                return True
            elif cmd in ("h", "help", "?"):
                console.print(DEBUG_HELP)
            else:
                console.print(f"unknown command {cmd!r}; `help` lists commands")
        except json.JSONDecodeError as exc:
            console.print(f"error: not valid JSON ({exc.msg})")
        except SyntaxError as exc:
            console.print(f"error: not a Python expression ({exc.msg})")
        except Exception as exc:
            console.print(f"error: {exc}")
