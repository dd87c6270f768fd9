"""What every ``graphtape`` command is built on: the Typer app, exit codes, errors and output.

Exit codes: 0 success; 1 the work was done but the result is bad (a replay
diverged or failed, a recorded run failed); 2 graphtape could not do what
was asked (unknown run, unreadable file, graph that does not load, bad
JSON...). Errors are printed as one line, ``error: <message>``, on stderr,
never as a traceback (set ``GRAPHTAPE_DEBUG=1`` to get one for an
unexpected error).

The command modules (``graphtape.cli.*_cmds``) register their commands on
:data:`app` when imported; :mod:`graphtape.cli.app` imports them all and runs
the app. This module imports none of them, so no command module imports its
own importer.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

import graphtape
from graphtape.cli import render_replay
from graphtape.errors import GraphtapeError

app = typer.Typer(
    name="graphtape",
    help="Flight recorder and deterministic replayer for LangGraph agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

EXIT_BAD_RESULT = 1
EXIT_ERROR = 2


class CliError(Exception):
    """A problem with what was asked on the command line (printed as ``error: ...``, exit 2)."""


# ---------------------------------------------------------------------------
# plumbing
# ---------------------------------------------------------------------------


def one_line(message: str) -> str:
    """A message as one line (what ``error:`` prints)."""
    return " ".join(part.strip() for part in str(message).strip().splitlines() if part.strip()) or "failed"


@contextlib.contextmanager
def server_extra(command: str, missing: str = "fastapi") -> Iterator[None]:
    """Around the imports of the server extra: one missing is the one-line error saying how to install it."""
    try:
        yield
    except ImportError as exc:
        raise CliError(f"{command} needs {exc.name or missing}: pip install 'graphtape[server]'") from None


def check_port(port: int) -> int:
    """``--port`` as given, when it is a TCP port; else a CliError."""
    if not 0 < port < 65536:
        raise CliError(f"--port must be between 1 and 65535, not {port}")
    return port


def http_address(host: str, port: int) -> str:
    """The ``http://`` address a server listening on ``host``:``port`` answers at (an IPv6 host in brackets)."""
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def duration_option(option: str, text: str | None) -> float | None:
    """Seconds of a duration option's value (``30d``, ``12h``), None when not given; a bad one is a CliError."""
    from graphtape.runtime.retention import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise CliError(f"{option}: {exc}") from None


def status_option(text: str | None, example: str) -> list[str] | None:
    """The statuses of a comma-separated ``--status`` value, None when not given; one naming none is a CliError."""
    if text is None:
        return None
    statuses = [s.strip() for s in text.split(",") if s.strip()]
    if not statuses:
        raise CliError(f"--status names no status; e.g. --status {example}")
    return statuses


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    """Print ``error: message`` as one line on stderr and exit with ``code``."""
    typer.echo(f"error: {one_line(message)}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def handle_errors() -> Iterator[None]:
    """Turn graphtape and command-line errors into one ``error:`` line and exit code 2."""
    try:
        yield
    except typer.Exit:
        raise
    except (GraphtapeError, CliError) as exc:
        fail(str(exc))


def stdout(*, whole_rows: bool = False) -> Console:
    """The console for results. ``whole_rows``: when the output is piped or redirected (and no
    ``COLUMNS`` is set), rows that a terminal would crop to its width are printed whole."""
    if whole_rows and "COLUMNS" not in os.environ:
        console = Console(highlight=False, markup=False)
        if not console.is_terminal:
            return Console(highlight=False, markup=False, width=100_000)
        return console
    return Console(highlight=False, markup=False)


def stderr() -> Console:
    return Console(stderr=True, highlight=False, markup=False)


def echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


@contextlib.contextmanager
def open_tape(ctx: typer.Context, *, create: bool = False, url: str | None = None) -> Iterator[graphtape.Tape]:
    """The tape at ``--url`` (or ``url``). Only commands that record or import pass ``create=True``:
    the others read, or act on runs that must already be there, so a mistyped URL is an error
    rather than a new empty store (and another application's SQLite file gets no graphtape tables)."""
    from graphtape.store import open_store

    tape = graphtape.Tape(open_store(url or (ctx.obj or {}).get("url"), create=create))
    try:
        yield tape
    finally:
        tape.close()


def parse_json_option(text: str, option: str) -> Any:
    """The JSON value of ``--input``/``--resume``; ``@path`` reads it from a file."""
    source = text
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            source = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CliError(f"{option} file {str(path)!r} not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"{option} file {str(path)!r} is unreadable: {exc}") from None
    try:
        return json.loads(source)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{option} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f'quote it for the shell, e.g. {option} \'{{"question": "hi"}}\''
        ) from None


def progress_bar(console: Console, *, counted: bool = True) -> Progress:
    """A progress bar on ``console`` (stderr), shown only when it is a terminal."""
    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if counted:
        columns += [BarColumn(), MofNCompleteColumn()]
    return Progress(
        *columns,
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def print_replay_result(
    result: Any, as_json: bool, note: str | None = None, reasons: dict[str, int] | None = None
) -> None:
    """A replay's result as a panel (and its divergence) or JSON; exit 1 if it diverged or failed.

    ``reasons``: why recorded calls went unused (``explain.unused_reasons``, read while the tape is open).
    """
    if as_json:
        echo_json({**result.to_dict(), "unused_reasons": reasons or {}})
    else:
        console = stdout()
        console.print(render_replay.replay_panel(result, note, reasons))
        if result.divergence is not None:
            console.print(render_replay.divergence_view(result))
    if result.status in ("diverged", "failed"):
        raise typer.Exit(EXIT_BAD_RESULT)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"graphtape {graphtape.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    url: str | None = typer.Option(
        None,
        "--url",
        help="Tape store URL, e.g. sqlite:///path/to/tape.db. Default: $GRAPHTAPE_URL, else .graphtape/tape.db.",
        show_default=False,
    ),
    version: bool = typer.Option(
        False, "--version", help="Print the graphtape version and exit.", callback=_version_callback, is_eager=True
    ),
) -> None:
    """Flight recorder and deterministic replayer for LangGraph agents."""
    ctx.obj = {"url": url}
