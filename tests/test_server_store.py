"""The Studio's ``/store`` endpoints: the real ``langgraph-sdk`` client on uvicorn, and bad requests in process.

The SDK's ``client.store`` calls (put, get, search, list namespaces, delete)
run unchanged against ``create_app`` served on 127.0.0.1, and what a served
graph's node puts in its ``store`` is read back through them. In process
(httpx's ASGI transport), on every backend: the wire format of each route, and
every bad request answered with a JSON 422 that says what to fix.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
langgraph_sdk = pytest.importorskip("langgraph_sdk")

import httpx  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402
from langgraph_sdk.errors import UnprocessableEntityError  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

import graphtape  # noqa: E402
from graphtape.server.studio import create_app  # noqa: E402
from graphtape.server.studio.routes_store import studio_kv  # noqa: E402
from graphtape.store.kv import attach_store, kv_store_for  # noqa: E402
from tests.app_client import app_client, assert_error  # noqa: E402
from tests.live_server import serve_app, without_sdk_keys  # noqa: E402


class Count(TypedDict):
    user: str
    n: int


def remember(state: Count, store: BaseStore) -> dict[str, int]:
    """A node that keeps a running total per user in the store (LangGraph injects ``store``)."""
    seen = store.get(("users", state["user"]), "total")
    total = (seen.value["total"] if seen else 0) + state["n"]
    store.put(("users", state["user"]), "total", {"total": total})
    return {"n": total}


def memory_graph():
    builder = StateGraph(Count)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    return builder.compile()


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A Studio serving ``memory`` (its graph given a store on the tape's database) at 127.0.0.1."""
    without_sdk_keys(monkeypatch)
    tape = graphtape.connect(f"sqlite:///{tmp_path}/studio.db")
    graph_kv = kv_store_for(tape.store)
    app = create_app(tape, {"memory": attach_store(memory_graph(), graph_kv)})
    with serve_app(app, name="store-uvicorn") as url:
        yield url, app
    graph_kv.close()
    tape.close()


async def test_sdk_store_calls_and_a_graph_sharing_the_store(served):
    url, app = served
    async with langgraph_sdk.get_client(url=url) as client:
        assert (await client.http.get("/info"))["flags"]["store"] is True

        assert await client.store.put_item(["docs", "u1"], "a", {"title": "tides", "score": 3}) is None
        await client.store.put_item(["docs", "u1"], "b", {"title": "waves", "score": 1})
        await client.store.put_item(["docs", "u2"], "c", {"title": "tides", "score": 5}, ttl=10)
        item = await client.store.get_item(["docs", "u1"], "a")
        assert item["namespace"] == ["docs", "u1"] and item["key"] == "a"
        assert item["value"] == {"title": "tides", "score": 3}
        assert item["created_at"] == item["updated_at"]
        assert datetime.fromisoformat(item["created_at"]).utcoffset() == timedelta(0)
        assert await client.store.get_item(["docs", "u1"], "missing") is None

        found = await client.store.search_items(["docs"], filter={"title": "tides"})
        assert sorted((i["namespace"][1], i["key"]) for i in found["items"]) == [("u1", "a"), ("u2", "c")]
        assert all(i["score"] is None for i in found["items"])
        found = await client.store.search_items(["docs"], filter={"score": {"$gte": 3}}, limit=1, offset=0)
        assert [i["key"] for i in found["items"]] == ["c"]  # the most recently updated first
        found = await client.store.search_items(["docs"], query="ocean things", limit=10)  # query is ignored
        assert len(found["items"]) == 3

        assert (await client.store.list_namespaces())["namespaces"] == [["docs", "u1"], ["docs", "u2"]]
        assert (await client.store.list_namespaces(suffix=["u2"]))["namespaces"] == [["docs", "u2"]]
        assert (await client.store.list_namespaces(prefix=["docs"], max_depth=1))["namespaces"] == [["docs"]]

        await client.store.delete_item(["docs", "u1"], "a")
        assert await client.store.get_item(["docs", "u1"], "a") is None

        with pytest.raises(UnprocessableEntityError):
            await client.store.search_items(["docs"], filter={"score": {"$near": 1}})

        # the served graph's node writes to the store; the API reads what it wrote, and the other way round
        await client.store.put_item(["users", "ada"], "total", {"total": 10})
        thread = await client.threads.create()
        out = await client.runs.wait(thread["thread_id"], "memory", input={"user": "ada", "n": 5})
        assert out["n"] == 15
        assert (await client.store.get_item(["users", "ada"], "total"))["value"] == {"total": 15}
    assert studio_kv(app.state.studio).get(("users", "ada"), "total").value == {"total": 15}


def test_sync_sdk_client(served):
    url, _ = served
    with langgraph_sdk.get_sync_client(url=url) as client:
        client.store.put_item(["sync"], "k", {"v": 1})
        assert client.store.get_item(["sync"], "k")["value"] == {"v": 1}
        assert [i["key"] for i in client.store.search_items(["sync"])["items"]] == ["k"]
        client.store.delete_item(["sync"], "k")
        assert client.store.get_item(["sync"], "k") is None


def test_the_studio_closes_its_store_when_it_stops(tmp_path):
    tape = graphtape.connect(f"sqlite:///{tmp_path}/t.db")
    app = create_app(tape, {})
    with serve_app(app) as url:
        item = {"namespace": ["a"], "key": "k", "value": {}}
        assert httpx.put(f"{url}/store/items", json=item).status_code == 204
        assert app.state.studio.kv is not None
    assert app.state.studio.kv is None
    tape.close()


# -- in process, every backend ----------------------------------------------------------------------


@pytest.fixture
async def client(tape):
    app = create_app(tape, {})
    async with app_client(app) as c:
        yield c


