"""The tape API (``/graphtape/...``) in process, on every store backend.

Runs recorded through the Studio's LangGraph API (so their graph is served)
are listed, shown, timed, labelled, exported and imported; their history,
states and diffs read; replayed, forked, overridden and invalidated in the
background; and stepped through in the debugger. Every bad request is a JSON
4xx that says what to fix.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")


import graphtape
from graphtape.server.studio import create_app
from tests.app_client import app_client, assert_error
from tests.graphs import build_linear, usage
from tests.studio_graphs import studio_graphs

TAPES = Path(__file__).parent / "tapes"
HOSTILE = TAPES / "hostile"
#: how a tape file is uploaded (the import takes no other body type)
TAPE_FILE = {"content-type": "application/octet-stream"}


def parse_tape_sse(text: str) -> list[dict]:
    """(id, event, data) of each SSE message of a tape stream; comments (heartbeats) left out."""
    out = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if fields:
            out.append({"id": fields.get("id"), "event": fields["event"], "data": json.loads(fields["data"])})
    return out


@pytest.fixture
async def client(tape):
    app = create_app(tape, studio_graphs(), max_body_bytes=256 * 1024)
    async with app_client(app, timeout=30) as c:
        c.app = app  # type: ignore[attr-defined]
        yield c


async def record(client, graph: str, value: dict) -> tuple[str, str]:
    """(thread id, run id) of a run of a served graph, recorded through the LangGraph API."""
    tid = (await client.post("/threads", json={})).json()["thread_id"]
    r = await client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": graph, "input": value})
    assert r.status_code == 200, r.text
    r = await client.get(f"/graphtape/runs?thread_id={tid}")
    return tid, r.json()["runs"][0]["run_id"]


async def agent_run(client) -> tuple[str, str]:
    return await record(client, "agent", {"messages": [{"role": "user", "content": "hi"}]})


# -- runs -------------------------------------------------------------------------------------


async def test_runs_listed_newest_first_with_every_filter(client):
    t1, agent = await agent_run(client)
    _, doc = await record(client, "doc", {"topic": "tides"})
    body = (await client.get("/graphtape/runs")).json()
    assert body["total"] == 2 and [r["run_id"] for r in body["runs"]] == [doc, agent]
    first = body["runs"][1]
    assert first["graph"] == "agent" and first["status"] == "finished" and first["mode"] == "record"
    assert first["llm_calls"] == 2 and first["tool_calls"] == 1 and first["label"] is None
    assert first["duration"] == pytest.approx(first["ended_at"] - first["started_at"])

    async def ids(**params) -> list[str]:
        r = await client.get("/graphtape/runs", params=params)
        assert r.status_code == 200, r.text
        return [run["run_id"] for run in r.json()["runs"]]

    assert await ids(graph="doc") == [doc]
    assert await ids(status="interrupted") == [doc]
    assert await ids(thread_id=t1) == [agent]
    assert await ids(mode="record") == [doc, agent]
    assert await ids(mode="strict") == []
    assert await ids(q=agent[:8]) == [agent]
    assert await ids(q="DOC") == [doc]
    assert await ids(since=first["started_at"] + 3600) == []
    assert await ids(until=first["started_at"]) == [agent]
    assert await ids(limit=1, offset=1) == [agent]
    page = (await client.get("/graphtape/runs", params={"limit": 1})).json()
    assert page["total"] == 2 and len(page["runs"]) == 1
    assert_error(await client.get("/graphtape/runs", params={"limit": 0}), 422, "limit")


async def test_runs_paged_by_the_next_cursor_with_filters(client, tape, monkeypatch):
    """``next`` continues after a page's last run (ties by run id), with the filters; the last page has none."""
    from graphtape.server.studio import tape_views
    from graphtape.store.base import RunRecord, WriteBatch

    runs = [
        RunRecord(f"run-{i:02d}", f"th-{i}", "etl" if i % 3 else "agent", "finished", 100.0 + i // 2) for i in range(11)
    ]
    tape.store.write(WriteBatch(new_runs=runs))
    newest = sorted(runs, key=lambda r: r.run_id)
    newest.sort(key=lambda r: r.started_at, reverse=True)

    async def walk(**params) -> tuple[list[str], list[int]]:
        seen: list[str] = []
        totals: list[int] = []
        cursor = None
        while True:
            query = {**params, "limit": 3, **({"cursor": cursor} if cursor else {})}
            r = await client.get("/graphtape/runs", params=query)
            assert r.status_code == 200, r.text
            body = r.json()
            seen += [run["run_id"] for run in body["runs"]]
            totals.append(body["total"])
            assert body["total_exact"] is True
            cursor = body["next"]
            if cursor is None:
                return seen, totals
            assert len(body["runs"]) == 3

    seen, totals = await walk()
    assert seen == [r.run_id for r in newest] and set(totals) == {11}
    seen, totals = await walk(graph="etl", until=104.0)
    assert seen == [r.run_id for r in newest if r.graph == "etl" and r.started_at <= 104] and set(totals) == {6}
    # offset still pages as before
    page = (await client.get("/graphtape/runs", params={"limit": 2, "offset": 9})).json()
    assert [r["run_id"] for r in page["runs"]] == [r.run_id for r in newest[9:]] and page["next"] is None
    # a count past the limit says so instead of counting every run
    monkeypatch.setattr(tape_views, "TOTAL_LIMIT", 4)
    page = (await client.get("/graphtape/runs", params={"limit": 2})).json()
    assert page["total"] == 4 and page["total_exact"] is False and page["next"]
    for bad in ("not-a-cursor", "WyJ4IiwgMV0", "e30"):
        assert_error(await client.get("/graphtape/runs", params={"cursor": bad}), 400, "next")


async def test_run_detail_input_output_interrupts_and_children(client):
    _, agent = await agent_run(client)
    _, doc = await record(client, "doc", {"topic": "tides"})
    detail = (await client.get(f"/graphtape/runs/{doc[:8]}")).json()  # a unique prefix is enough
    assert detail["run"]["run_id"] == doc and detail["input"] == {"topic": "tides"}
    (pending,) = detail["interrupts"]
    assert pending["node"] == "approve" and pending["id"]
    assert pending["value"]["question"] == "publish?"
    assert detail["savings"] is None and detail["divergence"] is None and detail["children"] == []

    r = await client.post(f"/graphtape/runs/{agent}/replay?wait=true", json={"mode": "strict"})
    assert r.status_code == 200, r.text
    replay = r.json()
    detail = (await client.get(f"/graphtape/runs/{agent}")).json()
    assert [c["run_id"] for c in detail["children"]] == [replay["run_id"]]
    assert detail["output"]["messages"][-1]["kwargs"]["type"] == "ai"
    child = (await client.get(f"/graphtape/runs/{replay['run_id']}")).json()
    assert child["run"]["replay_of"] == agent and child["run"]["mode"] == "strict"
    assert child["savings"]["served"] == 3 and child["savings"]["live"] == 0
    # every token the recorded run's model calls used (their random answers' lengths: tests/graphs.usage)
    recorded = (await client.get(f"/graphtape/runs/{agent}/calls")).json()["calls"]
    assert child["savings"]["tokens_saved"] == sum(c["tokens"] for c in recorded if c["kind"] == "llm") > 0


async def test_unknown_runs_are_404_saying_what_to_do(client):
    for path in ("", "/timeline", "/events", "/calls", "/calls/abc", "/export", "/stream"):
        assert_error(await client.get(f"/graphtape/runs/no-such-run{path}"), 404, "no run")
    assert_error(await client.put("/graphtape/runs/no-such-run/label", json={"label": "x"}), 404, "graphtape runs")


async def test_timeline_steps_tasks_and_calls(client):
    _, run_id = await agent_run(client)
    tl = (await client.get(f"/graphtape/runs/{run_id}/timeline")).json()
    assert tl["run_id"] == run_id and tl["ended_at"] >= tl["started_at"]
    tasks = [t for s in tl["steps"] for t in s["tasks"]]
    assert [t["node"] for t in tasks] == ["agent", "tools", "agent"]
    assert all(t["status"] == "finished" and t["ended_at"] >= t["started_at"] for t in tasks)
    assert [[c["kind"] for c in t["calls"]] for t in tasks] == [["llm"], ["tool"], ["llm"]]
    assert {c["source"] for t in tasks for c in t["calls"]} == {"recorded"}
    assert all(s["checkpoint_id"] for s in tl["steps"])
    history = (await client.get(f"/graphtape/history/{run_id}")).json()
    assert [s["checkpoint_id"] for s in tl["steps"]] == [e["checkpoint_id"] for e in history["entries"]]

    # the input and loop checkpoints say what wrote them; each call previews what was asked and answered
    assert [s["source"] for s in tl["steps"][:2]] == ["input", "loop"] and tl["steps"][0]["step"] == -1
    llm, tool, _ = (c for t in tasks for c in t["calls"])
    calls = (await client.get(f"/graphtape/runs/{run_id}/calls")).json()["calls"]
    detail = (await client.get(f"/graphtape/runs/{run_id}/calls/{llm['call_id']}")).json()
    assert llm["preview"]["request"].startswith(f"{llm['name']} ← [human] ")
    assert llm["preview"]["input_tokens"] == detail["usage"]["input_tokens"]
    assert llm["preview"]["output_tokens"] == detail["usage"]["output_tokens"]
    assert tool["preview"]["request"].startswith(f"{tool['name']}(") and tool["preview"]["answer"]
    assert all(c["preview"] is None for c in calls)  # only the timeline carries previews

    replay = (await client.post(f"/graphtape/runs/{run_id}/replay?wait=true", json={})).json()
    tl = (await client.get(f"/graphtape/runs/{replay['run_id']}/timeline")).json()
    assert {c["source"] for s in tl["steps"] for t in s["tasks"] for c in t["calls"]} == {"tape"}


async def test_timeline_shows_an_interrupted_task(client):
    _, doc = await record(client, "doc", {"topic": "tides"})
    tl = (await client.get(f"/graphtape/runs/{doc}/timeline")).json()
    statuses = {t["node"]: t["status"] for s in tl["steps"] for t in s["tasks"]}
    assert statuses == {"draft": "finished", "approve": "interrupted"}


async def test_events_paged_by_seq(client):
    _, run_id = await agent_run(client)
    body = (await client.get(f"/graphtape/runs/{run_id}/events")).json()
    kinds = [e["kind"] for e in body["events"]]
    assert body["done"] is True and kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert [e["seq"] for e in body["events"]] == list(range(len(kinds)))
    first = body["events"][0]
    assert isinstance(first["data"]["input"], str)  # payload references are not expanded
    page = (await client.get(f"/graphtape/runs/{run_id}/events", params={"after": 2, "limit": 3})).json()
    assert [e["seq"] for e in page["events"]] == [3, 4, 5] and page["done"] is False
    rest = (await client.get(f"/graphtape/runs/{run_id}/events", params={"after": 5})).json()
    assert rest["done"] is True and rest["events"][-1]["kind"] == "run_finished"


async def test_calls_and_one_call_expanded(client):
    _, run_id = await agent_run(client)
    calls = (await client.get(f"/graphtape/runs/{run_id}/calls")).json()["calls"]
    assert [(c["kind"], c["name"], c["node_path"]) for c in calls] == [
        ("llm", "graphtape-fake-test", "agent"),
        ("tool", "search", "tools"),
        ("llm", "graphtape-fake-test", "agent"),
    ]
    assert calls[0]["source"] == "recorded"
    assert calls[0]["duration"] == pytest.approx(calls[0]["ended_at"] - calls[0]["started_at"], abs=1e-6)
    one = (await client.get(f"/graphtape/runs/{run_id}/calls/{calls[0]['call_id']}")).json()
    assert one["call"] == calls[0] and one["recorded_in"] == run_id
    assert one["request"]["messages"] == [{"type": "human", "content": "hi"}]
    assert [t["function"]["name"] for t in one["request"]["tools"]] == ["search"]
    assert one["request"]["params"]["model_name"] == "graphtape-fake-test"
    assert one["response"][0]["kwargs"]["tool_calls"][0]["name"] == "search"
    # the fake model's answer is a random number: its usage follows the answer's length (tests/graphs.usage)
    answer = one["response"][0]["kwargs"]["tool_calls"][0]["args"]["q"]
    assert calls[0]["tokens"] == one["usage"]["total_tokens"] == usage(answer)["total_tokens"]
    assert one["latency"] >= 0
    tool = (await client.get(f"/graphtape/runs/{run_id}/calls/{calls[1]['call_id'][:8]}")).json()
    assert tool["request"]["tool"] == "search" and tool["usage"] is None
    assert_error(await client.get(f"/graphtape/runs/{run_id}/calls/nope"), 404, "GET /graphtape/runs/")


async def test_label_shows_in_lists_and_clears(client):
    _, run_id = await agent_run(client)
    r = await client.put(f"/graphtape/runs/{run_id}/label", json={"label": "good one", "note": "baseline"})
    assert r.status_code == 200 and r.json()["label"] == "good one" and r.json()["run_id"] == run_id
    listed = (await client.get("/graphtape/runs", params={"q": "good"})).json()
    assert listed["total"] == 1 and listed["runs"][0]["label"] == "good one"
    history = (await client.get(f"/graphtape/history/{run_id}")).json()
    assert history["branches"][0]["runs"][0]["label"] == "good one"
    r = await client.put(f"/graphtape/runs/{run_id}/label", json={"label": None})
    assert r.json()["label"] is None
    assert (await client.get("/graphtape/runs", params={"q": "good"})).json()["total"] == 0
    assert_error(await client.put(f"/graphtape/runs/{run_id}/label", json={"label": 5}), 422, "label")
    assert_error(await client.put(f"/graphtape/runs/{run_id}/label", json={"colour": "x"}), 422, "colour")


# -- moving tapes -----------------------------------------------------------------------------


async def test_export_then_import_into_another_store(client, new_store_url):
    tid, run_id = await agent_run(client)
    r = await client.get(f"/graphtape/runs/{run_id}/export")
    exported = r.content
    assert r.status_code == 200 and r.headers["content-disposition"].startswith("attachment;")
    assert json.loads(r.content.splitlines()[0])["format"] == "graphtape-tape"
    thread = await client.get(f"/graphtape/threads/{tid}/export")
    assert thread.status_code == 200 and f'filename="thread-{tid}.jsonl"' in thread.headers["content-disposition"]
    assert_error(await client.get("/graphtape/threads/no-thread/export"), 404, "no runs on thread")

    other = graphtape.connect(new_store_url())
    try:
        app = create_app(other, studio_graphs())
        async with app_client(app, base_url="http://127.0.0.1") as c2:
            refused = (HOSTILE / "os_system.must_refuse.jsonl").read_bytes()
            assert_error(
                await c2.post("/graphtape/import", content=refused, headers=TAPE_FILE), 400, "refused", "nothing"
            )
            assert other.runs() == []
            assert_error(
                await c2.post("/graphtape/import", content=b"not a tape", headers=TAPE_FILE),
                400,
                "not a graphtape tape",
            )
            assert_error(await c2.post("/graphtape/import", content=b"\xff\xfe", headers=TAPE_FILE), 400, "UTF-8")
            r = await c2.post("/graphtape/import", content=exported, headers=TAPE_FILE)
            assert r.status_code == 200 and r.json() == {"run_ids": [run_id]}
            assert_error(await c2.post("/graphtape/import", content=exported, headers=TAPE_FILE), 409, "already")
            calls = (await c2.get(f"/graphtape/runs/{run_id}/calls")).json()["calls"]
            assert len(calls) == 3
    finally:
        other.close()


async def test_import_is_limited_by_the_body_limit(client):
    big = b"x" * (300 * 1024)
    assert_error(await client.post("/graphtape/import", content=big, headers=TAPE_FILE), 413, "larger than")


# -- time travel ------------------------------------------------------------------------------


async def test_history_checkpoint_state_and_diff(client):
    tid, run_id = await agent_run(client)
    history = (await client.get(f"/graphtape/history/{run_id}")).json()
    assert history["kind"] == "run" and history["thread_id"] == tid
    entries = history["entries"]
    assert [e["writers"] for e in entries][2:] == [["agent"], ["tools"], ["agent"]]
    by_thread = (await client.get(f"/graphtape/history/{tid}", params={"namespaces": True})).json()
    assert by_thread["kind"] == "thread" and len(by_thread["entries"]) == len(entries)
    assert_error(await client.get("/graphtape/history/nothing-here"), 404, "graphtape runs")

    first, last = entries[1]["checkpoint_id"], entries[-1]["checkpoint_id"]
    state = (await client.get(f"/graphtape/threads/{tid}/checkpoints/{first}")).json()
    assert state["checkpoint_id"] == first and state["thread_id"] == tid and state["next"] == ["agent"]
    assert state["values"]["messages"][0]["kwargs"]["content"] == "hi"
    assert state["parent_id"] == entries[0]["checkpoint_id"] and state["step"] == 0
    assert state["metadata"]["source"] == "loop"
    end = (await client.get(f"/graphtape/threads/{tid}/checkpoints/{last[:-6]}")).json()
    assert end["next"] == [] and len(end["values"]["messages"]) == 4
    assert_error(await client.get(f"/graphtape/threads/other/checkpoints/{first}"), 404, "no checkpoint")
    assert_error(await client.get(f"/graphtape/threads/{tid}/checkpoints/short"), 404, "too short")

    diff = (await client.get("/graphtape/diff", params={"a": first, "b": last, "thread_id": tid})).json()
    assert diff["a"] == first and diff["b"] == last and diff["equal"] is False
    assert [c["op"] for c in diff["changes"]] == ["appended"] and len(diff["changes"][0]["new"]) == 3
    assert [op["path"] for op in diff["patch"]] == ["/messages/1", "/messages/2", "/messages/3"]
    same = (await client.get("/graphtape/diff", params={"a": first, "b": first})).json()
    assert same["equal"] is True and same["changes"] == []
    assert_error(await client.get("/graphtape/diff", params={"a": first, "b": "ffffffffffff"}), 404, "no checkpoint")
    assert_error(await client.get("/graphtape/diff", params={"a": first}), 422, "b")


# -- actions ----------------------------------------------------------------------------------


async def follow(client, run_id: str) -> list[dict]:
    r = await client.get(f"/graphtape/runs/{run_id}/stream")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    return parse_tape_sse(r.text)


async def test_replay_answers_202_then_the_run_streams_to_its_end(client, tape):
    _, run_id = await agent_run(client)
    r = await client.post(f"/graphtape/runs/{run_id}/replay", json={"mode": "strict"})
    assert r.status_code == 202, r.text
    started = r.json()
    assert started["status"] == "running" and started["thread_id"] == f"replay-{started['run_id']}"
    messages = await follow(client, started["run_id"])
    assert messages[0]["event"] == "run_started" and messages[-1]["event"] == "run_finished"
    assert [int(m["id"]) for m in messages] == [m["data"]["seq"] for m in messages]
    assert [m["data"]["seq"] for m in messages] == list(range(len(messages)))
    run = tape.run(started["run_id"])
    assert run.replay_of == run_id and run.thread_id == started["thread_id"] and run.status == "finished"
    # a replay from one of its checkpoints, and the whole result with wait=true
    cps = [e["checkpoint_id"] for e in (await client.get(f"/graphtape/history/{run_id}")).json()["entries"]]
    body = {"mode": "flight", "from_checkpoint": cps[2]}
    done = await client.post(f"/graphtape/runs/{run_id}/replay", params={"wait": True}, json=body)
    assert done.status_code == 200, done.text
    result = done.json()
    assert result["status"] == "finished" and result["mode"] == "flight" and result["served"] == 2
    assert result["replay_of"] == run_id and result["run_id"] == result["run_ids"][-1]


async def test_replay_refusals(client, tape):
    _, run_id = await agent_run(client)
    assert_error(await client.post(f"/graphtape/runs/{run_id}/replay", json={"mode": "fast"}), 422, "mode")
    assert_error(await client.post("/graphtape/runs/nope/replay", json={}), 404, "no run")
    bad = {"from_checkpoint": "ffffffff-ffff"}
    assert_error(await client.post(f"/graphtape/runs/{run_id}/replay", json=bad), 404, "no checkpoint")
    rec = tape.record(build_linear(), name="linear")
    rec.invoke({"topic": "x"})
    r = await client.post(f"/graphtape/runs/{rec.last_run_id}/replay", json={})
    assert_error(r, 409, "graph 'linear' is not served by this server")
    r = await client.post(
        f"/graphtape/runs/{run_id}/replay", content=b"{", headers={"content-type": "application/json"}
    )
    assert_error(r, 400, "not valid JSON")


async def test_fork_with_an_edit_checked_against_the_state_schema(client, tape):
    tid, doc = await record(client, "doc", {"topic": "tides"})
    entries = (await client.get(f"/graphtape/history/{doc}")).json()["entries"]
    before_approve = next(e["checkpoint_id"] for e in entries if e["writers"] == ["draft"])
    url = f"/graphtape/threads/{tid}/checkpoints/{before_approve}/fork"
    assert_error(await client.post(url, json={"values": {"nope": 1}}), 422, "unknown state key 'nope'")
    assert_error(await client.post(url, json={"values": {"topic": 5}}), 422, "'topic'")
    assert_error(await client.post(url, json={"mode": "sideways"}), 422, "mode")
    assert_error(await client.post(url, json={"values": {"draft": "x"}, "as_node": "nowhere"}), 422, "as_node")
    other = f"/graphtape/threads/not-{tid}/checkpoints/{before_approve}/fork"
    assert_error(await client.post(other, json={}), 404, "no recorded run on thread")
    assert_error(await client.post(f"/graphtape/threads/{tid}/checkpoints/ffffffffff/fork", json={}), 404)
    assert len(tape.runs(limit=None)) == 1  # nothing started

    r = await client.post(url, json={"values": {"draft": "an edited draft"}, "as_node": "draft"})
    assert r.status_code == 202, r.text
    fork_id = r.json()["run_id"]
    messages = await follow(client, fork_id)
    assert messages[-1]["event"] == "run_finished" and messages[-1]["data"]["data"]["status"] == "interrupted"
    fork = tape.run(fork_id)
    assert fork.meta["fork_of"] == before_approve and fork.meta["edit"] == {"draft": "an edited draft"}
    detail = (await client.get(f"/graphtape/runs/{fork_id}")).json()
    assert detail["interrupts"][0]["value"]["draft"] == "an edited draft"


async def test_fork_from_an_earlier_run_of_the_thread(client, tape):
    tid, first = await record(client, "doc", {"topic": "tides"})
    r = await client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "command": {"resume": "yes"}})
    assert r.status_code == 200 and r.json()["final"].endswith("/ yes")
    entries = (await client.get(f"/graphtape/history/{first}")).json()["entries"]
    after_draft = next(e["checkpoint_id"] for e in entries if e["writers"] == ["draft"])
    url = f"/graphtape/threads/{tid}/checkpoints/{after_draft}/fork?wait=true"
    result = (await client.post(url, json={"values": {"draft": "shorter"}, "mode": "strict"})).json()
    assert result["status"] == "interrupted" and result["replay_of"] == first
    assert tape.run(result["run_id"]).meta["fork_of"] == after_draft


