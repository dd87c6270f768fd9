"""CLI commands that move threads to cold storage and back: ``archive`` and ``restore``.

Registered on the app of :mod:`graphtape.cli.base` when imported (``graphtape.cli.app`` imports it).
The work is :mod:`graphtape.runtime.archive`'s; this module parses and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from graphtape.cli import render
from graphtape.cli.base import (
    CliError,
    app,
    duration_option,
    echo_json,
    handle_errors,
    open_tape,
    status_option,
    stdout,
)

if TYPE_CHECKING:
    from graphtape.runtime.archive import ArchiveResult


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover - the loop returns


@app.command("archive")
def archive_cmd(
    ctx: typer.Context,
    older_than: str | None = typer.Option(
        None,
        "--older-than",
        "--archive-after",
        help="Threads whose runs all ended longer ago than this: 30d, 12h.",
        show_default=False,
    ),
    to: str | None = typer.Option(
        None,
        "--to",
        help="A directory, or an fsspec URL (s3://bucket/path) with graphtape[archive].",
        show_default=False,
    ),
    status: str | None = typer.Option(
        None,
        "--status",
        help="Only threads whose runs all have these statuses, comma-separated (e.g. finished).",
        show_default=False,
    ),
    expire_after: str | None = typer.Option(
        None,
        "--expire-after",
        "--delete-archives-after",
        help="Also delete the archives this store made longer ago than this (e.g. 365d): files and index entries.",
        show_default=False,
    ),
    keep_interrupted_for: str | None = typer.Option(
        None,
        "--keep-interrupted-for",
        help="Keep threads paused at an interrupt this long (e.g. 90d), even when older than --older-than.",
        show_default=False,
    ),
    policy: bool = typer.Option(
        False, "--policy", help="Run as a retention policy (for cron): report what it did, with --metrics-file."
    ),
    policy_file: Path | None = typer.Option(
        None,
        "--policy-file",
        help="Read the policy from a JSON or TOML file (archive_after, to, ...); options given here win. "
        "Implies --policy.",
        show_default=False,
    ),
    metrics_file: Path | None = typer.Option(
        None,
        "--metrics-file",
        help="Write the policy run's metrics here (Prometheus text, for node_exporter). Implies --policy.",
        show_default=False,
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be archived; write and delete nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Move quiet threads (runs, tape, checkpoints) to compressed files, verified before they leave the store."""
    from graphtape.runtime.archive import ArchiveResult, archive
    from graphtape.runtime.archive_policy import Policy, read_policy, run_policy, write_metrics_file

    with handle_errors():
        seconds = duration_option("--older-than", older_than)
        expire = duration_option("--expire-after", expire_after)
        keep = duration_option("--keep-interrupted-for", keep_interrupted_for)
        statuses = status_option(status, "finished")
        as_policy = policy or policy_file is not None or metrics_file is not None
        rules = None
        if policy_file is not None:
            given = read_policy(policy_file)
            rules = Policy(
                archive_after=seconds if seconds is not None else given.archive_after,
                to=to or given.to,
                delete_archives_after=expire if expire is not None else given.delete_archives_after,
                keep_interrupted_for=keep if keep is not None else given.keep_interrupted_for,
                statuses=tuple(statuses) if statuses else given.statuses,
            )
        else:
            if seconds is None:
                raise CliError("give --older-than (e.g. 30d): threads quiet for longer go to cold storage")
            if not to:
                raise CliError("give --to: the directory or URL the archives go to")
            if as_policy:
                rules = Policy(seconds, to, expire, keep, tuple(statuses) if statuses else None)
        with open_tape(ctx) as tape:
            if rules is not None:
                report = run_policy(tape, rules, dry_run=dry_run)
                result = ArchiveResult(report.dry_run, report.archived, report.kept, report.bytes_freed, report.expired)
                dest = rules.to
                expiring = rules.delete_archives_after is not None
            else:
                assert seconds is not None and to is not None
                result = archive(
                    tape,
                    older_than=seconds,
                    to=to,
                    statuses=statuses,
                    dry_run=dry_run,
                    expire_after=expire,
                    keep_interrupted_for=keep,
                )
                dest, expiring = to, expire is not None
            url = tape.url
        if rules is not None and metrics_file is not None and not dry_run:
            write_metrics_file(report, metrics_file)
    if as_json:
        echo_json(report.to_dict() if rules is not None else result.to_dict())
        return
    _print_result(result, url, dest, expiring)
    if rules is not None:
        stdout().print(
            f"the store's index now names {report.archived_threads} archive(s), {_fmt_bytes(report.archive_bytes)}"
            f" (policy run took {report.finished_at - report.started_at:.1f}s)",
            soft_wrap=True,
        )


