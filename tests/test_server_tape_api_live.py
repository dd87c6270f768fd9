"""The tape API on a real uvicorn server at 127.0.0.1: a replay followed live, the viewer reconnecting.

A background replay answers 202 with its new run's id; a viewer follows
``/graphtape/runs/{id}/stream`` while the replay executes, drops the
connection mid-run and comes back with ``Last-Event-ID``: it gets every event
exactly once, in order, up to ``run_finished``.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx

from graphtape.server.studio import create_app
from tests.live_server import serve_app
from tests.studio_graphs import studio_graphs


@pytest.fixture
def server_url(tape):
    with serve_app(create_app(tape, studio_graphs(), heartbeat_seconds=0.2), name="tape-api-uvicorn") as url:
        yield url


def read_events(response: httpx.Response, stop_after: int | None = None) -> tuple[list[dict], int]:
    """The events of an SSE response (up to ``stop_after`` of them) and how many heartbeats came."""
    got: list[dict] = []
    heartbeats = 0
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            heartbeats += 1
        elif line:
            key, _, value = line.partition(": ")
            fields[key] = value
        elif fields:
            got.append({"id": int(fields["id"]), "event": fields["event"], "data": json.loads(fields["data"])})
            fields = {}
            if stop_after is not None and len(got) >= stop_after:
                break
    return got, heartbeats


def test_a_replay_followed_live_with_a_reconnect(server_url, tape):
    with httpx.Client(base_url=server_url, timeout=30) as client:
        tid = client.post("/threads", json={}).json()["thread_id"]
        r = client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "slow", "input": {"seconds": 1.5}})
        assert r.status_code == 200 and r.json()["done"] is True
        (recorded,) = tape.runs(thread_id=tid)

        r = client.post(f"/graphtape/runs/{recorded.run_id}/replay", json={"mode": "strict"})
        assert r.status_code == 202, r.text
        replay_id = r.json()["run_id"]
        with client.stream("GET", f"/graphtape/runs/{replay_id}/stream") as first:
            assert first.headers["content-type"].startswith("text/event-stream")
            before, _ = read_events(first, stop_after=2)
        assert tape.run(replay_id).status == "running"  # the viewer left mid-run; the run goes on
        last_id = before[-1]["id"]
        headers = {"Last-Event-ID": str(last_id)}
        with client.stream("GET", f"/graphtape/runs/{replay_id}/stream", headers=headers) as second:
            after, heartbeats = read_events(second)
    seqs = [e["id"] for e in before + after]
    assert seqs == list(range(len(seqs))), seqs  # every event once, in order, none missed
    assert [e["data"]["seq"] for e in before + after] == seqs
    assert before[0]["event"] == "run_started" and after[-1]["event"] == "run_finished"
    assert after[-1]["data"]["data"]["status"] == "finished"
    assert heartbeats >= 1  # the node slept 1.5 s without an event
    kinds = [e["event"] for e in after]
    assert "task_finished" in kinds and tape.run(replay_id).replay_of == recorded.run_id
