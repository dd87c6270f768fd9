"""The Studio API on uvicorn at 127.0.0.1, driven by the real ``langgraph-sdk`` client (sync and async) and httpx.

The SDK is the client people already use against LangGraph's server; these
tests run its common calls end to end against ``create_app`` on a SQLite
tape: assistants and schemas, threads, streamed runs, interrupts and resumes,
history, forks through a state update, background runs with join and cancel,
and typed 4xx errors.
"""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
langgraph_sdk = pytest.importorskip("langgraph_sdk")

import httpx  # noqa: E402
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError  # noqa: E402

import graphtape  # noqa: E402
from graphtape.server.studio import create_app  # noqa: E402
from graphtape.server.studio.assistants import assistant_id_for  # noqa: E402
from tests.live_server import serve_app, without_sdk_keys  # noqa: E402
from tests.studio_graphs import studio_graphs  # noqa: E402


@pytest.fixture
def studio_tape(tmp_path):
    tape = graphtape.connect(f"sqlite:///{tmp_path}/studio.db")
    yield tape
    tape.close()


@pytest.fixture
def studio_url(studio_tape, monkeypatch):
    """The Studio on a free port of 127.0.0.1, stopped (its runs cancelled) after the test."""
    without_sdk_keys(monkeypatch)
    with serve_app(create_app(studio_tape, studio_graphs(), heartbeat_seconds=0.05), name="studio-uvicorn") as url:
        yield url


async def test_async_client_stream_interrupt_resume_history_fork(studio_url, studio_tape):
    async with langgraph_sdk.get_client(url=studio_url) as client:
        await drive_async(client, studio_tape)


async def drive_async(client, studio_tape) -> None:
    assistants = await client.assistants.search()
    assert {a["graph_id"] for a in assistants} == {"doc", "agent", "slow", "nested"}
    doc = await client.assistants.get(assistant_id_for("doc"))
    assert doc["graph_id"] == "doc"
    graph = await client.assistants.get_graph(assistant_id_for("agent"))
    assert any(e["source"] == "agent" and e.get("conditional") for e in graph["edges"])
    schemas = await client.assistants.get_schemas(assistant_id_for("doc"))
    assert "draft" in schemas["state_schema"]["properties"]

    # stream values and updates of the tool-calling agent
    thread = await client.threads.create(metadata={"who": "sdk"})
    tid = thread["thread_id"]
    parts = [
        p
        async for p in client.runs.stream(
            tid, "agent", input={"messages": [{"role": "user", "content": "hi"}]}, stream_mode=["values", "updates"]
        )
    ]
    assert parts[0].event == "metadata"
    run_id = parts[0].data["run_id"]
    updates = [p.data for p in parts if p.event == "updates"]
    assert [next(iter(u)) for u in updates] == ["agent", "tools", "agent"]
    assert updates[0]["agent"]["messages"][0]["type"] == "ai"
    assert [m["type"] for m in [p.data for p in parts if p.event == "values"][-1]["messages"]] == [
        "human",
        "ai",
        "tool",
        "ai",
    ]
    assert [r.run_id for r in studio_tape.runs(thread_id=tid)] == [run_id]
    assert (await client.runs.get(tid, run_id))["status"] == "success"

    # an interrupt, the state it leaves, a resume with a command
    t2 = (await client.threads.create())["thread_id"]
    out = await client.runs.wait(t2, "doc", input={"topic": "sdk"})
    assert out["__interrupt__"][0]["value"]["question"] == "publish?"
    state = await client.threads.get_state(t2)
    assert state["next"] == ["approve"]
    assert (await client.threads.get(t2))["status"] == "interrupted"
    after_draft = state["checkpoint"]
    resumed = await client.runs.wait(t2, "doc", command={"resume": "yes"})
    assert resumed["final"] == f"{out['draft']} / yes"

    # history, the state at a checkpoint, a fork through update_state, and a run continuing from it
    history = await client.threads.get_history(t2, limit=20)
    assert history[0]["values"]["final"] == resumed["final"]
    assert after_draft["checkpoint_id"] in {h["checkpoint"]["checkpoint_id"] for h in history}
    at = await client.threads.get_state(t2, checkpoint=after_draft)
    assert at["next"] == ["approve"] and "final" not in at["values"]
    forked = await client.threads.update_state(t2, {"draft": "edited"}, as_node="draft", checkpoint=after_draft)
    assert forked["checkpoint"]["checkpoint_id"] != after_draft["checkpoint_id"]
    await client.runs.wait(t2, "doc", input=None)
    again = await client.runs.wait(t2, "doc", command={"resume": "ok"})
    assert again["final"] == "edited / ok"
    assert len(studio_tape.runs(thread_id=t2)) == 4

    with pytest.raises(NotFoundError):
        await client.threads.get("no-such-thread")
    with pytest.raises(UnprocessableEntityError):
        await client.runs.create(t2, "doc", input=None, interrupt_before="nonsense")  # type: ignore[arg-type]


