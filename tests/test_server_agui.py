"""The AG-UI endpoint (``/agui/{graph}``): every event validated against the ``ag_ui.core`` models.

A graph whose model streams text and calls a tool (its arguments arriving in
the chunk that names it, where the reference adapter dropped them), then
pauses at an ``interrupt()``: the run ends with an interrupt outcome carrying
LangGraph's interrupt id, a second POST with ``resume`` finishes it, the
state deltas rebuild the final state, graphtape's calls arrive as CUSTOM
events. Then reconnecting with ``Last-Event-ID``, errors before the stream,
failures after it, and viewers on a real uvicorn server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import operator
import threading
import uuid
from typing import Annotated, Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("ag_ui")

import httpx
import jsonpatch
from ag_ui.core import Event, EventType, RunAgentInput
from ag_ui.encoder import EventEncoder
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt
from pydantic import TypeAdapter

from graphtape.server.studio import create_app
from graphtape.server.studio.agui import state_of
from graphtape.server.studio.routes_agui import CANCELLED_MARK
from graphtape.testing.models import SeededChatModel
from tests.app_client import app_client
from tests.graphs import build_subgraph_node
from tests.live_server import serve_app

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


@tool
def search(query: str) -> str:
    """Search the notes."""
    return f"notes about {query}"


def answer(messages, rng, tools):
    """A tool call (with its arguments in the same chunk as its name) after a human, else text."""
    if isinstance(messages[-1], HumanMessage):
        return AIMessage(
            content="Let me look that up.", tool_calls=[{"name": "search", "args": {"query": "tides"}, "id": "call_1"}]
        )
    return AIMessage(content="The tides follow the moon, twice a day.")


class Chat(MessagesState):
    approved: Any
    notes: Annotated[list, operator.add]
    topic: str


def build_assistant(latency: float = 0.0):
    """agent (streams text, calls ``search``) -> tools -> agent (streams text) -> approve (interrupt)."""
    model = SeededChatModel(seed=1, responder=answer, latency=latency).bind_tools([search])

    def agent(s: Chat):
        return {"messages": [model.invoke(s["messages"])], "notes": [f"agent {len(s['messages'])}"]}

    def approve(s: Chat):
        return {"approved": interrupt({"question": "send it?", "message": "Send the answer?"})}

    b = StateGraph(Chat)
    b.add_node(agent)
    b.add_node("tools", ToolNode([search]))
    b.add_node(approve)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", tools_condition, {"tools": "tools", "__end__": "approve"})
    b.add_edge("tools", "agent")
    b.add_edge("approve", END)
    return b.compile()


def build_broken():
    def fail(s: Chat):
        raise RuntimeError("the model is down")

    b = StateGraph(Chat)
    b.add_node(fail)
    b.add_edge(START, "fail")
    b.add_edge("fail", END)
    return b.compile()


def graphs(latency: float = 0.0) -> dict[str, Any]:
    return {
        "assistant": build_assistant(latency),
        "broken": build_broken(),
        "nested": build_subgraph_node(),
        "slow": build_assistant(latency=5.0),
    }


def run_input(thread_id: str, run_id: str | None = None, **extra: Any) -> dict[str, Any]:
    body = {"threadId": thread_id, "runId": run_id or str(uuid.uuid4()), "messages": [], **extra}
    RunAgentInput.model_validate(body)  # what the tests post is a valid AG-UI input
    return body


def hello(thread_id: str, run_id: str | None = None) -> dict[str, Any]:
    return run_input(thread_id, run_id, messages=[{"id": "u1", "role": "user", "content": "Tell me about tides"}])


def agui_events(text: str) -> list[tuple[int, Any]]:
    """(id, typed event) of each SSE message: ``id:`` + ``data:`` lines only, every event a valid AG-UI
    event of its type, with no field the model does not know, serialised as the encoder would."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        if all(line.startswith(":") for line in lines):
            continue  # a heartbeat
        assert [line.split(":", 1)[0] for line in lines] == ["id", "data"], block
        data = lines[1].removeprefix("data: ")
        event = EVENTS.validate_json(data)
        assert not event.model_extra, f"{event.type}: unknown fields {event.model_extra}"
        assert EventEncoder().encode(event) == f"data: {data}\n\n" or json.loads(data) == json.loads(
            event.model_dump_json(by_alias=True)
        )
        out.append((int(lines[0].removeprefix("id: ")), event))
    return out


