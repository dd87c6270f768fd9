"""The Studio API fuzzed from its own OpenAPI document (schemathesis).

Every operation the document declares is called with inputs generated from
its schema, valid and invalid: no answer may be a 5xx, every answer must
match the document (status code declared, body of the declared shape, JSON
error bodies for 4xx). The app serves the test graphs on a fresh SQLite store
(the routes are the same whatever the backend; the backend suites cover the
stores).

Generated inputs alone rarely name anything that exists, so before the run
two threads are given real runs (:func:`_seed`), and hooks put their real ids
in the generated requests: a path's ``thread_id``, ``checkpoint_id``,
``run_id``, ``call_id``, ... become real ones, of the same thread or of the
other (another thread's checkpoint or run named with a thread must be refused,
whatever the method); bodies get real checkpoint ids, values nested just
under, at and beyond the JSON depth limit, and integers beyond what a database
column holds. After the run the store must still list every thread.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.checks import negative_data_rejection, positive_data_acceptance  # noqa: E402
from schemathesis.python.asgi import get_client  # noqa: E402
from schemathesis.specs.openapi.checks import allow_header_conformance  # noqa: E402

import graphtape  # noqa: E402
from graphtape.server.studio import bounds, create_app  # noqa: E402
from tests.studio_graphs import studio_graphs  # noqa: E402

# the runs a request starts (a replay, a fork) go on in the app's workers while hypothesis draws
# the next case, and the graphs' fake models use the random module: hypothesis sees the global
# random state move under a draw and warns, though no strategy here uses it
pytestmark = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning"
)

#: where the app's store lives for this module (a temporary folder made by the lazy loader below)
_state: dict[str, Any] = {}

#: the real ids the hooks put in requests, by kind (filled by :func:`_seed` before the first request)
_ids: dict[str, list[str]] = {}

#: the ids a DELETE is given instead: a third thread and a second debug session, so that the
#: other routes still find the two seeded threads
_victims: dict[str, list[str]] = {}

#: which thread each seeded checkpoint and run belongs to, and which run each call
_owner: dict[str, str] = {}

#: nesting depths of the deep values put in bodies: well under, just under, at and over the limit
_DEPTHS = (40, bounds.DEFAULT_MAX_JSON_DEPTH - 2, bounds.DEFAULT_MAX_JSON_DEPTH - 1, bounds.DEFAULT_MAX_JSON_DEPTH, 250)

#: integers beyond a signed 64-bit column, and near its end (an offset plus a limit overflows)
_BIG = (2**63 - 10, 2**63, 2**64 + 1, -(2**63) - 1, 10**30)


def _app():
    import tempfile

    folder = tempfile.TemporaryDirectory(prefix="graphtape-openapi-")
    _state["folder"] = folder
    tape = graphtape.connect(f"sqlite:///{folder.name}/tape.db")
    _state["tape"] = tape
    # in process, schemathesis calls the app at the host name "testserver"
    app = create_app(
        tape, studio_graphs(), max_body_bytes=256 * 1024, heartbeat_seconds=1.0, allowed_hosts=["testserver"]
    )
    _state["app"] = app
    return app


# a tape file upload is bytes whichever of its two types it is sent as
schemathesis.serializer.alias("application/x-ndjson", "application/octet-stream")
schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


def _seed() -> None:
    """Two threads (and a third to delete), each with a finished run and an interrupted one, through
    the app itself: real thread, checkpoint, run and call ids, an assistant and debug sessions."""
    client = get_client(_state["app"])
    for n in range(3):
        tid = client.post("/threads", json={"metadata": {"seeded": True}}).json()["thread_id"]
        if n == 2:
            _victims["thread_id"] = [tid]
            run = client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "input": {"topic": "v"}})
            assert run.status_code == 200, run.text
            _victims["run_id"] = [r["run_id"] for r in client.get(f"/threads/{tid}/runs").json()]
            continue
        _ids.setdefault("thread_id", []).append(tid)
        for topic in ("first", "second"):
            run = client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "input": {"topic": topic}})
            assert run.status_code == 200, run.text
            if topic == "first":
                client.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "doc", "command": {"resume": "y"}})
        for checkpoint in client.get(f"/threads/{tid}/history", params={"limit": 100}).json():
            cid = checkpoint["checkpoint"]["checkpoint_id"]
            _ids.setdefault("checkpoint_id", []).append(cid)
            _owner[cid] = tid
        for run in client.get(f"/threads/{tid}/runs").json():
            _ids.setdefault("run_id", []).append(run["run_id"])
            _owner[run["run_id"]] = tid
            for call in client.get(f"/graphtape/runs/{run['run_id']}/calls").json()["calls"]:
                _ids.setdefault("call_id", []).append(call["call_id"])
                _owner[call["call_id"]] = run["run_id"]
    _ids["run_or_thread_id"] = _ids["run_id"] + _ids["thread_id"]
    _ids["assistant_id"] = ["doc", client.post("/assistants", json={"graph_id": "doc"}).json()["assistant_id"]]
    _ids["graph_id"] = ["doc", "agent"]
    for kind in (_ids, _victims):
        session = client.post("/graphtape/debug", json={"run_id": _ids["run_id"][0]})
        assert session.ok, session.text
        kind["session_id"] = [session.json()["session_id"]]


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    _seed()
    yield
    tape = _state.pop("tape", None)
    if tape is not None:
        tape.close()
    folder = _state.pop("folder", None)
    if folder is not None:
        folder.cleanup()


def _deep(depth: int, as_list: bool) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value] if as_list else {"k": value}
    return value


@schema.hook
def flatmap_path_parameters(context, path_parameters):
    """Each id in the path: as generated, or a real one of its kind (of either thread). A DELETE
    is given the third thread and the second session, so the two seeded threads stay; a run id of
    theirs with the third thread must be refused."""
    if not isinstance(path_parameters, dict):
        return st.just(path_parameters)
    deleting = context.operation is not None and context.operation.method.upper() == "DELETE"
    choices = {}
    for name, value in path_parameters.items():
        real = list(_ids.get(name, []))
        if deleting and name in ("thread_id", "session_id"):
            real = _victims[name]
        elif deleting and name == "run_id":
            real += _victims[name]
        choices[name] = st.sampled_from([value, *real]) if real else st.just(value)
    return st.fixed_dictionaries(choices)


def _bodies(body: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``body`` changed in one way: a real checkpoint id (maybe another thread's), a value nested
    deep, or an integer no database column holds."""
    keys = sorted(body) or ["metadata"]
    checkpoints = st.sampled_from(_ids["checkpoint_id"])
    threads = st.sampled_from([*_ids["thread_id"], None])
    named = st.builds(lambda c: {**body, "checkpoint_id": c}, checkpoints)
    nested = st.builds(
        lambda c, t: {**body, "checkpoint": {"checkpoint_id": c, **({"thread_id": t} if t else {})}},
        checkpoints,
        threads,
    )
    deep = st.builds(
        lambda k, d, lst: {**body, k: _deep(d, lst)},
        st.sampled_from([*keys, "input", "metadata", "values", "config", "value"]),
        st.sampled_from(_DEPTHS),
        st.booleans(),
    )
    big = st.builds(
        lambda k, n: {**body, k: n}, st.sampled_from(["offset", "limit", "step", "at", "count"]), st.sampled_from(_BIG)
    )
    # deep values as often as the three other changes together: they are what the depth limit is for
    return st.one_of(named, nested, big, deep, deep, deep)


