"""``graphtape dev`` reloads a graph when its file (or ``langgraph.json``) changes, without losing runs.

In process: a run started before an edit finishes on the old graph while the
next run uses the new one; a broken edit keeps the old graph and the
assistant's metadata says why; a graph added to ``langgraph.json`` is served.
For real: ``graphtape dev`` in a subprocess, its graph file edited while it
serves, watched by watchfiles.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("watchfiles")

import httpx

import graphtape
from graphtape.server.studio import create_app
from graphtape.server.studio.project import Project, read_project
from graphtape.server.studio.reload import GraphReloader
from tests.app_client import app_client
from tests.live_server import free_port, interrupt

GRAPH = """
import asyncio
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    delay: float
    out: str


async def answer(state: State) -> dict:
    await asyncio.sleep(state.get("delay") or 0)
    return {{"out": {version!r}}}


builder = StateGraph(State)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile()
"""


def write_graph(path: Path, version: str) -> None:
    path.write_text(GRAPH.format(version=version), encoding="utf-8")


def graph_file(tmp_path: Path) -> Path:
    # a module name of its own: the loader registers the file in sys.modules under its stem
    return tmp_path / f"reload_graph_{uuid.uuid4().hex[:8]}.py"


@pytest.fixture
def sqlite_tape(tmp_path):
    with graphtape.connect(f"sqlite:///{tmp_path / 'tape.db'}") as tape:
        yield tape


def reloading(tape: graphtape.Tape, project: Project, config: Path | None = None):
    """The Studio serving ``project``'s graphs, its reloader, and the list the reloader's lines go to."""
    app = create_app(tape, project.load_graphs())
    lines: list[str] = []
    reloader = GraphReloader(project, app.state.studio.assistants, config=config, echo=lines.append)
    return app, reloader, lines


async def reload(reloader: GraphReloader, *paths: Path) -> None:
    done = await asyncio.to_thread(reloader.reload, {os.path.realpath(p) for p in paths})
    reloader.apply(done)


async def wait_run(client: httpx.AsyncClient, assistant: str, delay: float = 0) -> str:
    r = await client.post("/runs/wait", json={"assistant_id": assistant, "input": {"delay": delay}})
    assert r.status_code == 200, r.text
    return str(r.json()["out"])


async def test_a_run_in_progress_finishes_on_the_old_graph_and_the_next_uses_the_new(sqlite_tape, tmp_path):
    file = graph_file(tmp_path)
    write_graph(file, "v1")
    project = Project({"g": f"{file}:graph"}, root=tmp_path)
    app, reloader, lines = reloading(sqlite_tape, project)
    assert set(reloader.files()) == {os.path.realpath(file)}
    async with app_client(app) as client:
        thread = (await client.post("/threads", json={})).json()["thread_id"]
        started = await client.post(f"/threads/{thread}/runs", json={"assistant_id": "g", "input": {"delay": 0.5}})
        assert started.status_code == 200, started.text
        await asyncio.sleep(0.1)  # the run is inside its node, on the v1 graph

        write_graph(file, "v2")
        await reload(reloader, file)
        assert lines == ["reloaded graph 'g': new runs use the edited code"]
        joined = await client.get(f"/threads/{thread}/runs/{started.json()['run_id']}/join")
        assert joined.json()["out"] == "v1"
        assert await wait_run(client, "g") == "v2"

        # a broken edit: the v2 graph stays, one line and the assistant's metadata say why
        file.write_text("def broken(:\n", encoding="utf-8")
        await reload(reloader, file)
        assert len(lines) == 2 and lines[1].startswith("kept the previous 'g': graph 'g': importing ")
        assert "SyntaxError" in lines[1] and "\n" not in lines[1]
        meta = (await client.get("/assistants/g")).json()["metadata"]
        assert "SyntaxError" in meta["load_error"]
        assert await wait_run(client, "g") == "v2"

        write_graph(file, "v3")
        await reload(reloader, file)
        assert "load_error" not in (await client.get("/assistants/g")).json()["metadata"]
        assert await wait_run(client, "g") == "v3"
    # every run, on whichever graph, is on the tape
    assert [r.status for r in sqlite_tape.runs()] == ["finished"] * 4


async def test_assistants_made_over_http_follow_their_graph(sqlite_tape, tmp_path):
    file = graph_file(tmp_path)
    write_graph(file, "v1")
    project = Project({"g": f"{file}:graph"}, root=tmp_path)
    app, reloader, _ = reloading(sqlite_tape, project)
    async with app_client(app) as client:
        made = (await client.post("/assistants", json={"graph_id": "g", "name": "mine"})).json()
        write_graph(file, "v2")
        await reload(reloader, file)
        assert await wait_run(client, made["assistant_id"]) == "v2"
        assert (await client.get(f"/assistants/{made['assistant_id']}")).json()["name"] == "mine"


async def test_langgraph_json_edits_add_graphs_and_bad_json_changes_nothing(sqlite_tape, tmp_path):
    first, second = graph_file(tmp_path), graph_file(tmp_path)
    write_graph(first, "first")
    write_graph(second, "second")
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"a": f"./{first.name}:graph"}}), encoding="utf-8")
    project = read_project(config)
    app, reloader, lines = reloading(sqlite_tape, project, config)
    assert set(reloader.files()) == {os.path.realpath(first), os.path.realpath(config)}
    async with app_client(app) as client:
        config.write_text("{nope", encoding="utf-8")
        await reload(reloader, config)
        assert len(lines) == 1 and "langgraph.json not reloaded" in lines[0] and "cannot read" in lines[0]

        graphs = {"a": f"./{first.name}:graph", "b": f"./{second.name}:graph"}
        config.write_text(json.dumps({"graphs": graphs}), encoding="utf-8")
        await reload(reloader, config)
        assert lines[1:] == ["added graph 'b': new runs use the edited code"]  # 'a' did not change
        assert await wait_run(client, "b") == "second" and await wait_run(client, "a") == "first"
        assert os.path.realpath(second) in reloader.files()

        config.write_text(json.dumps({"graphs": {"b": f"./{second.name}:graph"}}), encoding="utf-8")
        await reload(reloader, config)
        assert "graph 'a' left langgraph.json" in lines[-1]
        assert await wait_run(client, "a") == "first"


# -- for real: graphtape dev in a subprocess, watching with watchfiles ----------------------------


class DevServer:
    """``graphtape dev`` serving one graph file; its stdout lines arrive on a queue."""

    def __init__(self, tmp_path: Path, file: Path, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-c", "from graphtape.cli import main; main()", "--url", f"sqlite:///{tmp_path}/dev.db"]
        cmd += ["dev", "--graph", f"g={file}:graph", "--port", str(self.port), "--no-browser", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{self.url}/ok", timeout=5)
                break
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("graphtape dev did not answer: " + self._stderr()) from None
                time.sleep(0.05)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _stderr(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.stderr.read() if self.proc.stderr else ""

    def next_line(self, timeout: float) -> str | None:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return None
        self.seen.append(line)
        return line

    def edit_until(self, write: Callable[[], None], startswith: str, timeout: float = 30) -> str:
        """Write the file (again each second: the watcher may start after the first write) until a line says so."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            write()
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                line = self.next_line(0.1)
                if line is not None and line.startswith(startswith):
                    return line
        raise AssertionError(f"no line starting {startswith!r}; printed: {self.seen}")

    def run(self) -> str:
        r = httpx.post(f"{self.url}/runs/wait", json={"assistant_id": "g", "input": {}}, timeout=30)
        assert r.status_code == 200, r.text
        return str(r.json()["out"])

    def stop(self) -> None:
        interrupt(self.proc)