def of(evs: list[tuple[int, Any]], kind: EventType) -> list[Any]:
    return [e for _, e in evs if e.type == kind]


def customs(evs: list[tuple[int, Any]], name: str) -> list[Any]:
    return [e.value for e in of(evs, EventType.CUSTOM) if e.name == name]


def replayed_state(evs: list[tuple[int, Any]]) -> Any:
    """The state a client holds: the snapshot with every later delta applied in order."""
    state: Any = None
    for _, e in evs:
        if e.type == EventType.STATE_SNAPSHOT:
            state = e.snapshot
        elif e.type == EventType.STATE_DELTA:
            state = jsonpatch.apply_patch(state, [op.model_dump(by_alias=True) for op in e.delta])
    return state


@pytest.fixture
def app(tape):
    return create_app(tape, graphs(), heartbeat_seconds=5)


@pytest.fixture
async def client(app):
    async with app_client(app, timeout=30) as c:
        yield c


async def post_run(client, body: dict[str, Any], graph: str = "assistant", **headers: str) -> httpx.Response:
    r = await client.post(f"/agui/{graph}", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    return r


async def test_a_run_streams_text_tool_calls_and_an_interrupt_then_a_resume_finishes_it(client, tape):
    thread, first = f"t-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    r = await post_run(client, hello(thread, first))
    evs = agui_events(r.text)
    assert [i for i, _ in evs] == list(range(1, len(evs) + 1))
    types = [e.type for _, e in evs]
    assert types[0] == EventType.RUN_STARTED and types[-1] == EventType.RUN_FINISHED
    assert types[1] == EventType.STATE_SNAPSHOT and types[-2] != EventType.RUN_ERROR
    started = evs[0][1]
    assert (started.thread_id, started.run_id, started.protocol_version) == (thread, first, "1.0")
    studio_run = started.metadata["graphtape"]["run_id"]
    assert r.headers["content-location"] == f"/agui/assistant/runs/{studio_run}"

    # steps: one per node task, each started before it finished
    steps = [(e.type, e.step_name) for _, e in evs if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)]
    assert steps == [
        (t, n)
        for n in ("agent", "tools", "agent", "approve")
        for t in (EventType.STEP_STARTED, EventType.STEP_FINISHED)
    ]
    # model text as it streamed: several deltas per message, each message started and ended once
    starts = of(evs, EventType.TEXT_MESSAGE_START)
    assert len(starts) == 2 and all(s.role == "assistant" for s in starts)
    texts = {
        s.message_id: "".join(c.delta for c in of(evs, EventType.TEXT_MESSAGE_CONTENT) if c.message_id == s.message_id)
        for s in starts
    }
    assert list(texts.values()) == ["Let me look that up.", "The tides follow the moon, twice a day."]
    assert len(of(evs, EventType.TEXT_MESSAGE_CONTENT)) > 2
    assert sorted(e.message_id for e in of(evs, EventType.TEXT_MESSAGE_END)) == sorted(texts)
    # the tool call: its arguments came in the chunk that named it, and are not dropped
    (call,) = of(evs, EventType.TOOL_CALL_START)
    assert (call.tool_call_id, call.tool_call_name, call.parent_message_id) == (
        "call_1",
        "search",
        starts[0].message_id,
    )
    assert json.loads("".join(a.delta for a in of(evs, EventType.TOOL_CALL_ARGS))) == {"query": "tides"}
    assert [e.tool_call_id for e in of(evs, EventType.TOOL_CALL_END)] == ["call_1"]
    (result,) = of(evs, EventType.TOOL_CALL_RESULT)
    assert (result.tool_call_id, result.content, result.role) == ("call_1", "notes about tides", "tool")
    order = [e.type for _, e in evs]
    assert order.index(EventType.TOOL_CALL_END) < order.index(EventType.TOOL_CALL_RESULT)

    # the interrupt outcome carries LangGraph's interrupt id
    state = (await client.get(f"/threads/{thread}/state")).json()
    (pending,) = state["interrupts"]
    finished = evs[-1][1]
    assert finished.run_id == first and finished.outcome.type == "interrupt"
    (paused,) = finished.outcome.interrupts
    assert (paused.id, paused.reason, paused.message) == (pending["id"], "langgraph:interrupt", "Send the answer?")
    assert paused.metadata["value"] == {"question": "send it?", "message": "Send the answer?"}
    # the snapshot and its deltas rebuild the thread's state (messages travel as messages)
    assert replayed_state(evs) == state_of(state["values"]) == {"notes": ["agent 1", "agent 3"]}
    (snapshot,) = of(evs, EventType.MESSAGES_SNAPSHOT)
    assert [(m.role, m.id) for m in snapshot.messages] == [
        ("user", "u1"),
        ("assistant", starts[0].message_id),
        ("tool", result.message_id),
        ("assistant", starts[1].message_id),
    ]
    assert snapshot.messages[1].tool_calls[0].function.arguments == json.dumps({"query": "tides"})
    # graphtape's facts: each recorded call once, made live
    calls = customs(evs, "graphtape.call")
    assert [(c["kind"], c["source"], c["served"]) for c in calls] == [
        ("llm", "live", False),
        ("tool", "live", False),
        ("llm", "live", False),
    ]
    assert [c["node_path"] for c in calls] == ["agent", "tools", "agent"]
    assert not customs(evs, "graphtape.savings")

    # resume: the interrupt answered by id, the run finishes, parentRunId is the paused run
    second = str(uuid.uuid4())
    messages = [m.model_dump(by_alias=True, exclude_none=True) for m in snapshot.messages]
    body = run_input(
        thread, second, messages=messages, resume=[{"interruptId": paused.id, "status": "resolved", "payload": "yes"}]
    )
    evs2 = agui_events((await post_run(client, body)).text)
    assert evs2[0][1].parent_run_id == first and evs2[0][1].run_id == second
    assert [e.step_name for e in of(evs2, EventType.STEP_FINISHED)] == ["approve"]
    assert evs2[-1][1].outcome.type == "success"
    assert replayed_state(evs2) == {"notes": ["agent 1", "agent 3"], "approved": "yes"}
    assert not customs(evs2, "graphtape.call") and not of(evs2, EventType.TEXT_MESSAGE_START)
    assert len(of(evs2, EventType.MESSAGES_SNAPSHOT)[0].messages) == 4
    final = (await client.get(f"/threads/{thread}/state")).json()
    assert final["values"]["approved"] == "yes" and final["next"] == []
    # both runs are on the tape, the HTTP run id being the recorded run's id
    recorded = tape.runs(thread_id=thread)
    assert [r.status for r in recorded] == ["finished", "interrupted"]
    assert recorded[1].run_id == studio_run