async def test_override_a_call_and_invalidate_from_a_node(client, tape):
    _, run_id = await agent_run(client)
    calls = (await client.get(f"/graphtape/runs/{run_id}/calls")).json()["calls"]
    url = f"/graphtape/runs/{run_id}/calls/{calls[0]['call_id']}/override"
    assert_error(await client.post(url, json={"output": 5}), 422, "LLM override")
    assert_error(await client.post(url, json={}), 422, "output")
    assert_error(await client.post(f"/graphtape/runs/{run_id}/calls/nope/override", json={"output": "x"}), 404)
    r = await client.post(url, params={"wait": "true"}, json={"output": "no tools needed", "mode": "flight"})
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["status"] == "finished" and result["served"] == 1 and result["live"] == 0
    overridden = (await client.get(f"/graphtape/runs/{result['run_id']}/calls")).json()["calls"]
    assert [c["source"] for c in overridden] == ["override"]
    assert result["output"]["messages"][-1]["kwargs"]["content"] == "no tools needed"

    assert_error(await client.post(f"/graphtape/runs/{run_id}/invalidate", json={"node": "nowhere"}), 404, "never ran")
    assert_error(await client.post(f"/graphtape/runs/{run_id}/invalidate", json={}), 422, "node")
    r = await client.post(f"/graphtape/runs/{run_id}/invalidate", json={"node": "tools"})
    assert r.status_code == 202 and set(r.json()) == {"run_id", "thread_id", "status"}
    new_id = r.json()["run_id"]
    assert (await follow(client, new_id))[-1]["event"] == "run_finished"
    sources = [c["source"] for c in (await client.get(f"/graphtape/runs/{new_id}/calls")).json()["calls"]]
    assert sources == ["tape", "live", "live"]
    assert tape.run(new_id).meta["invalidate_from"] == "tools"