def _print_result(result: ArchiveResult, url: str, to: str, expiring: bool) -> None:
    console = stdout()
    for t in result.threads:
        runs = f"{len(t.run_ids)} run(s)" if t.run_ids else "checkpoints only"
        size = _fmt_bytes(t.size) + (f" -> {_fmt_bytes(t.compressed)}" if t.compressed is not None else "")
        console.print(f"  {render.short_thread(t.thread_id)}  {runs}  {size}  {t.file}", soft_wrap=True)
    for thread, why in result.skipped:
        console.print(f"  kept {render.short_thread(thread)}: {why}", style="dim", soft_wrap=True)
    for e in result.expired:
        console.print(f"  {'would delete' if result.dry_run else 'deleted'} expired archive {e.file}", soft_wrap=True)
    total = sum(t.size for t in result.threads)
    expired = f" and {len(result.expired)} expired archive(s)" if expiring else ""
    if result.dry_run:
        console.print(
            f"dry run: would archive {len(result.threads)} thread(s), {_fmt_bytes(total)} of tape, "
            f"from {url} to {to}{expired.replace(' and', ', delete')}; nothing was written or deleted",
            soft_wrap=True,
        )
        return
    freed = f", {_fmt_bytes(result.bytes_freed)} freed" if result.bytes_freed is not None else ""
    deleted = expired.replace(" and", "; deleted")
    console.print(f"archived {len(result.threads)} thread(s) from {url} to {to}{freed}{deleted}", soft_wrap=True)


@app.command("restore")
def restore_cmd(
    ctx: typer.Context,
    thread_or_file: str = typer.Argument(..., help="An archive file, or a thread id whose archive is in --from."),
    from_: str | None = typer.Option(
        None, "--from", help="Where the archives are (as given to --to).", show_default=False
    ),
    into: str | None = typer.Option(
        None,
        "--into",
        help="The store to restore into, created if needed (default: --url, $GRAPHTAPE_URL or .graphtape/tape.db).",
        show_default=False,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Bring an archived thread back, whole: it resumes, replays and forks like before (the store is created
    if needed)."""
    from graphtape.cli.new_store import new_store_removed_on_error

    url = into or (ctx.obj or {}).get("url")
    with handle_errors():
        # a store that does not exist yet is created, and removed again if the restore fails
        with new_store_removed_on_error(url), open_tape(ctx, create=True, url=url) as tape:
            result = tape.restore(thread_or_file, from_=from_)
            url = tape.url
    if as_json:
        echo_json(result.to_dict())
        return
    stdout().print(
        f"restored thread {result.thread_id} ({len(result.run_ids)} run(s), {result.checkpoints} checkpoint(s)) "
        f"from {result.file} into {url}",
        soft_wrap=True,
    )


def print_archived(ctx: typer.Context, *, thread: str | None, as_json: bool) -> None:
    """``graphtape runs --archived``: the store's index of archived threads, newest first."""
    import datetime

    with handle_errors():
        with open_tape(ctx) as tape:
            entries = tape.store.archived_threads(thread)
            url = tape.url
    if as_json:
        echo_json([e.to_dict() for e in entries])
        return
    console = stdout()
    if not entries:
        console.print(f"no archived threads{' named ' + repr(thread) if thread else ''} in {url}")
        return
    for e in entries:
        when = datetime.datetime.fromtimestamp(e.archived_at, datetime.UTC).strftime("%Y-%m-%d %H:%M")
        console.print(
            f"{render.short_thread(e.thread_id)}  {e.runs} run(s)  {_fmt_bytes(e.size)}  {when}  {e.file}",
            soft_wrap=True,
        )
    console.print("bring one back with `graphtape restore THREAD`", style="dim")
