"""LangGraph's own front ends against the Studio: the requests Agent Chat UI, ``useStream`` and ``RemoteGraph`` make.

Agent Chat UI lists a user's threads with ``threads.search`` filtered by the
graph name or by the assistant's UUID (``{"metadata": {"assistant_id": ...}}``)
and labels each with the first message of its current ``values``;
``RemoteGraph.get_state`` with only a thread id posts to
``/threads/{id}/state/checkpoint`` without a checkpoint id. Each test drives
the real client (``langgraph-sdk``, ``langgraph.pregel.remote.RemoteGraph``)
against ``create_app`` served by uvicorn, and checks the answer has the shape
LangGraph's own server (langgraph-api) gives.
"""

from __future__ import annotations

import asyncio
from typing import TypedDict

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
langgraph_sdk = pytest.importorskip("langgraph_sdk")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.pregel.remote import RemoteGraph  # noqa: E402
from langgraph.types import Command  # noqa: E402

import graphtape  # noqa: E402
from graphtape.server.studio import create_app  # noqa: E402
from graphtape.server.studio.assistants import assistant_id_for  # noqa: E402
from tests.live_server import serve_app, without_sdk_keys  # noqa: E402
from tests.studio_graphs import build_doc, studio_graphs  # noqa: E402


class Broken(TypedDict, total=False):
    why: str


def build_broken():
    """One node that raises: a thread whose last run failed."""

    def fail(s: Broken):
        raise ValueError(f"boom: {s.get('why', '')}")

    b = StateGraph(Broken)
    b.add_node(fail)
    b.add_edge(START, "fail")
    b.add_edge("fail", END)
    return b.compile()


@pytest.fixture
def studio_tape(tmp_path):
    tape = graphtape.connect(f"sqlite:///{tmp_path}/front.db")
    yield tape
    tape.close()


@pytest.fixture
def studio_url(studio_tape, monkeypatch):
    without_sdk_keys(monkeypatch)
    graphs = {**studio_graphs(), "broken": build_broken()}
    with serve_app(create_app(studio_tape, graphs, heartbeat_seconds=0.05), name="front-ends-uvicorn") as url:
        yield url


async def test_thread_search_answers_each_threads_values_interrupts_and_error(studio_url):
    """What Agent Chat UI's thread history reads: the current values (its first message), the
    interrupts keyed by task id, the error of a failed run, and when the state last changed."""
    async with langgraph_sdk.get_client(url=studio_url) as client:
        chat = (await client.threads.create())["thread_id"]
        first = {"role": "user", "content": "what are tides?"}
        await client.runs.wait(chat, "agent", input={"messages": [first]})
        paused = (await client.threads.create())["thread_id"]
        await client.runs.wait(paused, "doc", input={"topic": "tides"})
        failed = (await client.threads.create())["thread_id"]
        await client.runs.wait(failed, "broken", input={"why": "no moon"}, raise_error=False)

        (listed,) = await client.threads.search(metadata={"graph_id": "agent"}, limit=100)
        assert listed["thread_id"] == chat and listed["status"] == "idle"
        messages = listed["values"]["messages"]
        assert (messages[0]["type"], messages[0]["content"]) == ("human", "what are tides?")
        assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai"]
        assert listed["interrupts"] == {} and listed["error"] is None
        assert isinstance(listed["config"], dict)
        assert listed["state_updated_at"] == (await client.threads.get_state(chat))["created_at"]

        (interrupted,) = await client.threads.search(metadata={"graph_id": "doc"}, limit=100)
        state = await client.threads.get_state(paused)
        (task,) = state["tasks"]
        (pending,) = task["interrupts"]
        assert interrupted["status"] == "interrupted" and interrupted["values"]["topic"] == "tides"
        assert interrupted["interrupts"] == {
            task["id"]: [{"id": pending["id"], "value": {"question": "publish?", "draft": state["values"]["draft"]}}]
        }

        (broken,) = await client.threads.search(metadata={"graph_id": "broken"}, status="error")
        assert broken["thread_id"] == failed
        assert broken["error"] == {"error": "ValueError", "message": "boom: no moon"}

        # the fields a client selects, and no others (values are read only when asked for)
        (slim,) = await client.threads.search(metadata={"graph_id": "doc"}, select=["thread_id", "status"])
        assert slim == {"thread_id": paused, "status": "interrupted"}

        # GET /threads/{id} answers the same fields
        got = await client.threads.get(paused)
        assert got["interrupts"] == interrupted["interrupts"] and got["values"] == interrupted["values"]
        assert got["state_updated_at"] == interrupted["state_updated_at"]