async def test_a_failed_action_ends_the_stream_with_an_error(client):
    app = client.app  # type: ignore[attr-defined]

    async def boom(new_run_id: str):
        raise RuntimeError("graph exploded")

    action = app.state.studio.actions.start("replay", boom)
    messages = await follow(client, action.run_id)
    assert messages == [{"id": None, "event": "error", "data": {"error": messages[0]["data"]["error"]}}]
    assert "graph exploded" in messages[0]["data"]["error"]


async def test_a_strict_replay_that_diverges_shows_where(tape):
    app = create_app(tape, {"linear": build_linear()})
    async with app_client(app, timeout=30) as c:
        golden = (TAPES / "linear_old_prompt.must_diverge.jsonl").read_bytes()
        (run_id,) = (await c.post("/graphtape/import", content=golden, headers=TAPE_FILE)).json()["run_ids"]
        result = (await c.post(f"/graphtape/runs/{run_id}/replay?wait=true", json={"mode": "strict"})).json()
        assert result["status"] == "diverged" and result["divergence"]["node"] == "write"
        detail = (await c.get(f"/graphtape/runs/{result['run_id']}")).json()
        assert detail["run"]["status"] == "diverged" and detail["divergence"]["node"] == "write"
        assert "-[human] Write a sonnet about cats" in detail["divergence"]["diff"]
        tl = (await c.get(f"/graphtape/runs/{result['run_id']}/timeline")).json()
        calls = [call for s in tl["steps"] for t in s["tasks"] for call in t["calls"]]
        diverged = [call for call in calls if call["source"] == "diverged"]
        assert [(d["kind"], d["node_path"]) for d in diverged] == [("llm", "write")]
        assert diverged[0]["error"].startswith("Divergence: ")


