"""CLI commands for running a store in production: ``prune``, ``stats``, ``recover`` and ``serve``.

Registered on the app of :mod:`graphtape.cli.base` when imported (``graphtape.cli.app`` imports it).
"""

from __future__ import annotations

from typing import Any

import typer
from rich.text import Text

from graphtape.cli import render, render_run
from graphtape.cli.base import (
    EXIT_BAD_RESULT,
    CliError,
    app,
    check_port,
    duration_option,
    echo_json,
    handle_errors,
    one_line,
    open_tape,
    progress_bar,
    server_extra,
    status_option,
    stderr,
    stdout,
)

# ---------------------------------------------------------------------------
# operations: prune, stats, recover, serve
# ---------------------------------------------------------------------------


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.1f}ms"
    return render.fmt_duration(s)


def _ops_table(*columns: str, right: tuple[str, ...] = (), fold: tuple[str, ...] = ()) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    for c in columns:
        if c in fold:
            table.add_column(c, overflow="fold")
        else:
            table.add_column(
                c,
                no_wrap=True,
                overflow="ellipsis",
                justify="right" if c in right else "left",
                min_width=8 if c == "run" else None,
            )
    return table


def _age(ts: float | None, now: float) -> str:
    return render.fmt_duration(max(0.0, now - ts)) if ts else "-"