async def test_a_cancelled_interrupt_and_the_legacy_forwarded_resume(client):
    thread = f"t-{uuid.uuid4().hex[:8]}"
    evs = agui_events((await post_run(client, hello(thread))).text)
    (paused,) = evs[-1][1].outcome.interrupts
    cancel = run_input(thread, resume=[{"interruptId": paused.id, "status": "cancelled"}])
    evs2 = agui_events((await post_run(client, cancel)).text)
    assert replayed_state(evs2)["approved"] == {CANCELLED_MARK: True, "interrupt_id": paused.id}

    other = f"t-{uuid.uuid4().hex[:8]}"
    agui_events((await post_run(client, hello(other))).text)
    legacy = run_input(other, forwardedProps={"command": {"resume": None}})
    evs3 = agui_events((await post_run(client, legacy)).text)
    assert evs3[-1][1].outcome.type == "success"
    assert replayed_state(evs3)["approved"] is None and "approved" in replayed_state(evs3)


async def test_state_from_the_client_is_written_with_the_new_messages_only(client):
    thread = f"t-{uuid.uuid4().hex[:8]}"
    tools = [{"name": "confirm", "description": "Ask the user", "parameters": {"type": "object"}}]
    first = {**hello(thread), "state": {"topic": "tides"}, "tools": tools}
    evs = agui_events((await post_run(client, first)).text)
    assert evs[1][1].snapshot == {"notes": [], "topic": "tides"}
    (run,) = (await client.get(f"/threads/{thread}/runs")).json()
    assert run["kwargs"]["config"]["configurable"]["agui"] == {"tools": tools}  # the graph reads them in its config
    assert run["metadata"]["agui_run_id"] == first["runId"]
    # a second run: the client sends the whole conversation and its state back; only the new message counts
    (paused,) = evs[-1][1].outcome.interrupts
    agui_events(
        (await post_run(client, run_input(thread, resume=[{"interruptId": paused.id, "status": "resolved"}]))).text
    )
    state = (await client.get(f"/threads/{thread}/state")).json()["values"]
    history = [m for _, e in evs if e.type == EventType.MESSAGES_SNAPSHOT for m in e.messages]
    again = [m.model_dump(by_alias=True, exclude_none=True) for m in history]
    again.append({"id": "u2", "role": "user", "content": "And the moon?"})
    body = run_input(thread, messages=again, state={"topic": "tides", "notes": state["notes"]})
    evs2 = agui_events((await post_run(client, body)).text)
    after = (await client.get(f"/threads/{thread}/state")).json()["values"]
    assert [m["id"] for m in after["messages"]][:5] == ["u1", *[m["id"] for m in again[1:4]], "u2"]
    assert after["notes"] == ["agent 1", "agent 3", "agent 5", "agent 7"]  # not doubled by the echoed state
    assert evs2[-1][1].outcome.type == "interrupt"


