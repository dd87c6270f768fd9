"""``graphtape serve``: the Studio server in production form (see docs/server-runs.md), or the metrics endpoint.

With graphs to serve (a ``langgraph.json`` in the current directory,
``--config`` or ``--graph``), ``serve`` is ``graphtape dev`` without reload
or browser: ``--workers N`` server processes (uvicorn's multi-process mode
sharing one socket), each with a worker pool executing ``--concurrency K``
runs at once from the store's run queue. Every process builds its app from
the settings the command puts in the environment (:func:`studio_app_from_env`,
an app factory), so they serve the same graphs on the same store. An SQLite
store serves one process: ``--workers`` above 1 is refused.

Without graphs, ``serve`` is the metrics endpoint it always was
(``/metrics``, ``/healthz``; :func:`graphtape.cli.runtime_cmds.serve_cmd`),
so existing deployments keep working.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer

from graphtape.cli.base import CliError, app, check_port, handle_errors, http_address, server_extra
from graphtape.cli.runtime_cmds import serve_cmd as metrics_serve_cmd

__all__ = ["SETTINGS_ENV", "serve_cmd", "studio_app_from_env"]

#: the environment variable the serving processes read their settings from (JSON)
SETTINGS_ENV = "GRAPHTAPE_SERVE_SETTINGS"

# ``serve`` was the metrics command alone; this one replaces it and keeps its behaviour without graphs.
app.registered_commands[:] = [c for c in app.registered_commands if c.name != "serve"]


@app.command("serve")
def serve_cmd(
    ctx: typer.Context,
    config: Path | None = typer.Option(
        None, "--config", help="The langgraph.json to serve. Default: ./langgraph.json when it exists."
    ),
    graph: list[str] = typer.Option([], "--graph", help="Serve a graph: NAME=PATH.py:ATTR or NAME=module:ATTR."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (beyond loopback needs a token)."),
    port: int | None = typer.Option(None, "--port", help="Port to listen on. Default: 8123 (9464 for metrics)."),
    url: str | None = typer.Option(None, "--url", help="Tape store URL (default: the global --url, then the default)."),
    cors_origin: list[str] = typer.Option(
        [], "--cors-origin", help="A browser origin allowed to call the API (loopback origins always are)."
    ),
    allowed_host: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="Another Host name to answer for, e.g. a reverse proxy's (.example.com: and every name under it; *: any).",
    ),
    workers: int = typer.Option(1, "--workers", help="Server processes (PostgreSQL or Redis store for more than 1)."),
    concurrency: int = typer.Option(4, "--concurrency", help="Runs executed at once per process (0: none)."),
    lease_seconds: float = typer.Option(
        15.0, "--lease-seconds", help="How long a dead process's runs stay claimed before another takes them over."
    ),
    stuck_after: float = typer.Option(
        300.0, "--stuck-after", help="Metrics only: seconds without progress that make a thread stuck."
    ),
    size_warning: int = typer.Option(
        1_000_000, "--size-warning", help="Metrics only: bytes above which sizes are reported."
    ),
) -> None:
    """Serve the graphs over the LangGraph API with durable runs in the store (no reload), or,
    with no graphs, /metrics and /healthz for the store."""
    default_config = Path("langgraph.json")
    if config is None and not graph and not default_config.is_file():
        if url:
            ctx.obj = {**(ctx.obj or {}), "url": url}
        metrics_serve_cmd(ctx, host, 9464 if port is None else port, stuck_after, size_warning)
        return
    with handle_errors():
        with server_extra("graphtape serve"):
            import uvicorn

            from graphtape.server.studio.guard import allowed_hosts_setting
            from graphtape.server.studio.project import Project, parse_graph_option, read_project, token_for
        port = check_port(8123 if port is None else port)
        if workers < 1:
            raise CliError(f"--workers must be at least 1, not {workers}")
        if concurrency < 0:
            raise CliError(f"--concurrency must be 0 or more, not {concurrency}")
        if not lease_seconds > 0:
            raise CliError(f"--lease-seconds must be a positive number of seconds, not {lease_seconds}")
        from graphtape.store import resolve_url, sqlite_file

        store_url = resolve_url(url or (ctx.obj or {}).get("url"))
        if workers > 1 and sqlite_file(store_url) is not None:
            raise CliError(f"--workers {workers} needs a PostgreSQL or Redis store: an SQLite store serves one process")
        project = read_project(config or default_config) if config is not None or not graph else Project()
        project.graphs.update(dict(parse_graph_option(option, Path.cwd()) for option in graph))
        token, token_source = token_for(host, os.environ)
        settings = {
            "url": store_url,
            "graphs": project.graphs,
            "env": project.env,
            "root": str(project.root),
            "token": token,
            "cors_origins": list(cors_origin),
            "bind_host": host,
            "allowed_hosts": allowed_hosts_setting(allowed_host, os.environ),
            "concurrency": concurrency,
            "lease_seconds": lease_seconds,
        }
        # loaded once here, so a graph that does not load is one line before any process starts
        project.apply_env()
        project.load_graphs()
        os.environ[SETTINGS_ENV] = json.dumps(settings)
        address = http_address(host, port)
        typer.echo(
            f"graphtape Studio API on {address} (graphs: {', '.join(project.graphs)}; "
            f"{workers} process{'es' if workers > 1 else ''} x {concurrency} runs)"
        )
        if token is not None:
            typer.echo(f"  bearer token ({token_source}): {token}")
            typer.echo(f"  open the UI (the browser keeps the token in a cookie): {address}/?token={token}")
        try:
            uvicorn.run(
                "graphtape.cli.serve_cmds:studio_app_from_env",
                factory=True,
                host=host,
                port=port,
                workers=workers,
                log_level="warning",
                # open streams get 5 s to end on SIGTERM; then the runs executing are handed over
                timeout_graceful_shutdown=5,
            )
        except SystemExit as exc:  # uvicorn exits when it cannot bind
            raise CliError(f"could not serve on {host}:{port} (is the port in use?)") from exc


def studio_app_from_env() -> Any:
    """The Studio app of one serving process, from the settings ``graphtape serve`` put in
    :data:`SETTINGS_ENV` (uvicorn calls it in every worker process)."""
    import graphtape
    from graphtape.server.studio import create_app
    from graphtape.server.studio.project import Project

    raw = os.environ.get(SETTINGS_ENV)
    if not raw:
        raise RuntimeError(f"{SETTINGS_ENV} is not set: start the server with graphtape serve")
    settings = json.loads(raw)
    project = Project(dict(settings["graphs"]), dict(settings["env"]), Path(settings["root"]))
    project.apply_env()
    graphs = project.load_graphs()
    tape = graphtape.connect(settings["url"])
    return create_app(
        tape,
        graphs,
        token=settings.get("token"),
        cors_origins=settings.get("cors_origins") or (),
        bind_host=settings.get("bind_host", "127.0.0.1"),
        allowed_hosts=settings.get("allowed_hosts") or (),
        concurrency=int(settings.get("concurrency", 4)),
        lease_seconds=float(settings.get("lease_seconds", 15.0)),
    )
