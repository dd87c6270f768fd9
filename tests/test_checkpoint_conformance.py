"""LangGraph's own checkpointer conformance suite against graphtape's saver, on every backend."""

from __future__ import annotations

from langgraph.checkpoint.conformance import checkpointer_test, validate

import graphtape
from graphtape.runtime.saver import saver_for


async def test_langgraph_conformance_suite(new_store_url):
    opened = []

    async def factory():
        # a fresh store (and saver) per capability suite, as the suite expects
        tape = graphtape.connect(new_store_url())
        opened.append(tape)
        yield saver_for(tape.store)

    registered = checkpointer_test(name="GraphtapeSaver")(factory)
    try:
        report = await validate(registered)
    finally:
        for tape in opened:
            tape.close()
    failures = {
        cap: [f"{f}" for f in result.failures] for cap, result in report.results.items() if result.passed is False
    }
    assert not failures, failures
    for cap in ("put", "put_writes", "get_tuple", "list", "delete_thread"):
        assert report.results[cap].passed is True, cap
    # the extended capabilities graphtape implements are tested too
    for cap in ("copy_thread", "delete_for_runs", "prune"):
        assert report.results[cap].detected and report.results[cap].passed is True, cap