async def test_wire_format(client):
    ns = ["n", uuid.uuid4().hex[:6]]
    r = await client.put("/store/items", json={"namespace": ns, "key": "k", "value": {"x": 1.5, "y": [1, None]}})
    assert r.status_code == 204 and r.content == b""
    r = await client.get("/store/items", params={"namespace": ".".join(ns), "key": "k"})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"namespace", "key", "value", "created_at", "updated_at"}
    assert body["namespace"] == ns and body["value"] == {"x": 1.5, "y": [1, None]}
    r = await client.get("/store/items", params={"namespace": ".".join(ns), "key": "nope"})
    assert r.status_code == 200 and r.json() is None
    r = await client.post("/store/items/search", json={"namespace_prefix": ns[:1]})
    assert [set(i) for i in r.json()["items"]] == [{"namespace", "key", "value", "created_at", "updated_at", "score"}]
    r = await client.post("/store/namespaces", json={})
    assert r.json() == {"namespaces": [ns]}
    r = await client.request("DELETE", "/store/items", json={"namespace": ns, "key": "k"})
    assert r.status_code == 204
    assert (await client.post("/store/items/search", json={})).json() == {"items": []}
    doc = (await client.get("/openapi.json")).json()
    assert {"put", "get", "delete"} <= set(doc["paths"]["/store/items"])
    assert "post" in doc["paths"]["/store/items/search"] and "post" in doc["paths"]["/store/namespaces"]


@pytest.mark.parametrize(
    ("method", "path", "payload", "words"),
    [
        ("PUT", "/store/items", {"namespace": ["a.b"], "key": "k", "value": {}}, ["'a.b'", "'.'"]),
        ("PUT", "/store/items", {"namespace": ["a", ""], "key": "k", "value": {}}, ["empty label"]),
        ("PUT", "/store/items", {"namespace": [], "key": "k", "value": {}}, ["namespace is empty"]),
        ("PUT", "/store/items", {"namespace": ["langgraph"], "key": "k", "value": {}}, ["langgraph"]),
        ("PUT", "/store/items", {"namespace": ["a"], "key": "", "value": {}}, ["key is empty"]),
        ("PUT", "/store/items", {"namespace": ["a"], "key": "k", "value": [1]}, ["value"]),
        ("PUT", "/store/items", {"namespace": ["a"], "key": "k"}, ["value"]),
        ("PUT", "/store/items", {"namespace": ["a"], "key": "k", "value": {}, "ttl": 0}, ["ttl"]),
        ("GET", "/store/items?namespace=a&key=", None, ["key is empty"]),
        ("GET", "/store/items?key=k", None, ["namespace is empty"]),
        ("GET", "/store/items?namespace=a..b&key=k", None, ["empty label"]),
        ("DELETE", "/store/items", {"namespace": ["a.b"], "key": "k"}, ["'.'"]),
        ("DELETE", "/store/items", {"namespace": ["a"], "key": ""}, ["key is empty"]),
        ("POST", "/store/items/search", {"namespace_prefix": ["x.y"]}, ["'.'"]),
        ("POST", "/store/items/search", {"filter": {"s": {"$regex": "a"}}}, ["$regex", "$eq"]),
        ("POST", "/store/items/search", {"filter": {"s": {"$gt": [1]}}}, ["$gt"]),
        ("POST", "/store/items/search", {"limit": 100000}, ["limit"]),
        ("POST", "/store/items/search", {"offset": -1}, ["offset"]),
        ("POST", "/store/namespaces", {"prefix": ["a.b"]}, ["'.'"]),
        ("POST", "/store/namespaces", {"max_depth": 0}, ["max_depth"]),
    ],
)
async def test_bad_requests_are_422_saying_what_to_fix(client, method, path, payload, words):
    r = await client.request(method, path, json=payload)
    assert_error(r, 422, *words)
    assert (await client.post("/store/namespaces", json={})).json() == {"namespaces": []}


async def test_a_value_that_is_not_json_is_refused(client):
    r = await client.put(
        "/store/items",
        content=b'{"namespace": ["a"], "key": "k", "value": {"x": NaN}}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code in (400, 422), r.text
    assert "json" in r.json()["error"].lower()
    assert (await client.get("/store/items", params={"namespace": "a", "key": "k"})).json() is None


async def test_explicit_null_ttl_and_store_default(client):
    r = await client.put("/store/items", json={"namespace": ["t"], "key": "k", "value": {}, "ttl": None})
    assert r.status_code == 204
    r = await client.put("/store/items", json={"namespace": ["t"], "key": "k2", "value": {}, "ttl": 5})
    assert r.status_code == 204
    got = await client.get("/store/items", params={"namespace": "t", "key": "k2", "refresh_ttl": "false"})
    assert got.json()["key"] == "k2"


async def test_a_served_graph_without_a_store_gets_the_apis_store_opened_on_first_use(tape):
    app = create_app(tape, {"memory": memory_graph()})  # compiled without a store
    async with app_client(app) as c:
        assert app.state.studio.kv is None  # nothing opened for graphs that never use it
        put = {"namespace": ["users", "bo"], "key": "total", "value": {"total": 2}}
        assert (await c.put("/store/items", json=put)).status_code == 204
        thread = (await c.post("/threads", json={})).json()["thread_id"]
        body = {"assistant_id": "memory", "input": {"user": "bo", "n": 3}}
        out = await c.post(f"/threads/{thread}/runs/wait", json=body)
        assert out.json()["n"] == 5, out.text
        got = await c.get("/store/items", params={"namespace": "users.bo", "key": "total"})
        assert got.json()["value"] == {"total": 5}
    assert app.state.studio.kv is None  # closed with the app
