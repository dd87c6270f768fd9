"""The Studio API in process (httpx's ASGI transport), on every store backend.

What a LangGraph API client sees: assistants with their graph and schemas,
threads, streamed and awaited runs recorded on the tape, interrupts and
resumes, state updates that fork, cancel; and every bad request answered with
a JSON body and a 4xx status that says what to fix.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

pytest.importorskip("fastapi")

import httpx

from graphtape.server.studio import create_app
from graphtape.server.studio.assistants import assistant_id_for
from tests.app_client import app_client, assert_error
from tests.studio_graphs import studio_graphs


def parse_sse(text: str) -> list[tuple[str, object]]:
    """(event, data) of each SSE message of a response body."""
    parts = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        parts.append((fields["event"], json.loads(fields["data"])))
    return parts


@pytest.fixture
async def client(tape):
    app = create_app(tape, studio_graphs(), max_body_bytes=64 * 1024)
    async with app_client(app) as c:
        yield c


async def new_thread(client) -> str:
    r = await client.post("/threads", json={})
    assert r.status_code == 200, r.text
    return r.json()["thread_id"]


async def test_ok_info_openapi_and_docs_without_a_cdn(client):
    assert (await client.get("/ok")).json() == {"ok": True}
    info = (await client.get("/info")).json()
    assert info["graphtape"]["graphs"] == ["agent", "doc", "nested", "slow"]
    doc = (await client.get("/openapi.json")).json()
    assert "/threads/{thread_id}/runs/stream" in doc["paths"]
    assert "RunCreate" in doc["components"]["schemas"]
    page = (await client.get("/docs")).text
    assert "openapi.json" in page and "http" not in page.split("<script>")[1]


async def test_assistants_one_per_graph_with_graph_and_schemas(client):
    found = (await client.post("/assistants/search", json={})).json()
    assert {a["graph_id"]: a["assistant_id"] for a in found} == {
        n: assistant_id_for(n) for n in ("doc", "agent", "slow", "nested")
    }
    assert assistant_id_for("doc") == assistant_id_for("doc") != assistant_id_for("agent")
    assert (await client.post("/assistants/search", json={"graph_id": "doc"})).json()[0]["graph_id"] == "doc"
    by_id = (await client.get(f"/assistants/{assistant_id_for('agent')}")).json()
    assert by_id == (await client.get("/assistants/agent")).json()
    graph = (await client.get("/assistants/agent/graph")).json()
    assert {n["id"] for n in graph["nodes"]} >= {"__start__", "agent", "tools", "__end__"}
    assert any(e["source"] == "agent" and e.get("conditional") for e in graph["edges"])
    schemas = (await client.get("/assistants/doc/schemas")).json()
    assert schemas["graph_id"] == "doc"
    assert set(schemas["state_schema"]["properties"]) == {"topic", "draft", "approved", "final"}
    assert set(schemas["input_schema"]["properties"]) == {"topic", "draft", "approved", "final"}
    assert schemas["config_schema"]["type"] == "object"


async def test_stream_a_run_values_and_updates_recorded_on_the_tape(client, tape):
    tid = await new_thread(client)
    body = {
        "assistant_id": "agent",
        "input": {"messages": [{"role": "user", "content": "hi"}]},
        "stream_mode": ["values", "updates"],
    }
    r = await client.post(f"/threads/{tid}/runs/stream", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    parts = parse_sse(r.text)
    assert parts[0][0] == "metadata"
    run_id = parts[0][1]["run_id"]
    events = [e for e, _ in parts[1:]]
    assert set(events) == {"values", "updates"}
    updates = [d for e, d in parts if e == "updates"]
    assert [next(iter(u)) for u in updates] == ["agent", "tools", "agent"]
    last_values = [d for e, d in parts if e == "values"][-1]
    assert [m["type"] for m in last_values["messages"]] == ["human", "ai", "tool", "ai"]
    (recorded,) = tape.runs(thread_id=tid)
    assert recorded.run_id == run_id and recorded.status == "finished" and recorded.llm_calls == 2
    run = (await client.get(f"/threads/{tid}/runs/{run_id}")).json()
    assert run["status"] == "success" and run["metadata"]["graphtape_run_id"] == run_id
    state = (await client.get(f"/threads/{tid}/state")).json()
    assert state["next"] == [] and state["values"] == last_values
    thread = (await client.get(f"/threads/{tid}")).json()
    assert thread["status"] == "idle" and thread["metadata"]["graph_id"] == "agent"


async def test_interrupt_then_resume_with_a_command(client, tape):
    tid = await new_thread(client)
    r = await client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "input": {"topic": "x"}})
    out = r.json()
    (pending,) = out["__interrupt__"]
    assert pending["value"]["question"] == "publish?" and pending["id"]
    thread = (await client.get(f"/threads/{tid}")).json()
    assert thread["status"] == "interrupted"
    state = (await client.get(f"/threads/{tid}/state")).json()
    assert state["next"] == ["approve"]
    assert state["tasks"][0]["interrupts"][0]["id"] == pending["id"]
    r = await client.post(
        f"/threads/{tid}/runs/stream",
        json={"assistant_id": "doc", "command": {"resume": "yes"}, "stream_mode": "updates"},
    )
    updates = [d for e, d in parse_sse(r.text) if e == "updates"]
    assert updates == [{"approve": {"approved": "yes"}}, {"publish": {"final": f"{out['draft']} / yes"}}]
    assert (await client.get(f"/threads/{tid}")).json()["status"] == "idle"
    statuses = [run.status for run in tape.runs(thread_id=tid)]
    assert statuses == ["finished", "interrupted"]


async def test_interrupt_before_per_run_and_continue_with_no_input(client):
    tid = await new_thread(client)
    body = {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    await client.post(f"/threads/{tid}/runs/wait", json={**body, "interrupt_before": ["tools"]})
    state = (await client.get(f"/threads/{tid}/state")).json()
    assert state["next"] == ["tools"]
    assert (await client.get(f"/threads/{tid}")).json()["status"] == "interrupted"
    out = (await client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "agent", "input": None})).json()
    assert [m["type"] for m in out["messages"]] == ["human", "ai", "tool", "ai"]


async def test_update_state_forks_and_a_run_continues_from_the_fork(client, tape):
    tid = await new_thread(client)
    await client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "input": {"topic": "x"}})
    history = (await client.post(f"/threads/{tid}/history", json={"limit": 10})).json()
    assert history[0]["next"] == ["approve"]
    after_draft = history[0]["checkpoint"]["checkpoint_id"]
    at = (await client.get(f"/threads/{tid}/state/{after_draft}")).json()
    assert at["checkpoint"]["checkpoint_id"] == after_draft
    r = await client.post(
        f"/threads/{tid}/state",
        json={"values": {"draft": "edited"}, "as_node": "draft", "checkpoint_id": after_draft},
    )
    assert r.status_code == 200, r.text
    fork = r.json()["checkpoint"]["checkpoint_id"]
    assert fork != after_draft
    state = (await client.get(f"/threads/{tid}/state")).json()
    assert state["values"]["draft"] == "edited" and state["next"] == ["approve"]
    assert state["parent_checkpoint"]["checkpoint_id"] == after_draft
    await client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "input": None})
    out = (
        await client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "command": {"resume": "ok"}})
    ).json()
    assert out["final"] == "edited / ok"
    history = (await client.get(f"/threads/{tid}/history", params={"limit": 50})).json()
    assert after_draft in {h["checkpoint"]["checkpoint_id"] for h in history}
    runs = tape.runs(thread_id=tid)
    assert len(runs) == 3
    # the update is on the tape, with the run after it, and a replay of the thread repeats it
    (after_update,) = [r for r in runs if tape.events(r.run_id, ["state_update"])]
    (update,) = tape.events(after_update.run_id, ["state_update"])
    assert update.data["checkpoint_id"] == after_draft and update.data["result"] == fork
    result = await tape.areplay(runs[0].run_id, studio_graphs()["doc"])
    assert result.status == "finished" and result.divergence is None and result.live == 0, result.error
    assert result.output_matches is True and result.output["final"] == "edited / ok"


async def test_background_run_join_list_and_cancel(client, tape):
    tid = await new_thread(client)
    r = await client.post(f"/threads/{tid}/runs", json={"assistant_id": "doc", "input": {"topic": "y"}})
    run = r.json()
    assert run["status"] in ("pending", "running") and r.headers["content-location"].endswith(run["run_id"])
    joined = (await client.get(f"/threads/{tid}/runs/{run['run_id']}/join")).json()
    assert joined["__interrupt__"]
    listed = (await client.get(f"/threads/{tid}/runs")).json()
    assert [x["run_id"] for x in listed] == [run["run_id"]]
    stream = parse_sse((await client.get(f"/threads/{tid}/runs/{run['run_id']}/stream")).text)
    assert stream[0] == ("metadata", {"run_id": run["run_id"], "attempt": 1})

    slow = await new_thread(client)
    r = await client.post(f"/threads/{slow}/runs", json={"assistant_id": "slow", "input": {"seconds": 30}})
    slow_run = r.json()["run_id"]
    busy = await client.post(f"/threads/{slow}/runs", json={"assistant_id": "slow", "input": {"seconds": 1}})
    assert_error(busy, 409, slow_run, "cancel")
    for _ in range(500):  # until the run is on the tape: cancelled while its node runs
        if tape.runs(thread_id=slow):
            break
        await asyncio.sleep(0.01)
    r = await client.post(f"/threads/{slow}/runs/{slow_run}/cancel", params={"wait": True})
    assert r.status_code == 204
    assert (await client.get(f"/threads/{slow}/runs/{slow_run}")).json()["status"] == "interrupted"
    (recorded,) = tape.runs(thread_id=slow)
    assert recorded.run_id == slow_run and recorded.status == "interrupted"
    assert (await client.delete(f"/threads/{slow}/runs/{slow_run}")).status_code == 204
    assert_error(await client.get(f"/threads/{slow}/runs/{slow_run}"), 404, slow_run)
    assert tape.runs(thread_id=slow)


async def test_threads_create_get_search_delete(client):
    tid = str(uuid.uuid4())
    r = await client.post("/threads", json={"thread_id": tid, "metadata": {"team": "a"}})
    assert r.json()["thread_id"] == tid and r.json()["metadata"] == {"team": "a"}
    assert_error(await client.post("/threads", json={"thread_id": tid}), 409, "if_exists")
    assert (await client.post("/threads", json={"thread_id": tid, "if_exists": "do_nothing"})).status_code == 200
    other = await new_thread(client)
    found = (await client.post("/threads/search", json={"metadata": {"team": "a"}})).json()
    assert [t["thread_id"] for t in found] == [tid]
    ids = {t["thread_id"] for t in (await client.post("/threads/search", json={})).json()}
    assert {tid, other} <= ids
    assert (await client.delete(f"/threads/{tid}")).status_code == 204
    assert_error(await client.get(f"/threads/{tid}"), 404, tid)


async def test_threads_recorded_from_python_are_found(client, tape):
    from tests.studio_graphs import build_doc

    tape.record(build_doc(), name="doc", checkpointer=tape.saver).invoke(
        {"topic": "z"}, {"configurable": {"thread_id": "py-thread"}}
    )
    thread = (await client.get("/threads/py-thread")).json()
    assert thread["status"] == "interrupted" and thread["metadata"]["graph_id"] == "doc"
    state = (await client.get("/threads/py-thread/state")).json()
    assert state["next"] == ["approve"]

    tape.record(build_doc(), name="unserved", checkpointer=tape.saver).invoke(
        {"topic": "u"}, {"configurable": {"thread_id": "other"}}
    )
    other = (await client.get("/threads/other")).json()
    assert other["metadata"]["graph_id"] == "unserved" and other["values"] is None
    assert_error(await client.get("/threads/other/state"), 404, "unserved", "not served")


async def test_bad_requests_are_4xx_json_saying_what_to_fix(client):
    tid = await new_thread(client)
    runs = f"/threads/{tid}/runs/wait"
    headers = {"content-type": "application/json"}
    assert_error(await client.post(runs, content=b"{not json", headers=headers), 400, "not valid JSON")
    assert_error(await client.post(runs, json={"input": {}}), 422, "assistant_id")
    assert_error(await client.post(runs, json={"assistant_id": "doc", "stream_mode": "nope"}), 422, "stream_mode")
    mixed = {"assistant_id": "doc", "stream_mode": ["events", "values"]}
    assert_error(await client.post(runs, json=mixed), 400, "'events'", "alone")
    bad_config = {"assistant_id": "doc", "config": {"configurable": []}}
    assert_error(await client.post(runs, json=bad_config), 400, "config.configurable")
    bad_limit = {"assistant_id": "doc", "config": {"recursion_limit": "x"}}
    assert_error(await client.post(runs, json=bad_limit), 400, "recursion_limit")
    assert_error(await client.post(runs, json={"assistant_id": "nope"}), 404, "nope", "doc")
    assert_error(await client.post("/threads/missing/runs/wait", json={"assistant_id": "doc"}), 404, "if_not_exists")
    assert_error(await client.get(f"/threads/{tid}/runs/missing"), 404, "missing")
    assert_error(await client.get("/assistants/nope/schemas"), 404, "graph names")
    assert_error(await client.get("/nowhere"), 404, "/docs")
    assert_error(await client.put("/threads/search", json={}), 405, "PUT")
    assert_error(await client.post("/threads/search", json={"limit": -1}), 422, "limit")
    assert_error(await client.get(f"/threads/{tid}/history", params={"limit": 0}), 422, "limit")
    assert_error(await client.post(runs, content=b"x" * (65 * 1024), headers=headers), 413, "larger than")

    async def chunked():  # no content-length: counted as it arrives
        for _ in range(70):
            yield b"x" * 1024

    assert_error(await client.post(runs, content=chunked(), headers=headers), 413, "larger than")
    await client.post(runs, json={"assistant_id": "doc", "input": {"topic": "t"}})
    assert_error(await client.post(f"/threads/{tid}/state", json={"values": {}, "as_node": "nope"}), 400, "draft")
    assert_error(await client.get(f"/threads/{tid}/state/{uuid.uuid4()}"), 404, "history")
    assert_error(await client.post(runs, json={"assistant_id": "agent"}), 409, "doc")
    # a thread made on the fly
    r = await client.post(
        "/threads/fresh/runs/wait", json={"assistant_id": "doc", "input": {"topic": "f"}, "if_not_exists": "create"}
    )
    assert r.status_code == 200 and "__interrupt__" in r.json()


async def test_a_token_is_required_when_given(tape):
    app = create_app(tape, studio_graphs(), token="s3cret")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
        assert (await c.get("/ok")).status_code == 200
        assert_error(await c.get("/info"), 401, "token")
        assert_error(await c.get("/info", headers={"Authorization": "Bearer wrong"}), 401)
        assert (await c.get("/info", headers={"Authorization": "Bearer s3cret"})).status_code == 200
        assert (await c.get("/info", headers={"x-api-key": "s3cret"})).status_code == 200
        assert "access-control-allow-origin" not in (await c.get("/ok", headers={"Origin": "http://x"})).headers


async def test_cors_only_for_the_given_origins(tape):
    app = create_app(tape, studio_graphs(), cors_origins=["http://ui.local"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
        allowed = await c.get("/ok", headers={"Origin": "http://ui.local"})
        assert allowed.headers["access-control-allow-origin"] == "http://ui.local"
        assert "access-control-allow-origin" not in (await c.get("/ok", headers={"Origin": "http://evil"})).headers


async def test_stream_modes_messages_custom_debug_and_subgraphs(client):
    tid = await new_thread(client)
    body = {
        "assistant_id": "doc",
        "input": {"topic": "modes"},
        "stream_mode": ["messages-tuple", "custom", "debug", "updates"],
    }
    parts = parse_sse((await client.post(f"/threads/{tid}/runs/stream", json=body)).text)
    events = [e for e, _ in parts]
    assert events[0] == "metadata" and {"messages", "custom", "debug", "updates"} <= set(events)
    assert [d for e, d in parts if e == "custom"] == [{"progress": "drafting"}]
    message, meta = next(d for e, d in parts if e == "messages")
    assert message["type"].startswith("AI") or message["type"] == "ai"
    assert meta["langgraph_node"] == "draft" and meta["run_id"] == parts[0][1]["run_id"]
    # the run's metadata as LangGraph's server gives it to a graph: graphtape's bookkeeping is not in it
    assert "graphtape_run_id" not in meta
    assert all("graphtape_run_id" not in (d.get("payload") or {}).get("metadata", {}) for e, d in parts if e == "debug")
    assert {d["type"] for e, d in parts if e == "debug"} >= {"task", "task_result"}
    interrupt = [d for e, d in parts if e == "updates"][-1]
    assert interrupt["__interrupt__"][0]["value"]["question"] == "publish?"

    nested = await new_thread(client)
    body = {"assistant_id": "nested", "input": {"question": "q"}, "stream_mode": "updates", "stream_subgraphs": True}
    parts = parse_sse((await client.post(f"/threads/{nested}/runs/stream", json=body)).text)
    names = [e for e, _ in parts[1:]]
    assert names[-1] == "updates" and any(n.startswith("updates|sub:") for n in names), names


async def test_subgraph_schemas(client):
    subgraphs = (await client.get("/assistants/nested/subgraphs")).json()
    assert list(subgraphs) == ["sub"]
    assert set(subgraphs["sub"]["state_schema"]["properties"]) >= {"question", "answer"}
    assert (await client.get("/assistants/doc/subgraphs")).json() == {}


async def test_stateless_runs_on_temporary_threads(client, tape):
    out = (await client.post("/runs/wait", json={"assistant_id": "doc", "input": {"topic": "s"}})).json()
    assert out["__interrupt__"]
    (recorded,) = [r for r in tape.runs() if r.graph == "doc"]
    found = (await client.post("/threads/search", json={})).json()
    assert recorded.thread_id not in {t["thread_id"] for t in found}
    hello = {"messages": [{"role": "user", "content": "hello"}]}
    parts = parse_sse((await client.post("/runs/stream", json={"assistant_id": "agent", "input": hello})).text)
    assert parts[0][0] == "metadata" and parts[-1][0] == "values"
    kept = (
        await client.post("/runs", json={"assistant_id": "doc", "input": {"topic": "k"}, "on_completion": "keep"})
    ).json()
    await client.get(f"/threads/{kept['thread_id']}/runs/{kept['run_id']}/join")
    assert (await client.get(f"/threads/{kept['thread_id']}")).json()["status"] == "interrupted"


async def test_a_failing_run_streams_an_error_and_is_failed_on_the_tape(client, tape):
    tid = await new_thread(client)
    body = {"assistant_id": "agent", "input": {"messages": []}, "stream_mode": "updates"}
    parts = parse_sse((await client.post(f"/threads/{tid}/runs/stream", json=body)).text)
    assert parts[-1][0] == "error" and parts[-1][1]["error"] and parts[-1][1]["message"]
    run_id = parts[0][1]["run_id"]
    assert (await client.get(f"/threads/{tid}/runs/{run_id}")).json()["status"] == "error"
    assert (await client.get(f"/threads/{tid}")).json()["status"] == "error"
    (recorded,) = tape.runs(thread_id=tid)
    assert recorded.run_id == run_id and recorded.status == "failed"
    out = (await client.post(f"/threads/{tid}/runs/wait", json=body)).json()
    assert set(out["__error__"]) == {"error", "message"}


async def test_patch_count_and_copy_threads(client):
    tid = await new_thread(client)
    await client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "input": {"topic": "c"}})
    patched = (await client.patch(f"/threads/{tid}", json={"metadata": {"owner": "me"}})).json()
    assert patched["metadata"] == {"graph_id": "doc", "assistant_id": assistant_id_for("doc"), "owner": "me"}
    assert (await client.post("/threads/count", json={"metadata": {"owner": "me"}})).json() == 1
    copy = (await client.post(f"/threads/{tid}/copy")).json()
    assert copy["thread_id"] != tid and copy["status"] == "interrupted"
    assert (await client.get(f"/threads/{copy['thread_id']}/state")).json()["next"] == ["approve"]
    out = (
        await client.post(
            f"/threads/{copy['thread_id']}/runs/wait", json={"assistant_id": "doc", "command": {"resume": "c"}}
        )
    ).json()
    assert out["final"].endswith("/ c")
    assert (await client.get(f"/threads/{tid}/state")).json()["next"] == ["approve"]
    assert (await client.post("/threads/count", json={})).json() == 2


async def test_legacy_messages_mode_sends_whole_messages_so_far(client):
    tid = await new_thread(client)
    body = {"assistant_id": "doc", "input": {"topic": "m"}, "stream_mode": "messages"}
    parts = parse_sse((await client.post(f"/threads/{tid}/runs/stream", json=body)).text)
    events = [e for e, _ in parts]
    assert events[:2] == ["metadata", "messages/metadata"] and "messages" not in events
    (meta,) = parts[1][1].values()
    assert meta["metadata"]["langgraph_node"] == "draft"
    partial = [d[0]["content"] for e, d in parts if e == "messages/partial"]
    assert len(partial) == 2 and partial[1].startswith(partial[0]) and len(partial[1]) > len(partial[0])
    state = (await client.get(f"/threads/{tid}/state")).json()
    assert partial[-1] == state["values"]["draft"]


async def test_a_restarted_server_finds_the_thread_on_the_tape_and_resumes_it(tape):
    first = create_app(tape, studio_graphs())
    async with app_client(first) as c:
        tid = await new_thread(c)
        await c.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "input": {"topic": "r"}})
    second = create_app(tape, studio_graphs())  # a new process: nothing in memory
    async with app_client(second) as c:
        assert tid in {t["thread_id"] for t in (await c.post("/threads/search", json={})).json()}
        assert (await c.get(f"/threads/{tid}/state")).json()["next"] == ["approve"]
        assert (await c.get(f"/threads/{tid}")).json()["status"] == "interrupted"
        out = (
            await c.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "command": {"resume": "r"}})
        ).json()
        assert out["final"].endswith("/ r")
    assert [r.status for r in tape.runs(thread_id=tid)] == ["finished", "interrupted"]


async def test_multitask_enqueue_and_interrupt(client, tape):
    tid = await new_thread(client)
    first = (await client.post(f"/threads/{tid}/runs", json={"assistant_id": "slow", "input": {"seconds": 0.2}})).json()
    queued = {"assistant_id": "slow", "input": {"seconds": 0}, "multitask_strategy": "enqueue"}
    second = (await client.post(f"/threads/{tid}/runs", json=queued)).json()
    assert (await client.get(f"/threads/{tid}/runs/{second['run_id']}/join")).json() == {"seconds": 0, "done": True}
    assert (await client.get(f"/threads/{tid}/runs/{first['run_id']}")).json()["status"] == "success"
    recorded = tape.runs(thread_id=tid)
    assert [r.run_id for r in recorded] == [second["run_id"], first["run_id"]]
    assert [r.status for r in recorded] == ["finished", "finished"]

    for attempt in range(2):  # the second time the run to interrupt has not begun yet
        long = (
            await client.post(f"/threads/{tid}/runs", json={"assistant_id": "slow", "input": {"seconds": 30}})
        ).json()
        if attempt == 0:
            for _ in range(500):
                if len(tape.runs(thread_id=tid)) == 3:
                    break
                await asyncio.sleep(0.01)
        body = {"assistant_id": "slow", "input": {"seconds": 0}, "multitask_strategy": "interrupt"}
        out = (await client.post(f"/threads/{tid}/runs/wait", json=body)).json()
        assert out == {"seconds": 0, "done": True}
        assert (await client.get(f"/threads/{tid}/runs/{long['run_id']}")).json()["status"] == "interrupted"
    statuses = [r.status for r in tape.runs(thread_id=tid)]
    assert statuses.count("interrupted") == 1 and statuses.count("finished") == 4


async def test_secrets_in_a_run_config_are_redacted_in_responses(client):
    tid = await new_thread(client)
    body = {
        "assistant_id": "doc",
        "input": {"topic": "s"},
        "config": {"configurable": {"openai_api_key": "sk-very-secret", "user": "ann"}},
        "metadata": {"password": "hunter2"},
        "stream_mode": ["messages-tuple", "messages", "debug", "updates"],
    }
    r = await client.post(f"/threads/{tid}/runs/stream", json=body)
    parts = parse_sse(r.text)
    assert {"messages", "messages/metadata", "debug"} <= {e for e, _ in parts}
    assert "sk-very-secret" not in r.text and "hunter2" not in r.text
    # the config's other values are echoed (LangGraph copies them into debug parts): only secrets are hidden
    assert '"user":"ann"' in r.text
    run = (await client.get(f"/threads/{tid}/runs/{parts[0][1]['run_id']}")).text
    assert "sk-very-secret" not in run and "hunter2" not in run and "ann" in run
    history = (await client.post(f"/threads/{tid}/history", json={})).text
    assert "sk-very-secret" not in history


async def test_events_stream_mode(client):
    tid = await new_thread(client)
    body = {"assistant_id": "doc", "input": {"topic": "e"}, "stream_mode": "events"}
    parts = parse_sse((await client.post(f"/threads/{tid}/runs/stream", json=body)).text)
    assert parts[0][0] == "metadata" and {e for e, _ in parts[1:]} == {"events"}
    kinds = [d["event"] for _, d in parts[1:]]
    assert "on_chain_start" in kinds and "on_chat_model_start" in kinds and "on_chat_model_end" in kinds
    names = {d["name"] for _, d in parts[1:] if d["event"] == "on_chain_start"}
    assert {"draft", "approve"} <= names
    assert (await client.get(f"/threads/{tid}/state")).json()["next"] == ["approve"]


async def test_assistants_made_over_http_configure_their_runs(client, tape):
    body = {"graph_id": "doc", "name": "strict doc", "config": {"tags": ["team-a"], "configurable": {"who": "a"}}}
    made = (await client.post("/assistants", json=body)).json()
    aid = made["assistant_id"]
    assert made["graph_id"] == "doc" and made["name"] == "strict doc" and made["version"] == 1
    assert aid in {
        a["assistant_id"] for a in (await client.post("/assistants/search", json={"graph_id": "doc"})).json()
    }
    assert_error(await client.post("/assistants", json={**body, "assistant_id": aid}), 409, "if_exists")
    assert_error(await client.post("/assistants", json={"graph_id": "nope"}), 400, "doc")
    tid = await new_thread(client)
    r = await client.post(f"/threads/{tid}/runs", json={"assistant_id": aid, "input": {"topic": "a"}})
    run = r.json()
    assert run["assistant_id"] == aid and run["kwargs"]["config"]["configurable"] == {"who": "a"}
    await client.get(f"/threads/{tid}/runs/{run['run_id']}/join")
    patched = (await client.patch(f"/assistants/{aid}", json={"metadata": {"x": 1}, "name": "renamed"})).json()
    assert patched["version"] == 2 and patched["name"] == "renamed" and patched["metadata"] == {"x": 1}
    assert_error(await client.patch("/assistants/doc", json={"name": "x"}), 409, "create an assistant")
    assert (await client.delete(f"/assistants/{aid}")).status_code == 204
    assert_error(await client.get(f"/assistants/{aid}"), 404, aid)
    assert tape.runs(thread_id=tid)[0].run_id == run["run_id"]


async def test_batch_of_stateless_runs_and_cancel_many(client):
    batch = [{"assistant_id": "slow", "input": {"seconds": 30}, "on_completion": "keep"} for _ in range(2)]
    made = (await client.post("/runs/batch", json=batch)).json()
    assert len(made) == 2 and made[0]["thread_id"] != made[1]["thread_id"]
    assert_error(await client.post("/runs/cancel", json={}), 400, "thread_id")
    r = await client.post("/runs/cancel", json={"thread_id": made[0]["thread_id"]})
    assert r.status_code == 204
    first = (await client.get(f"/threads/{made[0]['thread_id']}/runs/{made[0]['run_id']}")).json()
    second = (await client.get(f"/threads/{made[1]['thread_id']}/runs/{made[1]['run_id']}")).json()
    assert first["status"] == "interrupted" and second["status"] in ("pending", "running")
    assert (await client.post("/runs/cancel", json={"status": "all"})).status_code == 204
    second = (await client.get(f"/threads/{made[1]['thread_id']}/runs/{made[1]['run_id']}")).json()
    assert second["status"] == "interrupted"


async def test_state_with_subgraphs_shows_the_paused_subgraph(tape):
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    from tests.studio_graphs import Doc

    def ask(s: Doc):
        return {"approved": interrupt("inner?")}

    inner = StateGraph(Doc)
    inner.add_node(ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)
    outer = StateGraph(Doc)
    outer.add_node("child", inner.compile())
    outer.add_edge(START, "child")
    outer.add_edge("child", END)
    app = create_app(tape, {"outer": outer.compile()})
    async with app_client(app) as c:
        tid = await new_thread(c)
        await c.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "outer", "input": {"topic": "s"}})
        plain = (await c.get(f"/threads/{tid}/state")).json()
        assert plain["tasks"][0]["state"] is None and plain["tasks"][0]["checkpoint"]["checkpoint_ns"].startswith(
            "child:"
        )
        deep = (await c.get(f"/threads/{tid}/state", params={"subgraphs": True})).json()
        child = deep["tasks"][0]["state"]
        assert child["next"] == ["ask"] and child["values"] == {"topic": "s"}


async def test_a_store_error_answers_without_the_store_url(tape, monkeypatch):
    """A failing store's message names its URL (host, user, database, schema): the client is told the
    store failed, not where it is."""
    from graphtape.errors import StoreError

    app = create_app(tape, studio_graphs())
    queue = app.state.studio.queue

    def failing(*args, **kwargs):
        raise StoreError(f"{queue.url}: the run queue failed: duplicate key value")

    monkeypatch.setattr(queue, "list_threads", failing)
    async with app_client(app) as client:
        r = await client.post("/threads/search", json={})
        assert_error(r, 400, "the store", "duplicate key value")
        assert queue.url not in r.text and tape.url not in r.text


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


async def test_json_nested_too_deep_is_refused_before_parsing_and_never_stored(tape, caplog):
    """A body nested deeper than the limit is a 422 naming it, on every route (a thread's metadata,
    a run's input); brackets inside strings do not count. A thread row stored too deep to be
    answered (as before this limit) is left out of listings with a warning, not a 500 for all."""
    import logging

    from graphtape.store.runqueue import ThreadRow

    app = create_app(tape, studio_graphs(), max_json_depth=50)
    async with app_client(app) as client:
        r = await client.post("/threads", json={"metadata": nested(900)})
        assert_error(r, 422, "901 levels", "the limit is 50", "max_json_depth")
        found = (await client.post("/threads/search", json={})).json()
        assert found == []  # refused, so not stored
        r = await client.post("/runs/wait", json={"assistant_id": "slow", "input": {"seconds": 0, "x": nested(900)}})
        assert_error(r, 422, "the limit is 50")
        r = await client.post(
            "/threads", content=b'{"metadata": ' + b"[" * 5000, headers={"content-type": "application/json"}
        )
        assert_error(r, 422, "5001 levels")  # not even JSON: refused before a parser recurses into it

        tid = (await client.post("/threads", json={"metadata": {"k": nested(48), "s": "[[[[" * 100}})).json()
        assert tid["metadata"]["s"] == "[[[[" * 100
        app.state.studio.queue.put_thread(ThreadRow("too-deep", None, nested(900)))  # as stored before the limit
        with caplog.at_level(logging.WARNING, "graphtape.server.studio.threads"):
            r = await client.post("/threads/search", json={})
        assert r.status_code == 200, r.text
        assert [t["thread_id"] for t in r.json()] == [tid["thread_id"]]
        assert "too-deep" in caplog.text and "left out" in caplog.text

    with pytest.raises(ValueError, match="max_json_depth"):
        create_app(tape, studio_graphs(), max_json_depth=500)


def test_the_run_queue_stores_no_value_too_deep_to_read_back(tape):
    from graphtape.store.runqueue import QueuedRun, ThreadRow, run_queue_for
    from graphtape.store.runqueue_base import UnreadableValue

    queue = run_queue_for(tape)
    try:
        with pytest.raises(UnreadableValue, match="at most 200"):
            queue.create_thread(ThreadRow("t", None, nested(300)))
        with pytest.raises(UnreadableValue):
            queue.enqueue(QueuedRun("r", "t", "a", "g", kwargs={"input": nested(300)}))
        assert queue.get_thread("t") is None and queue.get("r") is None
        queue.create_thread(ThreadRow("t", None, nested(150)))
        with pytest.raises(UnreadableValue):
            queue.update_thread("t", metadata=nested(300))
        assert queue.get_thread("t").metadata == nested(150)
    finally:
        queue.close()


async def test_a_checkpoint_or_run_of_another_thread_is_a_404_on_every_method(client, tape):
    """Thread A's routes refuse thread B's checkpoint (a run started from it, a state update on it,
    history from or before it) and B's runs, as the GET forms do; nothing is queued or written."""
    a, b = await new_thread(client), await new_thread(client)
    for tid in (a, b):
        r = await client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "input": {"topic": tid}})
        assert "__interrupt__" in r.json()
    theirs = (await client.get(f"/threads/{b}/state")).json()["checkpoint"]
    mine = (await client.get(f"/threads/{a}/state")).json()["checkpoint"]
    foreign = theirs["checkpoint_id"]
    assert (await client.get(f"/threads/{a}/state/{foreign}")).status_code == 404  # the GET form
    before = {
        "runs": len((await client.get(f"/threads/{a}/runs")).json()),
        "history": len((await client.post(f"/threads/{a}/history", json={"limit": 100})).json()),
    }
    run = {"assistant_id": "doc", "command": {"resume": "yes"}}
    for route in ("runs", "runs/wait", "runs/stream"):
        for given in ({"checkpoint_id": foreign}, {"checkpoint": {"checkpoint_id": foreign}}):
            r = await client.post(f"/threads/{a}/{route}", json={**run, **given})
            assert_error(r, 404, foreign, a)
        r = await client.post(f"/threads/{a}/{route}", json={**run, "checkpoint": {**mine, "thread_id": b}})
        assert_error(r, 404)
        r = await client.post(f"/{route}", json={**run, "checkpoint_id": foreign})
        assert_error(r, 404, "stateless")
    r = await client.post(f"/threads/{a}/state", json={"values": {"draft": "x"}, "checkpoint_id": foreign})
    assert_error(r, 404, foreign)
    r = await client.post(f"/threads/{a}/state", json={"values": {"draft": "x"}, "checkpoint": theirs})
    assert_error(r, 404, foreign)
    assert_error(await client.post(f"/threads/{a}/history", json={"checkpoint": theirs}), 404, foreign)
    assert_error(await client.post(f"/threads/{a}/history", json={"before": theirs}), 404, foreign)
    assert_error(await client.get(f"/threads/{a}/history", params={"before": foreign}), 404, foreign)
    their_run = (await client.get(f"/threads/{b}/runs")).json()[0]["run_id"]
    r = await client.post("/runs/cancel", json={"thread_id": a, "run_ids": [their_run]})
    assert_error(r, 404, their_run)
    assert len((await client.get(f"/threads/{a}/runs")).json()) == before["runs"]
    assert len((await client.post(f"/threads/{a}/history", json={"limit": 100})).json()) == before["history"]
    # the thread's own checkpoints are still taken
    r = await client.post(f"/threads/{a}/history", json={"before": mine})
    assert r.status_code == 200 and len(r.json()) == before["history"] - 1
    r = await client.post(f"/threads/{a}/state", json={"values": {"draft": "x"}, "checkpoint": mine})
    assert r.status_code == 200, r.text