async def test_reconnecting_with_last_event_id_gets_the_rest_once(client, tape):
    thread, run_id = f"t-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    whole = (await post_run(client, hello(thread, run_id))).text
    blocks = [b for b in whole.strip().split("\n\n") if b.startswith("id: ")]
    assert len(blocks) > 20
    # a re-POST of the same threadId + runId is the same run, from the event after Last-Event-ID
    again = await post_run(client, hello(thread, run_id), **{"Last-Event-ID": "7"})
    assert [b for b in again.text.strip().split("\n\n") if b.startswith("id: ")] == blocks[7:]
    # or the run's stream: by the Studio run id, or the client's runId with its threadId
    studio_run = agui_events(whole)[0][1].metadata["graphtape"]["run_id"]
    assert again.headers["location"] == f"/agui/assistant/runs/{studio_run}/stream?threadId={thread}"
    for path in (
        f"{studio_run}/stream",
        f"{run_id}/stream?threadId={thread}",
        f"{studio_run}/stream?threadId={thread}",
    ):
        joined = await client.get(f"/agui/assistant/runs/{path}", headers={"Last-Event-ID": "20"})
        assert joined.status_code == 200
        assert [b for b in joined.text.strip().split("\n\n") if b.startswith("id: ")] == blocks[20:]
    assert len(tape.runs(thread_id=thread)) == 1  # never started twice


async def test_errors_before_the_stream_are_json_and_a_failure_after_it_is_run_error(client):
    thread = f"t-{uuid.uuid4().hex[:8]}"

    async def refused(path: str, body: Any, status: int, *words: str, **headers: str) -> None:
        r = await client.post(path, json=body, headers=headers)
        assert r.status_code == status, r.text
        assert r.headers["content-type"].startswith("application/json")
        for word in words:
            assert word in r.json()["error"], r.json()["error"]

    await refused("/agui/nope", hello(thread), 404, "nope", "assistant")
    await refused("/agui/assistant", {"threadId": thread}, 422, "runId", "messages")
    await refused("/agui/assistant", hello(thread), 400, "Last-Event-ID", **{"Last-Event-ID": "x"})
    resume = run_input(thread, resume=[{"interruptId": "0" * 32, "status": "resolved", "payload": 1}])
    await refused("/agui/assistant", resume, 409, "no pending interrupt")
    await refused("/agui/assistant", run_input(thread, state={"nope": 1}), 400, "'nope'", "notes")
    evs = agui_events((await post_run(client, hello(thread))).text)
    await refused("/agui/assistant", resume, 400, "0" * 32, evs[-1][1].outcome.interrupts[0].id)
    await refused("/agui/broken", hello(thread), 409, "belongs to graph 'assistant'")
    assert (await client.get("/agui/assistant/runs/nope/stream")).status_code == 404
    assert (await client.get(f"/agui/assistant/runs/nope/stream?threadId={thread}")).status_code == 404
    assert (await client.get("/agui/nope/health")).status_code == 404
    assert (await client.get("/agui/assistant/health")).json() == {
        "status": "ok",
        "protocolVersion": "1.0",
        "graph": "assistant",
    }
    assert (await client.get("/agui/health")).json()["graphs"] == ["assistant", "broken", "nested", "slow"]
    await refused("/agui/assistant", run_input(" "), 400, "threadId and runId")

    failed = agui_events((await post_run(client, hello(f"t-{uuid.uuid4().hex[:8]}"), graph="broken")).text)
    assert failed[0][1].type == EventType.RUN_STARTED
    error = failed[-1][1]
    assert (error.type, error.code, error.message) == (EventType.RUN_ERROR, "RuntimeError", "the model is down")
    assert not of(failed, EventType.RUN_FINISHED)


