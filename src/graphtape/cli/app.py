"""The ``graphtape`` command (``graphtape --help``; see ``docs/cli.md``): the app with every command on it.

The commands live in command modules that register on the app of
:mod:`graphtape.cli.base`; this module imports them (nothing imports this
module back) and :func:`main` runs the result. The order of the imports is
the order of the commands in ``graphtape --help``: tape_cmds (runs, show,
run, replay, export, import), runtime_cmds (prune, stats, recover, serve), archive_cmds
(archive, restore), history_cmds (history, state, diff), inject_cmds (fork, override,
invalidate-from, resume, debug), test_cmds (test, tapes).

Exit codes and the one-line errors are described in :mod:`graphtape.cli.base`.
"""

from __future__ import annotations

import os
import sys

import typer

# isort: off
from graphtape.cli import tape_cmds, runtime_cmds, archive_cmds, history_cmds, inject_cmds, test_cmds, studio_cmds  # noqa: F401
from graphtape.cli import serve_cmds  # noqa: F401  (replaces runtime_cmds' serve)

# isort: on
from graphtape.cli.base import EXIT_BAD_RESULT, EXIT_ERROR, CliError, app, one_line
from graphtape.errors import GraphtapeError

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit with its code (the ``graphtape`` console script)."""
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="graphtape", standalone_mode=False)
    except typer.Exit as exc:  # pragma: no cover - non-standalone mode returns the code instead
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(EXIT_BAD_RESULT)
    except KeyboardInterrupt:
        typer.echo("error: stopped by Ctrl-C", err=True)
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors: bad option, missing argument
        # one line, like every other error, with where to look next
        ctx = getattr(exc, "ctx", None)
        where = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        typer.echo(f"error: {one_line(message)}{where}", err=True)
        sys.exit(getattr(exc, "exit_code", EXIT_ERROR))
    except (GraphtapeError, CliError) as exc:  # pragma: no cover - commands handle these
        typer.echo(f"error: {one_line(str(exc))}", err=True)
        sys.exit(EXIT_ERROR)
    except Exception as exc:
        if os.environ.get("GRAPHTAPE_DEBUG"):
            raise
        typer.echo(
            f"error: unexpected {type(exc).__name__}: {one_line(str(exc))} "
            "(this is a graphtape bug; set GRAPHTAPE_DEBUG=1 to see the traceback)",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
