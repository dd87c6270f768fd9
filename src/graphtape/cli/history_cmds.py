"""CLI commands for time travel: ``history``, ``state`` and ``diff`` (browsing a thread's checkpoints).

Registered on the app of :mod:`graphtape.cli.base` when imported (``graphtape.cli.app`` imports it).
"""

from __future__ import annotations

from typing import Any

import typer

from graphtape.cli.base import app, echo_json, handle_errors, open_tape, stdout

# ---------------------------------------------------------------------------
# time travel: history, state, diff
# ---------------------------------------------------------------------------


def _optional_graph(spec: str | None) -> Any:
    if spec is None:
        return None
    from graphtape.loading import load_graph

    return load_graph(spec)


@app.command("history")
def history_cmd(
    ctx: typer.Context,
    target: str = typer.Argument(
        ..., metavar="RUN|THREAD", help="A run id (or unique prefix) or a thread id.", show_default=False
    ),
    namespaces: bool = typer.Option(False, "--namespaces", help="Also list subgraph checkpoints, under their step."),
    last: int | None = typer.Option(
        None,
        "--last",
        "-n",
        min=1,
        metavar="N",
        help="Only the newest N checkpoints (with the subgraph checkpoints under them); the branch tree stays whole.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the history (entries and branch tree) as JSON."),
) -> None:
    """List the checkpoints of a run or thread: step, source, writers, calls, and the branches off them.

    Piped or redirected, every row is printed whole; on a terminal rows are cut to its width.
    """
    from graphtape.cli import render_history

    with handle_errors(), open_tape(ctx) as tape:
        history = tape.history(target, namespaces=namespaces)
        if as_json:
            data = history.to_dict()
            if last is not None:
                shown = render_history.newest(history, last)
                data["entries"] = [d for e, d in zip(history.entries, data["entries"]) if e.checkpoint_id in shown]
                data["hidden"] = len(history.entries) - len(data["entries"])
            echo_json(data)
            return
        stdout(whole_rows=True).print(render_history.history_tree(history, last=last))


@app.command("state")
def state_cmd(
    ctx: typer.Context,
    checkpoint: str = typer.Argument(
        ..., help="A checkpoint id or a unique prefix of it (8+ characters).", show_default=False
    ),
    thread: str | None = typer.Option(
        None, "--thread", "-t", help="The checkpoint's thread (default: found on the tape)."
    ),
    graph_spec: str | None = typer.Option(
        None,
        "--graph",
        "-g",
        help="module:attr or path.py:attr of the graph, for checkpoints kept by the graph's own checkpointer.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the checkpoint and its values as JSON."),
) -> None:
    """Show the state (channel values) at a checkpoint."""
    from graphtape.cli import render_history
    from graphtape.debug.locate import locate_checkpoint, values_at

    with handle_errors(), open_tape(ctx) as tape:
        ref = locate_checkpoint(tape, checkpoint, thread_id=thread)
        values = values_at(tape, ref, _optional_graph(graph_spec))
        if as_json:
            echo_json(render_history.state_json(ref, values))
            return
        console = stdout()
        console.print(render_history.state_view(ref, values, width=max(40, console.width - 12)))


@app.command("diff")
def diff_cmd(
    ctx: typer.Context,
    a: str = typer.Argument(..., help="The checkpoint to compare from (id or unique prefix).", show_default=False),
    b: str = typer.Argument(
        ..., help="The checkpoint to compare to (same or another run or thread).", show_default=False
    ),
    patch: bool = typer.Option(False, "--patch", help="Print the difference as an RFC 6902 JSON Patch."),
    graph_spec: str | None = typer.Option(
        None,
        "--graph",
        "-g",
        help="module:attr or path.py:attr of the graph, for checkpoints kept by the graph's own checkpointer.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the changes and the JSON Patch as JSON."),
) -> None:
    """Compare the states at two checkpoints: keys added, removed, changed; list appends; messages by content."""
    from graphtape.cli import render_history
    from graphtape.debug.diff import diff_states
    from graphtape.debug.locate import locate_checkpoint, values_at

    with handle_errors(), open_tape(ctx) as tape:
        ref_a = locate_checkpoint(tape, a)
        ref_b = locate_checkpoint(tape, b)
        graph = _optional_graph(graph_spec)
        diff = diff_states(
            values_at(tape, ref_a, graph),
            values_at(tape, ref_b, graph),
            a_label=ref_a.checkpoint_id,
            b_label=ref_b.checkpoint_id,
        )
        if as_json:
            echo_json(
                {
                    "a": ref_a.to_dict(),
                    "b": ref_b.to_dict(),
                    "equal": diff.equal,
                    "changes": [c.to_dict() for c in diff.changes],
                    "patch": diff.json_patch(),
                }
            )
            return
        if patch:
            echo_json(diff.json_patch())
            return
        stdout().print(render_history.diff_view(diff, ref_a, ref_b))