# -- a real server on 127.0.0.1 --------------------------------------------------------------------------


@pytest.fixture
def server_url(tmp_path):
    """The Studio with a slow-streaming model on uvicorn at 127.0.0.1, stopped after the test."""
    pytest.importorskip("uvicorn")
    import graphtape

    tape = graphtape.connect(f"sqlite:///{tmp_path}/agui.db")
    app = create_app(tape, graphs(latency=0.6), heartbeat_seconds=0.05)
    with serve_app(app, name="agui-uvicorn") as url:
        yield url, tape
    tape.close()


def test_viewers_on_a_real_server_a_disconnect_does_not_stop_the_run(server_url):
    url, tape = server_url
    thread, run_id = f"t-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    with httpx.Client(base_url=url, timeout=30) as http:
        # the first viewer reads the first events, then goes away mid-run
        with http.stream("POST", "/agui/assistant", json=hello(thread, run_id)) as first:
            assert first.status_code == 200
            lines = first.iter_lines()
            seen = [next(lines) for _ in range(3)]
        assert seen[0] == "id: 1" and json.loads(seen[1].removeprefix("data: "))["type"] == "RUN_STARTED"
        # several viewers join while it runs, each from where it wants
        results: dict[str, str] = {}

        def watch(name: str, after: str) -> None:
            with httpx.Client(base_url=url, timeout=30) as own:
                path = f"/agui/assistant/runs/{run_id}/stream?threadId={thread}"
                r = own.get(path, headers={"Last-Event-ID": after})
                results[name] = r.text

        viewers = [threading.Thread(target=watch, args=(str(n), str(n))) for n in range(3)]
        for v in viewers:
            v.start()
        for v in viewers:
            v.join(timeout=30)
    whole = agui_events(results["0"])
    assert whole[-1][1].type == EventType.RUN_FINISHED and whole[-1][1].outcome.type == "interrupt"
    assert ": heartbeat" in results["0"]  # the model is slow: comments keep the stream alive meanwhile
    for n in ("1", "2"):
        assert [i for i, _ in agui_events(results[n])] == [i for i, _ in whole][int(n) :]
    (recorded,) = tape.runs(thread_id=thread)
    assert recorded.status == "interrupted"  # the run went on to its interrupt without its first viewer


async def test_a_replay_run_reports_served_calls_and_its_savings(app, client, tape):
    """A run whose recording session replays an earlier run (flight mode, as the replay routes run it):
    its calls are served from the tape, and it ends with graphtape.savings."""
    from graphtape.record.answer import ReplayPlan
    from graphtape.replay.answerer import TapeAnswerer
    from graphtape.replay.matcher import Matcher

    recorded = agui_events((await post_run(client, hello(f"t-{uuid.uuid4().hex[:8]}"))).text)
    original = recorded[0][1].metadata["graphtape"]["run_id"]
    assistant = app.state.studio.assistants.find("assistant")
    answerer = TapeAnswerer(Matcher.from_store(tape.store, [original]), "flight")
    assistant.recorded.plan = ReplayPlan(answerer, "flight", replay_of=original)
    try:
        evs = agui_events((await post_run(client, hello(f"t-{uuid.uuid4().hex[:8]}"))).text)
    finally:
        assistant.recorded.plan = None
    calls = customs(evs, "graphtape.call")
    assert [(c["kind"], c["source"], c["served"]) for c in calls] == [
        ("llm", "tape", True),
        ("tool", "tape", True),
        ("llm", "tape", True),
    ]
    assert {c["served_from"] for c in calls} == {c["call_id"] for c in customs(recorded, "graphtape.call")}
    (savings,) = customs(evs, "graphtape.savings")
    assert (savings["mode"], savings["replay_of"], savings["served"], savings["live"]) == ("flight", original, 3, 0)
    assert savings["tokens_saved"] == sum(c.get("tokens", 0) for c in customs(recorded, "graphtape.call")) > 0
    names = [getattr(e, "name", e.type) for _, e in evs]
    assert names[-3:] == [EventType.MESSAGES_SNAPSHOT, "graphtape.savings", EventType.RUN_FINISHED]
    # served answers still reach the client as messages and tool calls
    texts = "".join(e.delta for e in of(evs, EventType.TEXT_MESSAGE_CONTENT))
    assert texts == "Let me look that up.The tides follow the moon, twice a day."
    assert json.loads("".join(a.delta for a in of(evs, EventType.TOOL_CALL_ARGS))) == {"query": "tides"}
    assert evs[-1][1].outcome.type == "interrupt"