def test_graphtape_dev_reloads_an_edited_graph_file(tmp_path):
    file = graph_file(tmp_path)
    write_graph(file, "v1")
    server = DevServer(tmp_path, file)
    try:
        assert server.run() == "v1"
        line = server.edit_until(lambda: write_graph(file, "v2"), "reloaded graph 'g'")
        assert line == "reloaded graph 'g': new runs use the edited code"
        assert server.run() == "v2"
        line = server.edit_until(lambda: file.write_text("x = 1 / 0\n", encoding="utf-8"), "kept the previous 'g'")
        assert "ZeroDivisionError" in line
        assert server.run() == "v2"
        meta = httpx.get(f"{server.url}/assistants/g", timeout=10).json()["metadata"]
        assert "ZeroDivisionError" in meta["load_error"]
    finally:
        server.stop()
    assert server.proc.returncode == 0
    assert any(line.startswith("  reloading graphs when these change: " + file.name) for line in server.seen)


def test_no_reload_keeps_the_graph_it_started_with(tmp_path):
    file = graph_file(tmp_path)
    write_graph(file, "v1")
    server = DevServer(tmp_path, file, "--no-reload")
    try:
        write_graph(file, "v2")
        time.sleep(1.0)  # longer than the watcher's debounce would have waited
        assert server.run() == "v1"
        while server.next_line(0.2) is not None:
            pass
        assert not any(w in line for line in server.seen for w in ("reloading graphs", "reloaded")), server.seen
    finally:
        server.stop()


async def test_a_module_spec_is_imported_afresh_and_a_failure_keeps_the_module(sqlite_tape, tmp_path, monkeypatch):
    name = f"reload_mod_{uuid.uuid4().hex[:8]}"
    file = tmp_path / f"{name}.py"
    write_graph(file, "m1")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    project = Project({"m": f"{name}:graph"}, root=tmp_path)
    app, reloader, lines = reloading(sqlite_tape, project)
    assert set(reloader.files()) == {os.path.realpath(file)}
    first = sys.modules[name]
    async with app_client(app) as client:
        file.write_text("raise RuntimeError('half-written')\n", encoding="utf-8")
        await reload(reloader, file)
        assert "RuntimeError: half-written" in lines[-1] and sys.modules[name] is first
        write_graph(file, "m2")
        await reload(reloader, file)
        assert lines[-1].startswith("reloaded graph 'm'") and sys.modules[name] is not first
        assert await wait_run(client, "m") == "m2"
    sys.modules.pop(name, None)


async def test_a_watcher_that_fails_says_so_in_one_line_and_serving_goes_on(sqlite_tape, tmp_path):
    folder = tmp_path / "gone"
    folder.mkdir()
    file = graph_file(folder)
    write_graph(file, "v1")
    project = Project({"g": f"{file}:graph"}, root=folder)
    _, reloader, lines = reloading(sqlite_tape, project)
    file.unlink()
    folder.rmdir()  # nothing left to watch
    await asyncio.wait_for(reloader.watch(), timeout=10)
    assert len(lines) == 1 and lines[0].startswith("graphs are no longer reloaded (") and "restart" in lines[0]