@schema.hook
def flatmap_body(context, body):
    if not isinstance(body, dict):
        return st.just(body)
    return st.one_of(st.just(body), _bodies(body), _bodies(body))


@schema.hook
def flatmap_query(context, query):
    """An integer query parameter (a limit, an offset, a position): as generated, or far too big."""
    if not isinstance(query, dict):
        return st.just(query)
    ints = [k for k, v in query.items() if isinstance(v, int) and not isinstance(v, bool)]
    if not ints:
        return st.just(query)
    return st.one_of(
        st.just(query), st.builds(lambda k, n: {**query, k: n}, st.sampled_from(ints), st.sampled_from(_BIG))
    )


def _cross_thread(case) -> str | None:
    """What in the request names a seeded checkpoint, run or call that is not its thread's (or
    run's), where the route must then answer a 4xx; None when nothing does."""
    path = case.path_parameters
    thread, run = path.get("thread_id"), path.get("run_id")
    for key in ("checkpoint_id", "run_id"):
        value = path.get(key)
        if thread in _ids["thread_id"] and value in _owner and _owner[value] != thread:
            return f"path {key} of another thread"
    # a run reaches the calls of the runs before it on its thread (the chain it replays through)
    call = path.get("call_id")
    if run in _owner and call in _owner and _owner[_owner[call]] != _owner[run]:
        return "path call_id of a run of another thread"
    body = case.body if isinstance(case.body, dict) else {}
    # the bodies that start from, update or read from a checkpoint (and so check it): a run's and a
    # state update's `checkpoint_id` or `checkpoint`, a state read's and a history's `checkpoint`
    if thread in _ids["thread_id"] and case.method == "POST" and re.search(r"/(runs|state|history)", case.path):
        given = [body.get("checkpoint_id")] if re.search(r"/runs|/state$", case.path) else []
        if isinstance(body.get("checkpoint"), dict):
            given.append(body["checkpoint"].get("checkpoint_id"))
        for value in given:
            if isinstance(value, str) and value in _owner and _owner[value] != thread:
                return "body checkpoint of another thread"
    return None


