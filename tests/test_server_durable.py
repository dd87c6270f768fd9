"""Durable runs across server processes: two real ``graphtape serve`` processes on one store.

On PostgreSQL and on Redis: a run started on process A is seen, joined and
cancelled through process B (and an assistant made through one is the
other's); a stream cut after its first event is resumed
on the other process with ``Last-Event-ID``; and a process killed with
SIGKILL in the middle of a run has the run finished by the other process
through graphtape's recovery, the model call it had completed not made again
(the fake model counts its calls in a file), every event in the stream once;
a process stopped gracefully hands its run over at once. Leases are 3 s so
that takeovers are quick. SQLite serves one process: a second process on one
SQLite store executes no runs, and a server killed and started again on one
finishes the run it left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

import httpx

import graphtape
from tests.live_server import free_port

ROOT = Path(__file__).resolve().parent.parent
LEASE = "3"


class Server:
    """A ``graphtape serve`` subprocess serving tests/durable_graph.py."""

    def __init__(self, url: str, workdir: Path, concurrency: int = 2):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env["GRAPHTAPE_DURABLE_DIR"] = str(workdir)
        env.pop("GRAPHTAPE_URL", None)
        command = [sys.executable, "-c", "from graphtape.cli import main; main()", "--url", url, "serve"]
        command += ["--graph", "durable=tests.durable_graph:build", "--port", str(self.port)]
        command += ["--lease-seconds", LEASE, "--concurrency", str(concurrency)]
        self.proc = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.client = httpx.Client(base_url=self.base, timeout=30)

    def wait_ready(self) -> Server:
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"graphtape serve exited: {self.proc.communicate()}")
            try:
                if self.client.get("/ok").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "graphtape serve did not answer"
            time.sleep(0.1)

    def start_run(self, topic: str, stream_mode: list[str]) -> tuple[str, str]:
        """A background run of the durable graph on a new thread: (thread id, run id)."""
        tid = self.client.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "durable", "input": {"topic": topic}, "stream_mode": stream_mode}
        return tid, self.client.post(f"/threads/{tid}/runs", json=body).json()["run_id"]

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def shared_url(backend, store_url):
    if backend == "sqlite":
        pytest.skip("an SQLite store serves one process")
    graphtape.connect(store_url).close()  # the store exists before the servers start
    return store_url


@pytest.fixture
def servers(shared_url, tmp_path):
    started: list[Server] = []

    def start(concurrency: int = 2) -> Server:
        server = Server(shared_url, tmp_path, concurrency)
        started.append(server)
        return server.wait_ready()

    yield start
    for server in started:
        server.stop()


def sse_events(lines) -> list[tuple[int, str, dict]]:
    """(id, event, data) of each SSE message among ``lines``."""
    out, fields = [], {}
    for line in lines:
        if not line:
            if "event" in fields:
                out.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value
    return out


def read_stream(server: Server, tid: str, run_id: str, last_event_id: int | None = None, first_only: bool = False):
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    lines = []
    with server.client.stream("GET", f"/threads/{tid}/runs/{run_id}/stream", headers=headers, timeout=60) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            lines.append(line)
            if first_only and line == "" and any(x.startswith("event") for x in lines):
                break
    return sse_events([*lines, ""])


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def wait_for(predicate, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_run_started_on_one_process_is_seen_joined_and_cancelled_from_another(servers, shared_url, tmp_path):
    a, b = servers(), servers()
    tid = a.client.post("/threads", json={}).json()["thread_id"]
    assert b.client.get(f"/threads/{tid}").status_code == 200  # one thread registry
    body = {"assistant_id": "durable", "input": {"topic": "x"}, "stream_mode": ["updates", "values"]}
    run = a.client.post(f"/threads/{tid}/runs", json=body).json()
    seen = b.client.get(f"/threads/{tid}/runs/{run['run_id']}").json()
    assert seen["run_id"] == run["run_id"] and seen["status"] in ("pending", "running")
    wait_for(lambda: "one x" in calls(tmp_path), "the first model call")

    first = read_stream(a, tid, run["run_id"], first_only=True)
    assert [(i, e) for i, e, _ in first] == [(1, "metadata")]
    (tmp_path / "gate-x").touch()
    rest = read_stream(b, tid, run["run_id"], last_event_id=1)  # reconnect to the other process
    whole = read_stream(a, tid, run["run_id"])
    assert whole[:1] == first and whole[1:] == rest
    assert [i for i, _, _ in whole] == list(range(1, len(whole) + 1))
    assert whole[-1][1] == "values" and whole[-1][2]["second"] == "answer to two x"
    joined = b.client.get(f"/threads/{tid}/runs/{run['run_id']}/join").json()
    assert joined == {"topic": "x", "first": "answer to one x", "second": "answer to two x"}
    assert [r["run_id"] for r in b.client.get(f"/threads/{tid}/runs").json()] == [run["run_id"]]

    # cancelled through B, whichever process executes it
    other = a.client.post(f"/threads/{tid}/runs", json={**body, "input": {"topic": "y"}}).json()
    wait_for(lambda: "one y" in calls(tmp_path), "the run to start")
    started = time.monotonic()
    r = b.client.post(f"/threads/{tid}/runs/{other['run_id']}/cancel", params={"wait": True})
    assert r.status_code == 204 and time.monotonic() - started < 5
    assert a.client.get(f"/threads/{tid}/runs/{other['run_id']}").json()["status"] == "interrupted"
    tape = graphtape.connect(shared_url)
    try:
        assert tape.store.get_run(other["run_id"]).status == "interrupted"
    finally:
        tape.close()
    assert calls(tmp_path) == ["one x", "two x", "one y"]

    # an assistant made through A is B's too, and a patch through B is A's
    made = a.client.post("/assistants", json={"graph_id": "durable", "name": "mine", "metadata": {"k": 1}}).json()
    aid = made["assistant_id"]
    assert b.client.get(f"/assistants/{aid}").json()["name"] == "mine"
    patched = b.client.patch(f"/assistants/{aid}", json={"name": "renamed", "metadata": {"j": 2}}).json()
    assert patched["version"] == 2
    seen = a.client.get(f"/assistants/{aid}").json()
    assert seen["name"] == "renamed" and seen["metadata"] == {"k": 1, "j": 2} and seen["version"] == 2
    assert aid in {x["assistant_id"] for x in a.client.post("/assistants/search", json={}).json()}
    assert b.client.delete(f"/assistants/{aid}").status_code == 204
    assert a.client.get(f"/assistants/{aid}").status_code == 404


def test_a_process_killed_mid_run_has_its_run_finished_by_another_without_repeating_calls(
    servers, shared_url, tmp_path, monkeypatch
):
    a = servers()
    tid, run_id = a.start_run("k", ["updates", "values"])
    tape = graphtape.connect(shared_url)
    try:
        # the first call is on the tape: the node now waits for its gate
        wait_for(lambda: bool(tape.store.events(run_id, ["llm_call"])), "the first call on the tape")
        b = servers()
        before = read_stream(b, tid, run_id, first_only=True)
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        (tmp_path / "gate-k").touch()
        events = read_stream(b, tid, run_id)
        assert events[:1] == before
        ids = [i for i, _, _ in events]
        assert ids == list(range(1, len(ids) + 1))  # every event once, in order
        resumed = [d for _, e, d in events if e == "metadata" and d.get("resumed_after_crash")]
        assert len(resumed) == 1 and resumed[0]["attempt"] == 2
        assert events[-1][2] == {"topic": "k", "first": "answer to one k", "second": "answer to two k"}
        assert calls(tmp_path) == ["one k", "two k"]  # the first call was served from the tape
        row = b.client.get(f"/threads/{tid}/runs/{run_id}").json()
        assert row["status"] == "success"
        crashed = tape.store.get_run(run_id)
        assert crashed.status == "crashed"
        recovery = tape.store.get_run(crashed.meta["recovered_by"])
        assert recovery.status == "finished" and recovery.mode == "recover"
        assert recovery.served_calls == 1 and recovery.live_calls == 1
        assert resumed[0]["graphtape_run_id"] == recovery.run_id
        assert_replays_by_its_own_id(tape, run_id, tmp_path, "k", monkeypatch)
    finally:
        tape.close()


def assert_replays_by_its_own_id(tape, run_id: str, tmp_path: Path, topic: str, monkeypatch) -> None:
    """The id the client was given replays (and exports) the whole run, crash and recovery, with no live call;
    the crashed run's row counts the call it made before the crash."""
    from tests.durable_graph import build

    monkeypatch.setenv("GRAPHTAPE_DURABLE_DIR", str(tmp_path))  # the node waits for its gate file there
    crashed = tape.store.get_run(run_id)
    assert crashed.status == "crashed" and crashed.llm_calls == 1 and crashed.tokens == 0
    made = calls(tmp_path)
    result = tape.replay(run_id, build(), mode="strict")
    assert (result.status, result.live, result.divergence) == ("finished", 0, None), result.divergence
    assert result.served == 2 and result.output_matches is True
    assert result.output == {"topic": topic, "first": f"answer to one {topic}", "second": f"answer to two {topic}"}
    assert calls(tmp_path) == made  # no model call
    exported = tmp_path / "run.jsonl"
    tape.export_run(run_id, exported)
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    ids = [line["run_id"] for line in lines if line.get("type") == "run"]
    assert ids == [run_id, crashed.meta["recovered_by"]]