# -- the @ag-ui/client npm package (optional: needs node and its node_modules) ------------------------------

CLIENT_SCRIPT = r"""
const { HttpAgent } = require("@ag-ui/client");
const [url, threadId] = process.argv.slice(2);

async function main() {
  const agent = new HttpAgent({
    url, threadId, initialMessages: [{ id: "u1", role: "user", content: "Tell me about tides" }],
  });
  const types = [];
  const first = await agent.runAgent({}, { onEvent: ({ event }) => { types.push(event.type); } });
  const paused = agent.pendingInterrupts.map((i) => ({ id: i.id, reason: i.reason }));
  const afterFirst = { messages: agent.messages.length, state: agent.state, newMessages: first.newMessages.length };
  await agent.runAgent({ resume: [{ interruptId: paused[0].id, status: "resolved", payload: "yes" }] });
  console.log(JSON.stringify({
    types, paused, afterFirst, state: agent.state, pending: agent.pendingInterrupts.length,
    roles: agent.messages.map((m) => m.role), toolArgs: agent.messages[1].toolCalls?.[0]?.function.arguments,
  }));
}
main().catch((err) => { console.error(err && err.stack || String(err)); process.exit(1); });
"""


def _client_modules() -> str | None:
    """A node_modules holding @ag-ui/client: $GRAPHTAPE_AGUI_NODE_MODULES, else the web UI's."""
    import os
    import pathlib

    candidates = [os.environ.get("GRAPHTAPE_AGUI_NODE_MODULES", ""), str(pathlib.Path("web/node_modules").resolve())]
    root = pathlib.Path(__file__).resolve().parents[1]
    candidates.append(str(root / "web" / "node_modules"))
    for path in candidates:
        if path and (pathlib.Path(path) / "@ag-ui" / "client" / "package.json").exists():
            return path
    return None


def test_the_ag_ui_client_runs_resumes_and_validates_the_stream(request, tmp_path):
    import os
    import shutil
    import subprocess

    modules = _client_modules()
    node = shutil.which("node")
    if modules is None or node is None:
        pytest.skip("@ag-ui/client is not installed (npm install @ag-ui/client; GRAPHTAPE_AGUI_NODE_MODULES=...)")
    url, tape = request.getfixturevalue("server_url")
    script = tmp_path / "agui_client.cjs"
    script.write_text(CLIENT_SCRIPT)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "NODE_PATH": modules}
    done = subprocess.run(
        [node, str(script), f"{url}/agui/assistant", thread], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["types"][0] == "RUN_STARTED" and out["types"][-1] == "RUN_FINISHED"
    assert {"TEXT_MESSAGE_CONTENT", "TOOL_CALL_ARGS", "TOOL_CALL_RESULT", "STATE_DELTA"} <= set(out["types"])
    assert [p["reason"] for p in out["paused"]] == ["langgraph:interrupt"]
    assert out["afterFirst"]["messages"] == 4 and out["afterFirst"]["state"] == {"notes": ["agent 1", "agent 3"]}
    assert out["state"] == {"notes": ["agent 1", "agent 3"], "approved": "yes"} and out["pending"] == 0
    assert out["roles"] == ["user", "assistant", "tool", "assistant"]
    assert json.loads(out["toolArgs"]) == {"query": "tides"}
    assert [r.status for r in tape.runs(thread_id=thread)] == ["finished", "interrupted"]


async def test_subgraph_nodes_are_steps_of_their_own_and_a_graph_may_have_no_messages(client):
    thread = f"t-{uuid.uuid4().hex[:8]}"
    evs = agui_events((await post_run(client, run_input(thread, state={"question": "tides"}), graph="nested")).text)
    steps = [(e.type.value, e.step_name) for _, e in evs if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)]
    assert steps == [
        ("STEP_STARTED", "sub"),
        ("STEP_STARTED", "sub/inner"),
        ("STEP_FINISHED", "sub/inner"),
        ("STEP_FINISHED", "sub"),
        ("STEP_STARTED", "outer"),
        ("STEP_FINISHED", "outer"),
    ]
    final = (await client.get(f"/threads/{thread}/state")).json()["values"]
    assert evs[1][1].snapshot == {"question": "tides"}
    assert replayed_state(evs) == final and final["answer"]  # the subgraph's own values are not the state
    assert len(of(evs, EventType.TEXT_MESSAGE_START)) == 2  # the inner and the outer model answers
    assert of(evs, EventType.MESSAGES_SNAPSHOT)[0].messages == []
    assert [c["node_path"] for c in customs(evs, "graphtape.call")] == ["sub/inner", "outer"]
    assert evs[-1][1].outcome.type == "success"