async def test_echoed_config_and_metadata_are_redacted(store_url):
    tape = graphtape.connect(store_url, redact=["customer_id"])
    try:
        app = create_app(tape, studio_graphs())
        async with app_client(app, timeout=30) as c:
            tid = (await c.post("/threads", json={})).json()["thread_id"]
            body = {
                "assistant_id": "agent",
                "input": {"messages": [{"role": "user", "content": "hi"}]},
                "metadata": {"customer_id": "c-4242"},
                "config": {"configurable": {"api_key": "sk-very-secret"}},
            }
            assert (await c.post(f"/threads/{tid}/runs/wait", json=body)).status_code == 200
            (run,) = (await c.get("/graphtape/runs")).json()["runs"]
            entries = (await c.get(f"/graphtape/history/{run['run_id']}")).json()["entries"]
            texts = [
                (await c.get(f"/graphtape/runs/{run['run_id']}")).text,
                (await c.get(f"/graphtape/history/{tid}")).text,
                (await c.get(f"/graphtape/threads/{tid}/checkpoints/{entries[-1]['checkpoint_id']}")).text,
                (await c.get(f"/graphtape/runs/{run['run_id']}/events")).text,
            ]
            for text in texts:
                assert "c-4242" not in text and "sk-very-secret" not in text
            state = (await c.get(f"/graphtape/threads/{tid}/checkpoints/{entries[-1]['checkpoint_id']}")).json()
            assert state["metadata"].get("customer_id") in (None, "**redacted**")
    finally:
        tape.close()