def _documented_methods(path: str) -> set[str]:
    """The methods the document gives every path template matching a concrete path: a path such as
    /threads/search is served by /threads/search and by /threads/{thread_id} (a thread may be
    named "search"), so its ``Allow`` names the methods of both."""
    methods: set[str] = set()
    for template, ops in schema.raw_schema["paths"].items():
        regex = "".join("[^/]+" if p.startswith("{") else re.escape(p) for p in re.split(r"(\{[^}]+\})", template))
        if re.fullmatch(regex, path):
            methods |= {m.upper() for m in ops}
    return methods


@schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_error_and_answers_match_the_document(case):
    response = case.call(timeout=20)
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
    # negative data accepted is not a failure here: pydantic's lax mode reads `false` as 0 and "1" as 1,
    # as LangGraph's own server does; everything about the answers is checked. `Allow` is checked
    # below against every template that matches the path, not the case's one only
    case.validate_response(
        response, excluded_checks=[negative_data_rejection, positive_data_acceptance, allow_header_conformance]
    )
    if case.method == "OPTIONS" and "allow" in response.headers:
        allow = ", ".join(response.headers["allow"])  # schemathesis keeps each header's values as a list
        advertised = {m.strip() for m in allow.split(",")} - {"HEAD", "OPTIONS"}
        assert advertised == _documented_methods(case.formatted_path) - {"HEAD", "OPTIONS"}
    crossed = _cross_thread(case)
    if crossed is not None:
        assert 400 <= response.status_code < 500, f"{case.method} {case.formatted_path} with {crossed}: {response.text}"


def test_the_store_still_lists_every_thread_afterwards():
    """Whatever the fuzz stored, every thread the store holds is listed, counted and readable."""
    app = _state["app"]
    client = get_client(app)
    studio = app.state.studio
    rows = {r.thread_id for r in studio.queue.list_threads() if not r.deleted}
    deleted = {r.thread_id for r in studio.queue.list_threads() if r.deleted}
    recorded = {run.thread_id for run in _state["tape"].runs(limit=10_000)} - deleted
    expected = rows | recorded
    assert set(_ids["thread_id"]) <= expected  # no request but a DELETE (given the third thread) removes one
    listed = client.post("/threads/search", json={"limit": 1000})
    assert listed.status_code == 200, listed.text
    assert {t["thread_id"] for t in listed.json()} == expected
    assert client.post("/threads/count", json={}).json() == len(expected)
    # each is readable by its id (one with a "/" in it cannot be named in a path)
    for tid in (t for t in expected if "/" not in t):
        got = client.get(f"/threads/{quote(tid, safe='')}")
        assert got.status_code == 200, got.text