async def test_a_cancelled_run_finishes_with_the_cancelled_outcome(client, tape):
    thread = f"t-{uuid.uuid4().hex[:8]}"
    streaming = asyncio.create_task(client.post("/agui/slow", json=hello(thread)))
    runs: list[Any] = []
    for _ in range(250):
        listed = await client.get(f"/threads/{thread}/runs")
        runs = listed.json() if listed.status_code == 200 else []
        if streaming.done() or (runs and runs[0]["status"] == "running"):
            break
        await asyncio.sleep(0.02)
    (run,) = runs
    cancelled = await client.post(f"/threads/{thread}/runs/{run['run_id']}/cancel?wait=true")
    assert cancelled.status_code == 204
    evs = agui_events((await streaming).text)
    assert evs[0][1].type == EventType.RUN_STARTED
    assert evs[-1][1].type == EventType.RUN_FINISHED and evs[-1][1].outcome.type == "cancelled"
    (recorded,) = tape.runs(thread_id=thread)
    assert recorded.status != "finished"


async def test_a_client_reconnects_to_another_server_process_on_the_same_store(client, tape, store_url):
    """The events are read from the store: a second Studio on the same store (another process in
    production) serves the rest of a run it did not execute, by Studio id or by a re-POST."""
    import graphtape

    thread, run_id = f"t-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    whole = (await post_run(client, hello(thread, run_id))).text
    blocks = [b for b in whole.strip().split("\n\n") if b.startswith("id: ")]
    studio_run = agui_events(whole)[0][1].metadata["graphtape"]["run_id"]
    other_tape = graphtape.connect(store_url)
    other = create_app(other_tape, graphs(), heartbeat_seconds=5)
    try:
        async with app_client(other, base_url="http://127.0.0.1", timeout=30) as second:
            joined = await second.get(f"/agui/assistant/runs/{studio_run}/stream", headers={"Last-Event-ID": "5"})
            assert [b for b in joined.text.strip().split("\n\n") if b.startswith("id: ")] == blocks[5:]
            again = await post_run(second, hello(thread, run_id), **{"Last-Event-ID": "11"})
            assert [b for b in again.text.strip().split("\n\n") if b.startswith("id: ")] == blocks[11:]
    finally:
        other_tape.close()
    assert len(tape.runs(thread_id=thread)) == 1  # served again, never run again