def test_sync_client_background_runs_join_list_cancel_and_threads(studio_url, studio_tape):
    with langgraph_sdk.get_sync_client(url=studio_url) as client:
        drive_sync(client, studio_tape)


def drive_sync(client, studio_tape) -> None:
    tid = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(tid, "doc", input={"topic": "s"}, stream_mode="updates"))
    assert parts[0].event == "metadata"
    assert "__interrupt__" in parts[-1].data
    run = client.runs.create(tid, "doc", command={"resume": "fine"})
    joined = client.runs.join(tid, run["run_id"])
    assert joined["final"].endswith("/ fine")
    assert [r["run_id"] for r in client.runs.list(tid)] == [run["run_id"], parts[0].data["run_id"]]

    slow = client.threads.create()["thread_id"]
    started = client.runs.create(slow, "slow", input={"seconds": 30})
    with pytest.raises(ConflictError):
        client.runs.create(slow, "slow", input={"seconds": 1})
    deadline = time.monotonic() + 10
    while not studio_tape.runs(thread_id=slow):
        assert time.monotonic() < deadline, "the slow run never started"
        time.sleep(0.01)
    client.runs.cancel(slow, started["run_id"], wait=True)
    assert client.runs.get(slow, started["run_id"])["status"] == "interrupted"
    assert studio_tape.runs(thread_id=slow)[0].status == "interrupted"

    made = client.assistants.create("doc", config={"configurable": {"who": "sdk"}}, name="sdk doc")
    assert client.assistants.get(made["assistant_id"])["name"] == "sdk doc"
    t3 = client.threads.create()["thread_id"]
    assert "__interrupt__" in client.runs.wait(t3, made["assistant_id"], input={"topic": "a"})
    assert client.assistants.update(made["assistant_id"], name="renamed")["version"] == 2
    client.assistants.delete(made["assistant_id"])

    found = {t["thread_id"] for t in client.threads.search(limit=50)}
    assert {tid, slow} <= found
    client.threads.delete(slow)
    with pytest.raises(NotFoundError):
        client.threads.get(slow)


def test_viewers_heartbeats_and_a_disconnect_that_does_not_stop_the_run(studio_url, studio_tape):
    with httpx.Client(base_url=studio_url, timeout=20) as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "slow", "input": {"seconds": 0.4}, "stream_mode": "values"}
        with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as first:
            assert first.headers["location"].endswith("/stream")
            # a heartbeat may come first when the run takes longer than one to start (a loaded machine)
            lines = (line for line in first.iter_lines() if line not in (": heartbeat", ""))
            assert [next(lines), next(lines)] == ["id: 1", "event: metadata"]
            run_id = json.loads(next(lines).removeprefix("data: "))["run_id"]
        # the first viewer is gone; a second one joins and sees every event, heartbeats between them
        with http.stream("GET", f"/threads/{tid}/runs/{run_id}/stream") as second:
            seen = list(second.iter_lines())
        events = [line for line in seen if line.startswith("event: ")]
        assert events == ["event: metadata", "event: values", "event: values"]
        assert ": heartbeat" in seen
        assert seen.index(": heartbeat") < len(seen) - 1 - seen[::-1].index("event: values")
        assert http.get(f"/threads/{tid}/runs/{run_id}/join").json() == {"seconds": 0.4, "done": True}
    (recorded,) = studio_tape.runs(thread_id=tid)
    assert recorded.run_id == run_id and recorded.status == "finished"


def test_a_viewer_reconnecting_with_last_event_id_gets_each_missed_event_once(studio_url):
    with httpx.Client(base_url=studio_url, timeout=20) as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "doc", "input": {"topic": "ids"}, "stream_mode": ["updates", "values"]}
        whole = http.post(f"/threads/{tid}/runs/stream", json=body)
        events = [b for b in whole.text.split("\n\n") if b.startswith("id: ")]
        ids = [int(b.split("\n")[0].removeprefix("id: ")) for b in events]
        assert ids == list(range(1, len(ids) + 1)) and len(ids) > 3
        run_id = json.loads(events[0].split("data: ", 1)[1])["run_id"]
        resumed = http.get(f"/threads/{tid}/runs/{run_id}/stream", headers={"Last-Event-ID": "2"})
        assert [b for b in resumed.text.split("\n\n") if b.startswith("id: ")] == events[2:]
        bad = http.get(f"/threads/{tid}/runs/{run_id}/stream", headers={"Last-Event-ID": "x"})
        assert bad.status_code == 400 and "Last-Event-ID" in bad.json()["error"]
