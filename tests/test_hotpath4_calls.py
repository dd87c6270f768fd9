"""Blobs every call or run refers to, serialised once per process (issue 13, benchmarks 2-4).

A chat model's parameters are the same on every call, and the package
versions on every run: their stored bytes and address are worked out once
(``llm.model_request``, ``Session._put_versions``) instead of by
``put_json`` each time. The address each event refers to, and the bytes
stored under it, must be what ``put_json`` gives, and each run must still
write the blob itself (a run does not count on another run's blobs: garbage
collection may delete them between runs).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape import serde
from graphtape.record import llm
from graphtape.record import session as session_mod
from graphtape.testing import SeededChatModel


class State(TypedDict):
    topic: str
    answer: str


def graph(model: Any) -> Any:
    def ask(state: State) -> dict[str, Any]:
        return {"answer": str(model.invoke([HumanMessage(f"about {state['topic']}")]).content)}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile()


def test_model_request_blob_is_what_put_json_stores() -> None:
    llm._REQUESTS.clear()
    model = SeededChatModel(seed=1, latency=0, temperature=0.5)
    request, _, blob = llm.model_request(model, None, {}, frozenset())
    assert blob is None  # worked out: nothing remembered yet
    for _ in range(2):
        again, _, blob = llm.model_request(model, None, {}, frozenset())
        assert again == request
        assert blob == (serde.stored_json(request), serde.digest(serde.stored_json(request)))
    model.temperature = 0.25  # another set of parameters: another entry, another blob
    changed, _, blob = llm.model_request(model, None, {}, frozenset())
    assert blob is None and changed != request
    _, _, blob = llm.model_request(model, None, {}, frozenset())
    assert blob is not None and blob[0] == serde.stored_json(changed)


@pytest.mark.parametrize("remembered", [False, True])
def test_each_run_refers_to_and_writes_the_request_and_versions_blobs(remembered: bool) -> None:
    llm._REQUESTS.clear()
    session_mod._VERSIONS_BLOB = None
    model = SeededChatModel(seed=2, latency=0)
    if remembered:  # both memos filled by an earlier run in another tape
        with tempfile.TemporaryDirectory() as d:
            other = graphtape.connect(f"sqlite:///{d}/other.db")
            other.record(graph(model), name="g").invoke({"topic": "x", "answer": ""})
            other.close()
        assert session_mod._VERSIONS_BLOB is not None and any(llm._REQUESTS.values())
    with tempfile.TemporaryDirectory() as d:
        tape = graphtape.connect(f"sqlite:///{Path(d)}/t.db")
        rec = tape.record(graph(model), name="g")
        for topic in ("a", "b"):
            rec.invoke({"topic": topic, "answer": ""}, {"configurable": {"thread_id": f"t-{topic}"}})
            run_id = rec.last_run_id
            evs = {e.kind: e.data for e in tape.store.events(run_id)}
            versions = session_mod._package_versions()
            assert evs["run_started"]["versions"] == serde.digest(serde.stored_json(versions))
            assert tape.store.get_json(evs["run_started"]["versions"]) == versions
            request, _, _ = llm.model_request(model, None, {}, tape.redact_keys)
            assert evs["llm_call"]["request"] == serde.digest(serde.stored_json(request))
            assert tape.store.get_json(evs["llm_call"]["request"]) == request
        tape.close()


def test_each_run_writes_the_blobs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second run's batch holds the versions and request blobs too (a run writes what it refers to)."""
    model = SeededChatModel(seed=3, latency=0)
    with tempfile.TemporaryDirectory() as d:
        tape = graphtape.connect(f"sqlite:///{d}/t.db")
        rec = tape.record(graph(model), name="g")
        rec.invoke({"topic": "warm", "answer": ""})
        written: list[set[str]] = []
        write = type(tape.store).write

        def spy(self: Any, batch: Any, **kw: Any) -> None:
            written.append(set(batch.blobs))
            write(self, batch, **kw)

        monkeypatch.setattr(type(tape.store), "write", spy)
        rec.invoke({"topic": "again", "answer": ""})
        monkeypatch.undo()
        blobs = set().union(*written)
        versions = serde.digest(serde.stored_json(session_mod._package_versions()))
        request, _, _ = llm.model_request(model, None, {}, tape.redact_keys)
        assert versions in blobs
        assert serde.digest(serde.stored_json(request)) in blobs
        tape.close()