# -- the stream from the store ----------------------------------------------------------------


async def test_stream_of_an_ended_run_resumes_after_last_event_id(client):
    _, run_id = await agent_run(client)
    whole = await follow(client, run_id)
    assert whole[-1]["event"] == "run_finished"
    r = await client.get(f"/graphtape/runs/{run_id}/stream", headers={"Last-Event-ID": "5"})
    rest = parse_tape_sse(r.text)
    assert [m["data"]["seq"] for m in rest] == [m["data"]["seq"] for m in whole[6:]]
    by_query = parse_tape_sse((await client.get(f"/graphtape/runs/{run_id}/stream?after=5")).text)
    assert by_query == rest
    r = await client.get(f"/graphtape/runs/{run_id}/stream", headers={"Last-Event-ID": "five"})
    assert_error(r, 400, "Last-Event-ID")


async def test_stream_follows_a_run_written_while_watching_and_sends_heartbeats(tape):
    app = create_app(tape, studio_graphs(), heartbeat_seconds=0.2)
    async with app_client(app, timeout=30) as c:
        tid = (await c.post("/threads", json={})).json()["thread_id"]
        # 3 s: the stream must open while the run sleeps (once, on a loaded CI machine, 1.5 s was not enough)
        body = {"assistant_id": "slow", "input": {"seconds": 3.0}}
        run = (await c.post(f"/threads/{tid}/runs", json=body)).json()
        await asyncio.sleep(0.1)
        r = await c.get(f"/graphtape/runs/{run['run_id']}/stream")
        assert ": heartbeat" in r.text
        messages = parse_tape_sse(r.text)
        assert messages[0]["event"] == "run_started" and messages[-1]["event"] == "run_finished"


