"""The database goes away during a run (a restart, seen from the client): a clear error, then recovery."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

import graphtape
from tests.conftest import POSTGRES_URL, REDIS_URL


class S(TypedDict, total=False):
    log: Annotated[list, operator.add]


def drop_connections(backend: str, url: str) -> None:
    """What a server restart does to its clients: every connection of this store is cut.

    Only this test's connections (tagged with its own application name), so
    that other processes using the same server are not disturbed.
    """
    if backend == "postgresql":
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                (_app_name(url),),
            )
    elif backend == "redis":
        import redis

        admin = redis.Redis.from_url(REDIS_URL)
        me = admin.client_id()
        for client in admin.client_list():
            if int(client["id"]) != me:
                admin.client_kill_filter(_id=client["id"])
        admin.close()


def _app_name(url: str) -> str:
    return "gt-restart-" + url.rsplit("schema=", 1)[-1]


def build(backend: str, url: str, state: dict):
    def one(s):
        return {"log": ["one"]}

    def two(s):
        if not state.get("cut"):
            state["cut"] = True
            drop_connections(backend, url)
        return {"log": ["two"]}

    def three(s):
        return {"log": ["three"]}

    b = StateGraph(S)
    for name, fn in (("one", one), ("two", two), ("three", three)):
        b.add_node(name, fn)
    b.add_edge(START, "one")
    b.add_edge("one", "two")
    b.add_edge("two", "three")
    b.add_edge("three", END)
    return b.compile()


def test_connection_loss_mid_run_then_recovery(backend, store_url):
    if backend == "sqlite":
        pytest.skip("SQLite is embedded: there is no server to restart")
    if backend == "postgresql":
        store_url = f"{store_url}&application_name={_app_name(store_url)}"
    state: dict = {}
    graph = build(backend, store_url, state)
    tape = graphtape.connect(store_url)
    try:
        rec = tape.record(graph)
        cfg = {"configurable": {"thread_id": "restart"}}
        try:
            out = rec.invoke({"log": []}, cfg)
        except graphtape.StoreError as exc:
            # a clear one-line error, and the run is left for recovery
            assert "\n" not in str(exc) and str(exc)
            assert tape.run(rec.last_run_id).status == "running"
            results = tape.recover(graph)
            assert [r.status for r in results] == ["finished"], results
            out = rec.get_state(cfg).values
        # either way (the store reconnected on its own, or recovery finished the run): nothing lost
        assert out["log"] == ["one", "two", "three"]
        assert tape.orphaned_runs() == []
    finally:
        tape.close()
