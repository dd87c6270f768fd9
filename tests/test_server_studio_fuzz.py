"""Random request bodies against the Studio API: never a 5xx, always a JSON answer (or a stream).

The bodies mix the fields the routes read with values of every JSON kind,
so validation, the run's own checks and the graph's failures are all
exercised; whatever is wrong must come back as a 4xx with a message, or as
a run that ended in error, never as a server error or a hanging request.
"""

from __future__ import annotations

import tempfile

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphtape
from graphtape.server.studio import create_app
from graphtape.server.studio.assistants import assistant_id_for
from tests.graphs import build_agent
from tests.studio_graphs import build_doc

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def loose(*choices: object) -> st.SearchStrategy[object]:
    """A field's value: one of the meaningful ``choices`` or any JSON value."""
    return st.sampled_from(choices) | json_values


run_bodies = st.fixed_dictionaries(
    {"assistant_id": loose("doc", "agent", assistant_id_for("doc"))},
    optional={
        "input": loose({"topic": "t"}, {"messages": [{"role": "user", "content": "hi"}]}, None),
        "command": loose({"resume": "yes"}, {"goto": "publish"}, {"update": {"draft": "d"}}, {"goto": "nowhere"}),
        "config": loose({"configurable": {"x": 1}}, {"recursion_limit": 2}, {"tags": ["a"]}),
        "stream_mode": loose("values", ["updates", "messages-tuple"], "messages", ["custom", "debug"]),
        "interrupt_before": loose(["approve"], "*", ["nope"]),
        "interrupt_after": loose(["draft"], "*"),
        "checkpoint_id": loose("0", "not-a-checkpoint"),
        "checkpoint": loose({"checkpoint_id": "x"}, {"checkpoint_ns": "a:b"}),
        "metadata": json_values,
        "context": json_values,
        "multitask_strategy": loose("reject", "enqueue", "interrupt"),
        "stream_subgraphs": loose(True, False),
        "if_not_exists": loose("create", "reject"),
    },
)

routes = st.sampled_from(
    [
        ("POST", "/threads/{tid}/runs/wait"),
        ("POST", "/threads/{tid}/runs/stream"),
        ("POST", "/runs/wait"),
        ("POST", "/threads/{tid}/state"),
        ("POST", "/threads/{tid}/history"),
        ("POST", "/threads/{tid}/state/checkpoint"),
        ("POST", "/threads"),
        ("POST", "/threads/search"),
        ("POST", "/assistants/search"),
        ("PATCH", "/threads/{tid}"),
    ]
)

state_bodies = st.fixed_dictionaries(
    {},
    optional={
        "values": loose({"draft": "d"}, {"nope": 1}, [{"draft": "x"}]),
        "as_node": loose("draft", "approve", "nope", "__start__"),
        "checkpoint_id": loose("x"),
        "checkpoint": loose({"checkpoint_id": "x"}),
        "limit": loose(1, 0, -3, 10_000),
        "before": loose("x", {"checkpoint_id": "y"}),
        "metadata": json_values,
        "thread_id": loose("t", None),
        "if_exists": loose("raise", "do_nothing"),
        "graph_id": loose("doc", "nope"),
        "status": loose("idle", "busy", "x"),
        "offset": loose(0, -1),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(st.tuples(routes, run_bodies | state_bodies | json_values), min_size=1, max_size=4))
def test_random_bodies_never_get_a_server_error(requests):
    with tempfile.TemporaryDirectory() as folder:
        tape = graphtape.connect(f"sqlite:///{folder}/fuzz.db")
        try:
            # Starlette's TestClient calls the app at the host name "testserver"
            app = create_app(tape, {"doc": build_doc(), "agent": build_agent()}, allowed_hosts=["testserver"])
            with TestClient(app, raise_server_exceptions=False) as client:
                tid = client.post("/threads", json={}).json()["thread_id"]
                client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "input": {"topic": "x"}})
                for (method, path), body in requests:
                    r = client.request(method, path.format(tid=tid), json=body)
                    assert r.status_code < 500, (method, path, body, r.text)
                    if r.headers["content-type"].startswith("text/event-stream"):
                        assert r.text.startswith("id: 1\nevent: metadata\n")
                    else:
                        r.json()
        finally:
            tape.close()


def test_deep_bodies_on_every_route_of_a_real_server_get_a_4xx_and_every_thread_stays_listed(tmp_path):
    """JSON nested 900 levels (in every field the routes read) sent to every POST, PUT and PATCH
    route of the OpenAPI document, through a real uvicorn server: each a 422 naming the depth
    limit, never a 5xx, and ``POST /threads/search`` still lists every thread afterwards."""
    import httpx

    from tests.live_server import serve_app

    deep: object = "x"
    for level in range(900):
        deep = {"k": deep} if level % 2 else [deep]  # an object outside, as metadata and input are
    body = {key: deep for key in ("metadata", "input", "values", "config", "checkpoint", "value", "output")}
    tape = graphtape.connect(f"sqlite:///{tmp_path}/deep.db")
    try:
        app = create_app(tape, {"doc": build_doc(), "agent": build_agent()})
        with serve_app(app) as base, httpx.Client(base_url=base, timeout=30) as client:
            tid = client.post("/threads", json={"metadata": {"kept": True}}).json()["thread_id"]
            paths = client.get("/openapi.json").json()["paths"]
            tried = refused = 0
            for path, operations in paths.items():
                for method in set(operations) & {"post", "put", "patch"}:
                    url = path.replace("{thread_id}", tid)
                    for name in ("run_id", "checkpoint_id", "assistant_id", "session_id", "call_id"):
                        url = url.replace("{" + name + "}", "x")
                    r = client.request(method.upper(), url, json=body)
                    assert r.status_code < 500, (method, path, r.status_code, r.text[:300])
                    takes = (operations[method].get("requestBody") or {}).get("content") or {}
                    if takes and "application/json" not in takes:  # a tape file: JSON is the wrong type
                        assert r.status_code == 415, (method, path, r.text[:300])
                        continue
                    tried += 1
                    if r.status_code == 422 and "levels deep" in r.text:
                        assert "the limit is 100" in r.json()["error"]
                        refused += 1
            assert tried >= 30 and refused == tried
            found = client.post("/threads/search", json={})
            assert found.status_code == 200 and [t["thread_id"] for t in found.json()] == [tid]
    finally:
        tape.close()
