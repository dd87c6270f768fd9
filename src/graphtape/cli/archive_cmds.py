"""CLI commands that move threads to cold storage and back: ``archive`` and ``restore``.

Registered on the app of :mod:`graphtape.cli.base` when imported (``graphtape.cli.app`` imports it).
The work is :mod:`graphtape.runtime.archive`'s; this module parses and prints.
"""

from __future__ import annotations

import typer

from graphtape.cli import render
from graphtape.cli.base import CliError, app, echo_json, handle_errors, open_tape, stdout


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
    older_than: str = typer.Option(
        ..., "--older-than", help="Threads whose runs all ended longer ago than this: 30d, 12h.", show_default=False
    ),
    to: str = typer.Option(
        ...,
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
        help="Also delete the archives this store made longer ago than this (e.g. 365d): files and index entries.",
        show_default=False,
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be archived; write and delete nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Move quiet threads (runs, tape, checkpoints) to compressed files, verified before they leave the store."""
    from graphtape.runtime.retention import parse_duration

    with handle_errors():
        try:
            seconds = parse_duration(older_than)
        except ValueError as exc:
            raise CliError(f"--older-than: {exc}") from None
        expire = None
        if expire_after is not None:
            try:
                expire = parse_duration(expire_after)
            except ValueError as exc:
                raise CliError(f"--expire-after: {exc}") from None
        statuses = None
        if status is not None:
            statuses = [s.strip() for s in status.split(",") if s.strip()]
            if not statuses:
                raise CliError("--status names no status; e.g. --status finished")
        with open_tape(ctx) as tape:
            result = tape.archive(older_than=seconds, to=to, status=statuses, dry_run=dry_run, expire_after=expire)
            url = tape.url
    if as_json:
        echo_json(result.to_dict())
        return
    console = stdout()
    for t in result.threads:
        runs = f"{len(t.run_ids)} run(s)"
        size = _fmt_bytes(t.size) + (f" -> {_fmt_bytes(t.compressed)}" if t.compressed is not None else "")
        console.print(f"  {render.short_thread(t.thread_id)}  {runs}  {size}  {t.file}", soft_wrap=True)
    for thread, why in result.skipped:
        console.print(f"  kept {render.short_thread(thread)}: {why}", style="dim", soft_wrap=True)
    for e in result.expired:
        console.print(f"  {'would delete' if result.dry_run else 'deleted'} expired archive {e.file}", soft_wrap=True)
    total = sum(t.size for t in result.threads)
    expired = f" and {len(result.expired)} expired archive(s)" if expire_after is not None else ""
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
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Bring an archived thread back, whole: it resumes, replays and forks like before."""
    with handle_errors():
        with open_tape(ctx) as tape:
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