async def test_stream_of_a_run_whose_process_died_ends_with_an_error(tape):
    from graphtape.store.base import EventRow, RunRecord, WriteBatch

    crashed = RunRecord("dead-run-1", "dead-thread", "agent", status="running", started_at=time.time())
    started = EventRow("dead-run-1", 0, "run_started", time.time(), {"input": None, "config": None, "versions": None})
    tape.store.write(WriteBatch(new_runs=[crashed], events=[started]))  # as a killed process leaves it
    app = create_app(tape, studio_graphs(), heartbeat_seconds=0.1)
    async with app_client(app, timeout=30) as c:
        messages = parse_tape_sse((await c.get("/graphtape/runs/dead-run-1/stream")).text)
    assert [m["event"] for m in messages] == ["run_started", "error"]
    assert "graphtape recover" in messages[-1]["data"]["error"]


# -- the debugger -----------------------------------------------------------------------------


async def test_debugger_breakpoints_step_use_and_end(client, tape):
    _, run_id = await agent_run(client)
    bad = {"run_id": run_id, "breakpoints": [{"type": "before", "node": "nowhere"}]}
    assert_error(await client.post("/graphtape/debug", json=bad), 400, "no node 'nowhere'")
    assert_error(await client.post("/graphtape/debug", json={"run_id": run_id, "mode": "x"}), 422, "mode")
    assert_error(await client.post("/graphtape/debug", json={"run_id": "nope"}), 404, "no run")

    body = {"run_id": run_id, "mode": "flight", "breakpoints": [{"type": "before", "node": "tools"}]}
    r = await client.post("/graphtape/debug", json=body)
    assert r.status_code == 201, r.text
    session = r.json()
    sid = session["session_id"]
    assert session["status"] == "paused" and session["pause"]["kind"] == "before"
    assert session["pause"]["node"] == "tools" and session["pause"]["step"] == 2
    assert len(session["pause"]["state"]["messages"]) == 2 and session["run_id"]
    assert session["breakpoints"] == [{"type": "before", "node": "tools", "kind": None, "name": None}]
    assert (await client.get(f"/graphtape/debug/{sid}")).json() == session

    assert_error(await client.post(f"/graphtape/debug/{sid}/use", json={"output": "x"}), 409, "not paused at a call")
    s = (await client.post(f"/graphtape/debug/{sid}/step_call")).json()
    assert s["pause"]["kind"] == "call" and s["pause"]["call"]["name"] == "search"
    assert s["pause"]["call"]["source"] == "tape" and '"tool": "search"' in s["pause"]["request"]
    assert s["pause"]["recorded_output"] is not None
    s = (await client.post(f"/graphtape/debug/{sid}/use", json={"output": "an injected result"})).json()
    assert s["status"] == "finished" and s["pause"]["kind"] == "end"
    assert s["result"]["status"] == "finished"
    assert_error(await client.post(f"/graphtape/debug/{sid}/continue"), 409, "has ended")
    assert "an injected result" in json.dumps(s["result"]["output"])
    r = await client.put(f"/graphtape/debug/{sid}/breakpoints", json={"breakpoints": [{"type": "call"}]})
    assert r.status_code == 200 and r.json()["breakpoints"][0]["type"] == "call"
    assert (await client.delete(f"/graphtape/debug/{sid}")).status_code == 204
    assert_error(await client.get(f"/graphtape/debug/{sid}"), 404, "POST /graphtape/debug")
    assert_error(await client.post(f"/graphtape/debug/{sid}/step"), 404)
    assert_error(await client.post("/graphtape/debug/x/dance"), 404, "no route")