def test_a_process_stopped_gracefully_hands_its_run_over_at_once(servers, shared_url, tmp_path):
    a, b = servers(concurrency=2), servers(concurrency=0)  # B executes nothing until A is gone
    tid, run_id = a.start_run("t", ["values"])
    tape = graphtape.connect(shared_url)
    try:
        wait_for(lambda: bool(tape.store.events(run_id, ["llm_call"])), "the first call on the tape")
        c = servers(concurrency=2)
        a.proc.send_signal(signal.SIGTERM)
        a.proc.wait(timeout=30)
        stopped = time.monotonic()
        (tmp_path / "gate-t").touch()
        events = read_stream(b, tid, run_id)
        assert time.monotonic() - stopped < 10  # released: no lease to wait for
        assert [i for i, _, _ in events] == list(range(1, len(events) + 1))
        assert events[-1][2]["second"] == "answer to two t"
        assert calls(tmp_path) == ["one t", "two t"]
        row = c.client.get(f"/threads/{tid}/runs/{run_id}").json()
        assert row["status"] == "success"
        first = tape.store.get_run(run_id)
        assert first.status == "interrupted" and first.meta["recovered_by"]
        assert tape.store.get_run(first.meta["recovered_by"]).served_calls == 1
    finally:
        tape.close()