async def test_the_publisher_closes_what_a_model_left_open_and_keeps_every_argument_chunk():
    """Driven with parts as LangGraph streams them: text then two tool calls in one message, the
    first call's arguments split over chunks that name no id, and no last chunk (the task's end
    closes the message and its calls)."""
    from langchain_core.messages import AIMessageChunk

    from graphtape.server.studio.agui import AguiPublisher

    emitted: list[tuple[str, Any]] = []

    async def emit(name: str, data: Any) -> None:
        emitted.append((name, data))

    publisher = AguiPublisher("r1", "t1", {"agui": {"run_id": "client-run"}}, emit, frozenset())
    meta = {"langgraph_checkpoint_ns": "agent:T1"}

    def chunk(content: str = "", *calls: tuple[str | None, str, str | None, int]) -> Any:
        pieces = [{"name": n, "args": a, "id": i, "index": x, "type": "tool_call_chunk"} for n, a, i, x in calls]
        return (AIMessageChunk(id="m1", content=content, tool_call_chunks=pieces), meta)

    await publisher.started()
    await publisher.part((), "tasks", {"id": "T1", "name": "agent", "input": {}, "triggers": ["start"]})
    await publisher.part((), "messages", chunk("Hi "))
    await publisher.part((), "messages", chunk("", ("a", '{"x":', "c1", 0)))
    await publisher.part((), "messages", chunk("", (None, " 1}", None, 0)))
    await publisher.part((), "messages", chunk("", ("b", "{}", "c2", 1)))
    await publisher.part((), "tasks", {"id": "T1", "name": "agent", "error": None, "result": {}, "interrupts": []})
    await publisher.ended({"messages": [], "n": 1}, [])
    evs = [(i, EVENTS.validate_python(data)) for i, (_, data) in enumerate(emitted, 1)]
    assert [name for name, _ in emitted] == [e.type.value for _, e in evs]
    shown = [(e.type.value, getattr(e, "tool_call_id", None) or getattr(e, "delta", None)) for _, e in evs]
    assert shown == [
        ("RUN_STARTED", None),
        ("STEP_STARTED", None),
        ("TEXT_MESSAGE_START", None),
        ("TEXT_MESSAGE_CONTENT", "Hi "),
        ("TEXT_MESSAGE_END", None),
        ("TOOL_CALL_START", "c1"),
        ("TOOL_CALL_ARGS", "c1"),
        ("TOOL_CALL_ARGS", "c1"),
        ("TOOL_CALL_START", "c2"),
        ("TOOL_CALL_ARGS", "c2"),
        ("TOOL_CALL_END", "c1"),
        ("TOOL_CALL_END", "c2"),
        ("STEP_FINISHED", None),
        ("STATE_SNAPSHOT", None),
        ("MESSAGES_SNAPSHOT", None),
        ("RUN_FINISHED", None),
    ]
    assert "".join(e.delta for _, e in evs if e.type == EventType.TOOL_CALL_ARGS and e.tool_call_id == "c1") == (
        '{"x": 1}'
    )
    assert evs[0][1].run_id == evs[-1][1].run_id == "client-run" and evs[13][1].snapshot == {"n": 1}


async def test_a_strict_replay_that_diverges_reports_the_divergence_then_run_error(app, client, tape):
    from graphtape.record.answer import ReplayPlan
    from graphtape.replay.answerer import TapeAnswerer
    from graphtape.replay.matcher import Matcher

    recorded = agui_events((await post_run(client, hello(f"t-{uuid.uuid4().hex[:8]}"))).text)
    original = recorded[0][1].metadata["graphtape"]["run_id"]
    assistant = app.state.studio.assistants.find("assistant")
    answerer = TapeAnswerer(Matcher.from_store(tape.store, [original]), "strict")
    assistant.recorded.plan = ReplayPlan(answerer, "strict", replay_of=original)
    asked = run_input(f"t-{uuid.uuid4().hex[:8]}", messages=[{"id": "u1", "role": "user", "content": "Something else"}])
    try:
        evs = agui_events((await post_run(client, asked)).text)
    finally:
        assistant.recorded.plan = None
    (divergence,) = customs(evs, "graphtape.divergence")
    assert (divergence["kind"], divergence["node_path"], divergence["run_id"]) == ("llm", "agent", original)
    assert "Something else" in divergence["diff"]
    (savings,) = customs(evs, "graphtape.savings")
    assert (savings["mode"], savings["served"]) == ("strict", 0)
    names = [getattr(e, "name", e.type) for _, e in evs]
    assert names[-3:] == ["graphtape.divergence", "graphtape.savings", EventType.RUN_ERROR]
    assert evs[-1][1].code == "Divergence"


async def test_a_breakpoint_set_by_the_client_pauses_the_run_and_a_run_without_input_continues(client):
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = {**hello(thread), "forwardedProps": {"graphtape": {"interruptBefore": ["tools"]}}}
    evs = agui_events((await post_run(client, body)).text)
    assert customs(evs, "graphtape.breakpoint") == [{"next": ["tools"], "before": ["tools"], "after": []}]
    assert of(evs, EventType.RUN_FINISHED)[-1].outcome.type == "success"
    assert "tools" not in [e.step_name for e in of(evs, EventType.STEP_STARTED)]  # paused before it
    # no new message: the run goes on from the breakpoint, through the tool, to the approval interrupt
    evs2 = agui_events((await post_run(client, run_input(thread))).text)
    assert "tools" in [e.step_name for e in of(evs2, EventType.STEP_STARTED)]
    assert not customs(evs2, "graphtape.breakpoint")
    assert of(evs2, EventType.RUN_FINISHED)[-1].outcome.type == "interrupt"

    bad = {**hello(thread), "forwardedProps": {"graphtape": {"interruptBefore": "tools"}}}
    r = await client.post("/agui/assistant", json=bad)
    assert r.status_code == 400 and "interruptBefore must be a list" in r.json()["error"]