async def test_debugger_step_live_stop_and_the_session_limit(client):
    _, run_id = await agent_run(client)
    studio = client.app.state.studio  # type: ignore[attr-defined]
    studio.debug_sessions.max_active = 1
    body = {"run_id": run_id, "mode": "flight", "breakpoints": [{"type": "call"}]}
    first = (await client.post("/graphtape/debug", json=body)).json()
    sid = first["session_id"]
    assert first["pause"]["kind"] == "call" and first["pause"]["call"]["kind"] == "llm"
    s = (await client.post(f"/graphtape/debug/{sid}/live")).json()  # the model answers anew
    assert s["pause"]["kind"] == "call" and s["pause"]["call"]["kind"] == "tool"
    assert_error(await client.post("/graphtape/debug", json={"run_id": run_id}), 409, "already open")
    r = await client.put(
        f"/graphtape/debug/{sid}/breakpoints", json={"breakpoints": [{"type": "after", "node": "nowhere"}]}
    )
    assert_error(r, 400, "nowhere")
    r = await client.put(f"/graphtape/debug/{sid}/breakpoints", json={"breakpoints": []})
    assert r.json()["breakpoints"] == []
    s = (await client.post(f"/graphtape/debug/{sid}/step")).json()
    assert s["pause"]["kind"] == "checkpoint" and s["status"] == "paused"
    s = (await client.post(f"/graphtape/debug/{sid}/step_node")).json()
    assert s["pause"]["kind"] in ("before", "after")
    s = (await client.post(f"/graphtape/debug/{sid}/stop")).json()
    assert s["status"] == "stopped" and s["pause"]["kind"] == "end"
    again = (await client.post(f"/graphtape/debug/{sid}/stop")).json()  # stopping twice is harmless
    assert again["status"] == "stopped"
    body = {"run_id": run_id, "breakpoints": [{"type": "after", "node": "agent"}]}
    second = await client.post("/graphtape/debug", json=body)  # the stopped one no longer counts
    assert second.status_code == 201, second.text
    sid = second.json()["session_id"]
    s = second.json()
    assert s["pause"]["kind"] == "after" and s["pause"]["node"] == "agent"
    s = (await client.post(f"/graphtape/debug/{sid}/continue")).json()  # to the agent's second end
    assert s["pause"]["kind"] == "after" and s["pause"]["step"] == 3
    s = (await client.post(f"/graphtape/debug/{sid}/continue")).json()
    assert s["status"] == "finished" and s["result"]["served"] == 3 and s["result"]["run_id"] == s["run_id"]


async def test_the_tape_api_is_in_the_openapi_document(client):
    paths = (await client.get("/openapi.json")).json()["paths"]
    for path in (
        "/graphtape/runs",
        "/graphtape/runs/{run_id}/timeline",
        "/graphtape/runs/{run_id}/stream",
        "/graphtape/runs/{run_id}/calls/{call_id}",
        "/graphtape/import",
        "/graphtape/history/{run_or_thread_id}",
        "/graphtape/diff",
        "/graphtape/threads/{thread_id}/checkpoints/{checkpoint_id}/fork",
        "/graphtape/debug/{session_id}/use",
    ):
        assert path in paths, path