def test_sqlite_a_killed_server_started_again_finishes_its_run(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/tape.db"
    graphtape.connect(url).close()
    first = Server(url, tmp_path, 1).wait_ready()
    second = None
    tape = graphtape.connect(url)
    try:
        tid, run_id = first.start_run("s", ["values"])
        wait_for(lambda: bool(tape.store.events(run_id, ["llm_call"])), "the first call on the tape")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)
        (tmp_path / "gate-s").touch()
        second = Server(url, tmp_path, 1).wait_ready()  # the killed one's claim on the file expires
        events = read_stream(second, tid, run_id)
        assert [i for i, _, _ in events] == list(range(1, len(events) + 1))
        assert events[-1][2]["second"] == "answer to two s"
        assert calls(tmp_path) == ["one s", "two s"]
        assert second.client.get(f"/threads/{tid}/runs/{run_id}").json()["status"] == "success"
        assert_replays_by_its_own_id(tape, run_id, tmp_path, "s", monkeypatch)
    finally:
        tape.close()
        first.stop()
        if second is not None:
            second.stop()


async def test_a_second_process_on_one_sqlite_store_executes_no_runs(tmp_path):
    from graphtape.server.studio.workers import SQLITE_WORKERS_LEASE

    url = f"sqlite:///{tmp_path}/tape.db"
    tape = graphtape.connect(url)
    try:
        assert tape.store.acquire_lease(SQLITE_WORKERS_LEASE, "otherhost:1234", 30) is not None
        from graphtape.server.studio import create_app
        from tests.studio_graphs import studio_graphs

        app = create_app(tape, studio_graphs())
        pool = app.state.studio.workers
        pool.start()
        assert pool.refused is not None and "otherhost:1234" in pool.refused and "one process" in pool.refused
        assert pool._dispatcher is None  # the API is served; the runs are left to the other process
    finally:
        tape.close()


def test_serve_refuses_several_processes_on_sqlite(tmp_path):
    from typer.testing import CliRunner

    from graphtape.cli import app

    args = ["--url", f"sqlite:///{tmp_path}/t.db", "serve", "--graph", "d=tests.durable_graph:build", "--workers", "2"]
    result = CliRunner().invoke(app, args, env={"NO_COLOR": "1", "GRAPHTAPE_URL": None})
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: --workers 2 needs a PostgreSQL or Redis store: an SQLite store serves one process"
    ]


def test_two_processes_racing_runs_on_a_new_thread_answer_409_never_a_database_error(
    backend, servers, shared_url, tmp_path
):
    """Two runs started at once on one new thread through two processes: one runs, the other is
    refused with 409 (``reject``) or queued behind it (``enqueue``); never a 400 from a thread row
    written twice, and no store URL in any answer."""
    import concurrent.futures
    import threading

    a, b = servers(concurrency=1), servers(concurrency=1)
    answers: list[tuple[int, str]] = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for i in range(25):
            strategy = "reject" if i < 20 else "enqueue"  # then both are queued, one after the other
            tid = a.client.post("/threads", json={}).json()["thread_id"]
            body = {"assistant_id": "durable", "input": {"topic": f"race{i}"}, "multitask_strategy": strategy}
            barrier = threading.Barrier(2)

            def post(server: Server, tid: str = tid, body: dict = body, barrier: threading.Barrier = barrier):
                barrier.wait()
                return server.client.post(f"/threads/{tid}/runs", json=body)

            pair = [f.result() for f in [pool.submit(post, a), pool.submit(post, b)]]
            answers += [(r.status_code, r.text) for r in pair]
            expected = [200, 409] if strategy == "reject" else [200, 200]
            assert sorted(r.status_code for r in pair) == expected, [(r.status_code, r.text) for r in pair]
            (tmp_path / f"gate-race{i}").touch()
    secret_part = shared_url.partition("://")[2].partition("?")[0]
    assert not [text for _, text in answers if secret_part in text]