async def test_threads_carry_their_assistant_id_and_a_search_by_the_assistants_uuid_finds_them(studio_url, studio_tape):
    """Agent Chat UI configured with an assistant's UUID searches ``{"assistant_id": uuid}``."""
    agent = assistant_id_for("agent")
    async with langgraph_sdk.get_client(url=studio_url) as client:
        chat = (await client.threads.create(metadata={"who": "ui"}))["thread_id"]
        await client.runs.wait(chat, agent, input={"messages": [{"role": "user", "content": "hi"}]})
        thread = await client.threads.get(chat)
        assert thread["metadata"] == {"who": "ui", "graph_id": "agent", "assistant_id": agent}
        assert [t["thread_id"] for t in await client.threads.search(metadata={"assistant_id": agent})] == [chat]

        # an assistant made over HTTP on a graph: its threads carry its own id
        made = await client.assistants.create("doc", config={"configurable": {"who": "made"}})
        mine = (await client.threads.create())["thread_id"]
        await client.runs.wait(mine, made["assistant_id"], input={"topic": "a"})
        found = await client.threads.search(metadata={"assistant_id": made["assistant_id"]})
        assert [t["thread_id"] for t in found] == [mine]
        assert found[0]["values"]["topic"] == "a"
        # the graph name finds every thread of the graph, whichever assistant ran it
        assert mine in {t["thread_id"] for t in await client.threads.search(metadata={"graph_id": "doc"})}
        # the run that answers the interrupt, by the graph's own assistant, makes it the thread's
        await client.runs.wait(mine, "doc", command={"resume": "yes"})
        assert (await client.threads.get(mine))["metadata"]["assistant_id"] == assistant_id_for("doc")

        # a thread recorded from Python is found by its graph's assistant UUID too
        studio_tape.record(build_doc(), name="doc", checkpointer=studio_tape.saver).invoke(
            {"topic": "py"}, {"configurable": {"thread_id": "py"}}
        )
        by_uuid = await client.threads.search(metadata={"assistant_id": assistant_id_for("doc")}, limit=100)
        assert {t["thread_id"] for t in by_uuid} == {mine, "py"}
        (py,) = [t for t in by_uuid if t["thread_id"] == "py"]
        assert py["values"]["topic"] == "py" and len(py["interrupts"]) == 1


async def test_thread_search_sorts_as_langgraphs_server_and_a_new_thread_has_no_values(studio_url):
    """By ``updated_at``, last first, unless ``sort_by``/``sort_order`` say otherwise; a thread no run
    has written to answers ``values: null`` (LangGraph's ``Thread.values`` is optional)."""
    mine = {"sorted": "here"}  # these threads only

    async with langgraph_sdk.get_client(url=studio_url) as client:

        async def order(**sort):
            return [t["thread_id"] for t in await client.threads.search(metadata=mine, **sort)]

        made = await client.threads.create(metadata=mine)
        assert made["values"] is None and made["interrupts"] == {}
        first = made["thread_id"]
        second = (await client.threads.create(metadata=mine))["thread_id"]
        third = (await client.threads.create(metadata=mine))["thread_id"]
        assert (await client.threads.get(third))["values"] is None
        await client.runs.wait(first, "doc", input={"topic": "sorting"})  # its state changes (and its row)
        await client.threads.update(second, metadata={"patched": True})  # its row only

        assert await order() == [second, first, third]
        assert await order(sort_by="updated_at", sort_order="asc") == [third, first, second]
        assert await order(sort_by="created_at") == [third, second, first]
        assert await order(sort_by="created_at", sort_order="asc") == [first, second, third]
        # a patch is no change of state: the threads without a checkpoint are as old as their state
        assert await order(sort_by="state_updated_at") == [first, third, second]
        assert await order(sort_by="thread_id", sort_order="asc") == sorted([first, second, third])
        idle = sorted([second, third])
        assert await order(sort_by="status", sort_order="asc") == [*idle, first]  # "idle" < "interrupted"
        assert await order(sort_by="status", sort_order="desc") == [first, *reversed(idle)]
        assert await order(limit=1, offset=1) == [first]

        listed = {t["thread_id"]: t for t in await client.threads.search(metadata=mine)}
        assert listed[second]["values"] is None and listed[first]["values"]["topic"] == "sorting"
        assert listed[second]["state_updated_at"] == listed[second]["created_at"]
        assert listed[second]["updated_at"] > listed[second]["created_at"]
        assert listed[first]["state_updated_at"] == (await client.threads.get_state(first))["created_at"]
        # its state, read: the latest checkpoint's values (an empty state is still `{}` there)
        assert (await client.threads.get_state(third))["values"] == {}

        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.threads.search(metadata=mine, sort_by="size")  # type: ignore[arg-type]
        assert refused.value.response.status_code == 422 and "sort_by" in refused.value.response.text


def test_remote_graph_get_state_with_only_a_thread_id_answers_the_latest_state(studio_url):
    """``RemoteGraph.get_state({"configurable": {"thread_id": T}})`` posts ``{"checkpoint": {"thread_id": T}}``."""
    remote = RemoteGraph("doc", url=studio_url)
    try:
        config = {"configurable": {"thread_id": "remote-thread"}}
        out = remote.invoke({"topic": "remote"}, config)
        assert out["__interrupt__"][0]["value"]["question"] == "publish?"

        state = remote.get_state(config)
        assert state.next == ("approve",) and state.values["topic"] == "remote"
        assert state.tasks[0].interrupts[0].value["question"] == "publish?"
        assert state.config["configurable"]["checkpoint_id"]

        async def latest_async():
            try:
                return await remote.aget_state(config)
            finally:
                await remote.client.aclose()

        latest = asyncio.run(latest_async())
        assert latest.config == state.config and latest.values == state.values

        remote.invoke(Command(resume="yes"), config)
        done = remote.get_state(config)
        assert done.next == () and done.values["final"] == f"{state.values['draft']} / yes"
        # with a checkpoint id it is still that checkpoint's state
        assert remote.get_state(state.config).next == ("approve",)
    finally:
        remote.sync_client.close()
