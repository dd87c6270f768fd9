"""``graphtape dev``: the Studio server for the graphs of a ``langgraph.json`` (see docs/server.md)."""

from __future__ import annotations

import os
import webbrowser
from pathlib import Path

import typer

from graphtape.cli.base import CliError, app, handle_errors, open_tape

__all__ = ["dev_cmd"]


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
    cors_origin: list[str] = typer.Option([], "--cors-origin", help="A browser origin allowed to call the API."),
    no_browser: bool = typer.Option(False, "--no-browser", help="Do not open the API page in a browser."),
) -> None:
    """Serve the graphs over the LangGraph API, every run recorded (needs the server extra)."""
    with handle_errors():
        try:
            import uvicorn

            from graphtape.server.studio import create_app
            from graphtape.server.studio.project import Project, parse_graph_option, read_project, token_for
        except ImportError as exc:
            raise CliError(f"graphtape dev needs {exc.name or 'fastapi'}: pip install 'graphtape[server]'") from None
        if not 0 < port < 65536:
            raise CliError(f"--port must be between 1 and 65535, not {port}")
        default_config = Path("langgraph.json")
        if config is not None or not graph or default_config.is_file():
            project = read_project(config or default_config)
        else:
            project = Project()
        for option in graph:
            name, spec = parse_graph_option(option, Path.cwd())
            project.graphs[name] = spec
        project.apply_env()
        graphs = project.load_graphs()
        token, token_source = token_for(host, os.environ)
        with open_tape(ctx, create=True, url=url) as tape:
            app_ = create_app(tape, graphs, token=token, cors_origins=cors_origin)
            address = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
            typer.echo(f"graphtape Studio API on {address} (graphs: {', '.join(graphs)}; store: {tape.url})")
            typer.echo(f"  API reference: {address}/docs   (Ctrl+C to stop)")
            if token is not None:
                typer.echo(f"  bearer token ({token_source}): {token}")
            if not no_browser:
                webbrowser.open(f"{address}/docs")
            try:
                uvicorn.run(app_, host=host, port=port, log_level="warning")
            except SystemExit as exc:  # uvicorn exits when it cannot bind
                raise CliError(f"could not serve on {host}:{port} (is the port in use?)") from exc
