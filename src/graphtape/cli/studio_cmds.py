"""``graphtape dev``: the Studio server for the graphs of a ``langgraph.json`` (see docs/server.md)."""

from __future__ import annotations

import asyncio
import os
import sys
import webbrowser
from pathlib import Path
from typing import Any

import typer

from graphtape.cli.base import CliError, app, check_port, handle_errors, http_address, open_tape, server_extra

__all__ = ["dev_cmd", "has_display"]


@app.command("dev")
def dev_cmd(
    ctx: typer.Context,
    config: Path | None = typer.Option(
        None, "--config", help="The langgraph.json to read. Default: ./langgraph.json (optional with --graph)."
    ),
    graph: list[str] = typer.Option([], "--graph", help="Serve a graph: NAME=PATH.py:ATTR or NAME=module:ATTR."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (beyond loopback needs a token)."),
    port: int = typer.Option(2024, "--port", help="Port to listen on."),
    url: str | None = typer.Option(None, "--url", help="Tape store URL (default: the global --url, then the default)."),
    cors_origin: list[str] = typer.Option(
        [], "--cors-origin", help="A browser origin allowed to call the API (loopback origins always are)."
    ),
    allowed_host: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="Another Host name to answer for, e.g. a reverse proxy's (.example.com: and every name under it; *: any).",
    ),
    no_browser: bool = typer.Option(
        False, "--no-browser", help="Do not open the API page in a browser (none opens without a display)."
    ),
    no_reload: bool = typer.Option(
        False, "--no-reload", help="Do not reload the graphs when their files or the langgraph.json change."
    ),
) -> None:
    """Serve the graphs over the LangGraph API, every run recorded (needs the server extra).

    Edits to the graphs' files (or to langgraph.json) reload them in place: runs in progress finish
    on the graph they started with, new runs use the edited one.
    """
    with handle_errors():
        with server_extra("graphtape dev"):
            import uvicorn

            from graphtape.server.studio import create_app
            from graphtape.server.studio.guard import allowed_hosts_setting
            from graphtape.server.studio.project import Project, parse_graph_option, read_project, token_for
            from graphtape.server.studio.reload import GraphReloader
        check_port(port)
        default_config = Path("langgraph.json")
        config_path: Path | None = None
        if config is not None or not graph or default_config.is_file():
            config_path = config or default_config
            project = read_project(config_path)
        else:
            project = Project()
        overrides = dict(parse_graph_option(option, Path.cwd()) for option in graph)
        project.graphs.update(overrides)
        project.apply_env()
        graphs = project.load_graphs()
        token, token_source = token_for(host, os.environ)
        with open_tape(ctx, create=True, url=url) as tape:
            app_ = create_app(
                tape,
                graphs,
                token=token,
                cors_origins=cors_origin,
                bind_host=host,
                allowed_hosts=allowed_hosts_setting(allowed_host, os.environ),
            )
            address = http_address(host, port)
            typer.echo(f"graphtape Studio API on {address} (graphs: {', '.join(graphs)}; store: {tape.url})")
            typer.echo(f"  API reference: {address}/docs   (Ctrl+C to stop)")
            if token is not None:
                typer.echo(f"  bearer token ({token_source}): {token}")
                typer.echo(f"  open the UI (the browser keeps the token in a cookie): {address}/?token={token}")
            reloader = None
            if not no_reload:
                reloader = GraphReloader(
                    project, app_.state.studio.assistants, config=config_path, overrides=overrides, echo=typer.echo
                )
                watched = _names(reloader.files())
                if watched:
                    typer.echo(f"  reloading graphs when these change: {', '.join(watched)}")
                else:
                    typer.echo("  no graph file found to watch: graphs are not reloaded")
            if not no_browser and has_display():
                webbrowser.open(f"{address}/docs" + (f"?token={token}" if token is not None else ""))
            server = uvicorn.Server(uvicorn.Config(app_, host=host, port=port, log_level="warning"))
            try:
                asyncio.run(_serve(server, reloader))
            except KeyboardInterrupt:
                pass
            except SystemExit as exc:  # uvicorn exits when it cannot bind
                raise CliError(f"could not serve on {host}:{port} (is the port in use?)") from exc


def _names(files: dict[str, set[str]]) -> list[str]:
    return [os.path.basename(f) for f in sorted(files)]


async def _serve(server: Any, reloader: Any) -> None:
    """uvicorn's server and, beside it on the same event loop, the reloader (stopped with the server)."""
    watcher = asyncio.create_task(reloader.watch()) if reloader is not None else None
    try:
        await server.serve()
    finally:
        if watcher is not None:
            reloader.stop()
            try:
                await asyncio.wait_for(watcher, timeout=5)
            except (TimeoutError, asyncio.CancelledError):
                pass


def has_display() -> bool:
    """Whether a browser can open a window here: always on macOS and Windows; on Linux and the other
    Unixes only with an X or Wayland display (else ``webbrowser`` would start a text browser in the terminal)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