@app.command("prune")
def prune_cmd(
    ctx: typer.Context,
    older_than: str | None = typer.Option(
        None, "--older-than", help="Runs that ended longer ago than this: 30d, 12h, 90m, 45s.", show_default=False
    ),
    keep_last: int | None = typer.Option(
        None, "--keep-last", help="Keep the newest N runs of every thread.", show_default=False
    ),
    status: str | None = typer.Option(
        None,
        "--status",
        help="Only runs with these statuses, comma-separated (e.g. finished,failed).",
        show_default=False,
    ),
    truncate_threads: bool | None = typer.Option(
        None,
        "--truncate-threads/--keep-chains",
        help="Whether the older runs of a thread whose newer runs stay may go (the kept runs then replay "
        "with --from-checkpoint). Default: yes with --keep-last, no otherwise.",
        show_default=False,
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be deleted; delete nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan and the result as JSON."),
) -> None:
    """Delete old runs, keeping every run that a kept run's replay or recovery still needs."""
    import time

    from graphtape.runtime.retention import plan_prune, prune

    with handle_errors():
        seconds = duration_option("--older-than", older_than)
        if keep_last is not None and keep_last < 0:
            raise CliError("--keep-last must be 0 or more")
        statuses = status_option(status, "finished,failed")
        if seconds is None and keep_last is None and statuses is None:
            raise CliError("say what to prune: --older-than 30d, --keep-last N or --status finished,failed")
        with open_tape(ctx) as tape:
            plan = plan_prune(
                tape, older_than=seconds, keep_last=keep_last, statuses=statuses, truncate_threads=truncate_threads
            )
            if dry_run or not plan.delete:
                result = prune(tape, plan, dry_run=True)
            else:
                err = stderr()
                with progress_bar(err) as progress:
                    task = progress.add_task(f"deleting {len(plan.delete)} run(s)", total=len(plan.delete))

                    def on_progress(done: int, total: int) -> None:
                        progress.update(task, completed=done, total=total)

                    result = prune(tape, plan, progress=on_progress)
            url = tape.url
        if as_json:
            echo_json({**result.to_dict(), "plan": plan.to_dict()})
            return
        console = stdout()
        now = time.time()
        if plan.delete:
            console.print("would delete:" if result.dry_run else "deleted:")
            table = _ops_table("run", "thread", "status", "ended", "graph", right=("ended",), fold=("graph",))
            for r in plan.delete:
                table.add_row(
                    render.short_id(r.run_id),
                    render.short_thread(r.thread_id),
                    render.status_text(r.status),
                    _age(r.ended_at or r.started_at, now) + " ago",
                    r.graph,
                )
            console.print(table)
        if plan.kept:
            console.print("kept although they match:")
            table = _ops_table("run", "thread", "status", "why", fold=("why",))
            for k in plan.kept:
                table.add_row(
                    render.short_id(k.run.run_id),
                    render.short_thread(k.run.thread_id),
                    render.status_text(k.run.status),
                    k.reason,
                )
            console.print(table)
        pinned = any("earlier run of thread" in k.reason for k in plan.kept)
        if keep_last is not None and truncate_threads is False and pinned:
            console.print(
                "note: a kept run replays its thread from the first run, so the earlier runs of its thread stay; "
                "--truncate-threads lets them go (the kept runs then replay with --from-checkpoint)",
                style="dim",
            )
        if not plan.delete:
            console.print(f"nothing to prune in {url}")
            return
        threads = f"{result.threads} thread(s)' checkpoints"
        if result.dry_run:
            console.print(f"dry run: would delete {result.runs} run(s) and {threads} from {url}; nothing was deleted")
            return
        freed = f", {_fmt_bytes(result.bytes_freed)} freed" if result.bytes_freed is not None else ""
        console.print(
            f"deleted {result.runs} run(s), {threads}, {result.blobs} blob(s) and {result.chain_nodes} "
            f"chain node(s) from {url}{freed}"
        )
        if result.threads_skipped:
            console.print(
                f"kept the checkpoints of {len(result.threads_skipped)} thread(s) that got a new run meanwhile: "
                + ", ".join(result.threads_skipped),
                style="yellow",
            )


@app.command("stats")
def stats_cmd(
    ctx: typer.Context,
    stuck_after: float = typer.Option(
        300.0, "--stuck-after", help="Seconds after which a live run that has not moved counts as stuck."
    ),
    size_warning: int = typer.Option(
        1_000_000, "--size-warning", help="Bytes above which a run tape or checkpoint is reported."
    ),
    limit: int = typer.Option(1000, "--limit", help="Measure sizes and latencies on the newest N runs (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    prometheus: bool = typer.Option(False, "--prometheus", help="Print the figures in Prometheus text format."),
) -> None:
    """Monitoring figures: runs by status, tape and checkpoint sizes, write and node latency, stuck threads."""
    from graphtape.runtime.stats import collect_stats

    with handle_errors():
        if as_json and prometheus:
            raise CliError("give --json or --prometheus, not both")
        if stuck_after < 0 or size_warning < 0 or limit < 0:
            raise CliError("--stuck-after, --size-warning and --limit must be 0 or more")
        with open_tape(ctx) as tape:
            err = stderr()
            with progress_bar(err, counted=False) as progress:
                progress.add_task("reading the tape", total=None)
                stats = collect_stats(
                    tape, stuck_after=stuck_after, size_warning=size_warning, limit_runs=limit or None
                )
        if prometheus:
            typer.echo(stats.to_prometheus(), nl=False)
            return
        if as_json:
            echo_json(stats.to_dict())
            return
        _print_stats(stats)


def _print_stats(stats: Any) -> None:
    console = stdout()
    counts = ", ".join(f"{n} {s}" for s, n in stats.runs_by_status.items() if n)
    console.print(f"{stats.store}: {stats.runs_total} run(s){': ' + counts if counts else ''}")
    table = _ops_table(
        "size",
        "measured",
        "p50",
        "p95",
        "max",
        f"over {_fmt_bytes(stats.size_warning)}",
        right=("measured", "p50", "p95", "max", f"over {_fmt_bytes(stats.size_warning)}"),
    )
    for label, s, n, over in (
        ("run tape", stats.run_tape_bytes, stats.sampled_runs, stats.large_runs_count),
        ("checkpoint", stats.checkpoint_bytes, stats.sampled_checkpoints, stats.large_checkpoints_count),
    ):
        table.add_row(
            label,
            str(n),
            _fmt_bytes(s.p50),
            _fmt_bytes(s.p95),
            _fmt_bytes(s.max),
            Text(str(over), style="yellow" if over else ""),
        )
    console.print(table)
    for rid, size in stats.large_runs:
        console.print(f"  large run {render.short_id(rid)}: {_fmt_bytes(size)}", style="yellow")
    for thread, cid, size in stats.large_checkpoints:
        console.print(f"  large checkpoint {cid} of thread {thread}: {_fmt_bytes(size)}", style="yellow")
    table = _ops_table("latency", "count", "p50", "p95", "max", right=("count", "p50", "p95", "max"))
    w = stats.write_latency
    table.add_row("store write", str(w.count), _fmt_seconds(w.p50), _fmt_seconds(w.p95), _fmt_seconds(w.max))
    for node, s in sorted(stats.node_durations.items()):
        table.add_row(f"node {node}", str(s.count), _fmt_seconds(s.p50), _fmt_seconds(s.p95), _fmt_seconds(s.max))
    console.print(table)
    if stats.stuck_threads:
        console.print(
            f"{len(stats.stuck_threads)} stuck thread(s) (no progress for over "
            f"{render.fmt_duration(stats.stuck_after)}):",
            style="yellow",
        )
        table = _ops_table("thread", "run", "node", "waiting", "held by", right=("waiting",))
        for st in stats.stuck_threads:
            table.add_row(
                st.thread_id,
                render.short_id(st.run_id),
                st.node or "(between steps)",
                render.fmt_duration(st.seconds),
                st.owner,
            )
        console.print(table)
    else:
        console.print(f"no stuck threads (threshold {render.fmt_duration(stats.stuck_after)})")
    if stats.orphaned_runs:
        console.print(
            f"{stats.orphaned_runs} orphaned run(s) (their process died): finish them with `graphtape recover`",
            style="yellow",
        )


def _looks_like_graph_spec(name: str) -> bool:
    """Whether a recorded graph name is a ``module:attr`` or ``path/file.py:attr`` spec."""
    target, sep, attr = (name or "").strip().rpartition(":")
    if not sep or not target or not attr or not all(p.isidentifier() for p in attr.split(".")):
        return False
    return target.endswith(".py") or all(p.isidentifier() for p in target.split("."))


@app.command("recover")
def recover_cmd(
    ctx: typer.Context,
    graph_spec: str | None = typer.Option(
        None,
        "--graph",
        "-g",
        help="The graph: module:attr or path/to/file.py:attr (default: the graph name recorded on each run, "
        "when it is such a spec).",
        show_default=False,
    ),
    run: str | None = typer.Option(None, "--run", help="Recover only this run (id or prefix).", show_default=False),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the orphaned runs; recover nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the runs (or the recoveries) as JSON."),
) -> None:
    """Finish the runs a dead process left running, from their last checkpoint (exit 1 if one fails)."""
    import time

    from graphtape.loading import load_graph

    with handle_errors():
        with open_tape(ctx) as tape:
            orphans = tape.orphaned_runs()
            if run is not None:
                target = tape.run(run)
                if target.run_id not in {o.run_id for o in orphans}:
                    if target.status != "running":
                        raise CliError(
                            f"run {render.short_id(target.run_id)} is {target.status}, not orphaned: nothing to recover"
                        )
                    raise CliError(
                        f"run {render.short_id(target.run_id)} is still running: its thread's lease "
                        "is held (by a live process); wait for it or for the lease to expire"
                    )
                orphans = [target]
            specs = {o.run_id: graph_spec or (o.graph if _looks_like_graph_spec(o.graph) else None) for o in orphans}
            now = time.time()
            if dry_run:
                from graphtape.runtime.recovery import held_runs

                held = held_runs(tape) if run is None else []
                if as_json:
                    echo_json(
                        [
                            {
                                **render_run.run_to_json(o),
                                "graph_spec": specs[o.run_id],
                                "lease_held": False,
                                "needs_graph": specs[o.run_id] is None,
                            }
                            for o in orphans
                        ]
                        + [
                            {
                                **render_run.run_to_json(h),
                                "lease_held": True,
                                "lease_owner": owner,
                                "lease_expires_in": round(max(0.0, expires - now), 1),
                            }
                            for h, owner, expires in held
                        ]
                    )
                    return
                console = stdout()
                if held:
                    console.print(
                        f"{len(held)} run(s) marked running whose thread's lease is still held: a live process is "
                        "running them, or their process died less than a lease ago; recover them once the lease "
                        "expires:",
                        style="yellow",
                    )
                    table = _ops_table("run", "thread", "started", "lease expires in", "held by", fold=("held by",))
                    for h, owner, expires in held:
                        table.add_row(
                            render.short_id(h.run_id),
                            render.short_thread(h.thread_id),
                            _age(h.started_at, now) + " ago",
                            render.fmt_duration(max(0.0, expires - now)),
                            owner,
                        )
                    console.print(table)
                if not orphans:
                    console.print(f"no orphaned runs in {tape.url}")
                    return
                table = _ops_table("run", "thread", "started", "graph", fold=("graph",))
                for o in orphans:
                    how = "" if graph_spec else " (loads)" if specs[o.run_id] else " (needs --graph)"
                    table.add_row(
                        render.short_id(o.run_id),
                        render.short_thread(o.thread_id),
                        _age(o.started_at, now) + " ago",
                        o.graph + how,
                    )
                console.print(table)
                console.print(f"dry run: {len(orphans)} orphaned run(s); nothing was recovered")
                return
            missing = [o for o in orphans if specs[o.run_id] is None]
            if missing:
                names = ", ".join(f"{render.short_id(o.run_id)} (graph {o.graph!r})" for o in missing[:5])
                more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
                raise CliError(
                    f"{len(missing)} orphaned run(s) need --graph: their recorded graph name is not a "
                    f"module:attr or file.py:attr spec: {names}{more}; nothing was recovered"
                )
            loaded: dict[str, Any] = {}
            for spec in dict.fromkeys(s for s in specs.values() if s):
                loaded[spec] = load_graph(spec)
            err = stderr()
            results = []
            with progress_bar(err) as progress:
                task = progress.add_task("recovering", total=len(orphans))
                for i, o in enumerate(orphans):
                    progress.update(task, completed=i, description=f"recovering run {render.short_id(o.run_id)}")
                    results.extend(tape.recover(loaded[specs[o.run_id] or ""], run_id=o.run_id))
                progress.update(task, completed=len(orphans))
        if as_json:
            echo_json([r.to_dict() for r in results])
        else:
            console = stdout()
            if not results:
                console.print("no orphaned runs to recover")
            for r in results:
                line = Text(f"run {render.short_id(r.crashed_run_id)} on thread {r.thread_id}: ")
                line.append_text(render.status_text(r.status))
                if r.run_id:
                    line.append(f" as run {render.short_id(r.run_id)} ({r.served} served, {r.live} live)")
                if r.error:
                    line.append(f"  {one_line(r.error)}", style="red")
                console.print(line)
        if any(r.error or r.status == "failed" for r in results):
            raise typer.Exit(EXIT_BAD_RESULT)


@app.command("serve")
def serve_cmd(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(9464, "--port", help="Port to listen on."),
    stuck_after: float = typer.Option(
        300.0, "--stuck-after", help="Seconds without progress that make a thread stuck."
    ),
    size_warning: int = typer.Option(1_000_000, "--size-warning", help="Bytes above which sizes are reported."),
) -> None:
    """Serve /metrics (Prometheus) and /healthz for the store (needs the server extra)."""
    with handle_errors():
        with server_extra("graphtape serve", "starlette and uvicorn"):
            import uvicorn

            from graphtape.server.app import create_app
        check_port(port)
        # not created when missing: metrics of a mistyped URL would report an empty, healthy store forever
        with open_tape(ctx) as tape:
            app_ = create_app(tape, stuck_after=stuck_after, size_warning=size_warning)
            typer.echo(f"serving {tape.url} on http://{host}:{port}/metrics (Ctrl+C to stop)", err=True)
            try:
                uvicorn.run(app_, host=host, port=port, log_level="warning")
            except SystemExit as exc:  # uvicorn exits when it cannot bind
                raise CliError(f"could not serve on {host}:{port} (is the port in use?)") from exc
