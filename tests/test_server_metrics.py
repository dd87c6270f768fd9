"""The metrics server, served for real: uvicorn on a free localhost port, fetched with urllib.

``graphtape serve`` is also started as a process and stopped again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from graphtape.server import create_app
from tests import graphs
from tests.live_server import free_port, serve_app
from tests.test_stats import parse_exposition

ROOT = Path(__file__).resolve().parents[1]


class Served:
    """An app served by uvicorn in a background thread."""

    def __init__(self, app):
        self._serving = serve_app(app, lifespan="off")
        self.base = ""

    def __enter__(self) -> Served:
        self.base = self._serving.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._serving.__exit__(*exc)

    def get(self, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(f"{self.base}{path}", method=method)
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            with err:
                return err.code, dict(err.headers), err.read()


def test_metrics_and_health_over_http(tape):
    rec = tape.record(graphs.build_linear(), name="linear")
    rec.invoke({"topic": ""}, {"configurable": {"thread_id": "m"}})
    app = create_app(tape, cache_seconds=0)
    assert app.state.tape is tape
    with Served(app) as served:
        status, headers, body = served.get("/metrics")
        assert status == 200
        assert headers["content-type"].startswith("text/plain; version=0.0.4")
        samples = parse_exposition(body.decode())
        assert samples[("graphtape_runs", (("status", "finished"),))] == 1
        assert samples[("graphtape_node_duration_seconds_count", (("node", "write"),))] == 1
        assert samples[("graphtape_write_latency_seconds_count", ())] >= 1

        rec.invoke({"topic": ""}, {"configurable": {"thread_id": "m2"}})
        samples = parse_exposition(served.get("/metrics")[2].decode())
        assert samples[("graphtape_runs", (("status", "finished"),))] == 2

        status, headers, body = served.get("/healthz")
        assert status == 200 and headers["content-type"] == "application/json"
        health = json.loads(body)
        assert health["status"] == "ok" and health["store"] == tape.url and health["version"]

        status, headers, body = served.get("/nope")
        assert status == 404 and headers["content-type"] == "application/json"
        assert json.loads(body) == {"error": "Not Found", "status": 404}
        status, headers, body = served.get("/metrics", method="POST")
        assert status == 405 and json.loads(body)["status"] == 405 and "GET" in headers.get("allow", "")


def test_metrics_are_cached_between_scrapes(tape):
    app = create_app(tape, cache_seconds=3600)
    with Served(app) as served:
        first = served.get("/metrics")[2]
        rec = tape.record(graphs.build_linear(), name="linear")
        rec.invoke({"topic": ""}, {"configurable": {"thread_id": "c"}})
        assert served.get("/metrics")[2] == first


class BrokenStore:
    url = "broken://"

    def list_runs(self, **kw):
        raise ConnectionError("the database went away")


class BrokenTape:
    url = "broken://"
    store = BrokenStore()


def test_errors_are_json():
    with Served(create_app(BrokenTape())) as served:
        status, headers, body = served.get("/healthz")
        assert status == 503 and headers["content-type"] == "application/json"
        data = json.loads(body)
        assert data["status"] == "error" and "the database went away" in data["error"]
        status, headers, body = served.get("/metrics")
        assert status == 500 and headers["content-type"] == "application/json"
        assert "the database went away" in json.loads(body)["error"]


def test_graphtape_serve(tape, store_url, tmp_path):  # tape: the store exists (serve never creates one)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("GRAPHTAPE_URL", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from graphtape.cli import main; main()",
            "--url",
            store_url,
            "serve",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        body = None
        while body is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "graphtape serve did not answer"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                    body = json.loads(resp.read())
            except OSError:
                time.sleep(0.1)
        assert body["status"] == "ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as resp:
            assert 'graphtape_runs{status="finished"} 0' in resp.read().decode()
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert f"on http://127.0.0.1:{port}/metrics" in err


def test_serve_errors(store_url):
    from typer.testing import CliRunner

    from graphtape.cli import app

    result = CliRunner().invoke(
        app, ["--url", store_url, "serve", "--port", "70000"], env={"NO_COLOR": "1", "GRAPHTAPE_URL": None}
    )
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: --port must be between 1 and 65535, not 70000"]
