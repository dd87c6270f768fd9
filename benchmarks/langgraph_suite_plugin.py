"""pytest plugin that turns LangGraph's own test files into a conformance harness for graphtape.

Loaded by ``benchmarks/langgraph_suite.py`` with ``-p langgraph_suite_plugin`` into a pytest
session run on the ``tests/`` of LangGraph's sdist, so LangGraph's test files stay untouched.
It lives here, not in ``tests/``: it is a measurement, and it needs LangGraph's test suite,
which graphtape's own suite does not ship.

``--lgs-mode`` chooses what a session does:

* ``stock``: LangGraph's own in-memory checkpointer (the ``memory`` parameter of its
  ``sync_checkpointer``/``async_checkpointer`` fixtures) and nothing else of graphtape;
* ``saver``: the same fixtures get one more parameter per backend in ``--lgs-backends``,
  ``graphtape_<backend>``: graphtape's saver (``saver_for(graphtape.connect(url).store)``) on a
  fresh store of that backend (a temporary SQLite file, a PostgreSQL schema, a Redis key
  prefix), removed after the test. The ``memory`` parameter stays, so one session gives both
  sides of the comparison;
* ``recorded``: ``memory`` only, and every compiled graph the test invokes is recorded by a
  :class:`graphtape.testing.cassette.Cassette` (``autorecording``, the cassette's temporary
  SQLite tape); after the test body each recorded run is replayed strictly against the same
  graph object, and what the replay gave is written beside the test's outcome.

The other checkpointer parameters (LangGraph's SQLite, encrypted SQLite, PostgreSQL savers)
are dropped in every mode: the comparison is with the in-memory saver.

Each test's outcome (and, recorded, each replay) is one JSON line in ``--lgs-out``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

POSTGRES = os.environ.get("GRAPHTAPE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("GRAPHTAPE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
#: the fixtures of LangGraph's tests/conftest.py whose parameters are replaced
CHECKPOINTER_FIXTURES = ("sync_checkpointer", "async_checkpointer")
#: the stock parameter every mode keeps (LangGraph's in-memory saver) and graphtape's, per backend
STOCK = "memory"
GRAPHTAPE_PREFIX = "graphtape_"
_HEX = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\b[0-9a-f]{16,}\b")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("langgraph-suite", "graphtape's conformance harness (benchmarks/langgraph_suite.py)")
    group.addoption("--lgs-mode", choices=("stock", "saver", "recorded"), default="stock")
    group.addoption("--lgs-backends", default="sqlite", help="comma-separated: sqlite,postgresql,redis")
    group.addoption("--lgs-out", default=None, help="the JSON lines file the outcomes go to")


# -- the checkpointer fixtures --------------------------------------------------------------------


def _store_url(backend: str, tmp: Path) -> tuple[str, str]:
    """(a URL of a fresh store of ``backend``, its name): per test, like graphtape's tests/conftest.py."""
    name = f"gt_lgs_{uuid.uuid4().hex[:12]}"
    if backend == "sqlite":
        return f"sqlite:///{tmp}/{name}.db", name
    if backend == "postgresql":
        return f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}schema={name}", name
    if backend == "redis":
        return f"{REDIS}{'&' if '?' in REDIS else '?'}prefix={name}:", name
    raise ValueError(f"unknown backend {backend!r}; use sqlite, postgresql or redis")


def _drop(backend: str, name: str) -> None:
    if backend == "postgresql":
        import psycopg

        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    elif backend == "redis":
        import redis

        client = redis.Redis.from_url(REDIS)
        try:
            keys = list(client.scan_iter(match=f"{name}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i : i + 500])
        finally:
            client.close()


@contextlib.contextmanager
def graphtape_saver(backend: str) -> Iterator[Any]:
    """graphtape's LangGraph saver on a fresh store of ``backend``, removed afterwards."""
    import graphtape
    from graphtape.runtime.saver import saver_for

    with tempfile.TemporaryDirectory(prefix="gt-lgs-") as tmp:
        url, name = _store_url(backend, Path(tmp))
        tape = graphtape.connect(url)
        try:
            yield saver_for(tape.store)
        finally:
            tape.close()
            _drop(backend, name)


def _backend_of(param: Any) -> str | None:
    return param[len(GRAPHTAPE_PREFIX) :] if isinstance(param, str) and param.startswith(GRAPHTAPE_PREFIX) else None


def _replace_params(fixturedef: Any, params: list[str]) -> None:
    """Give one of LangGraph's checkpointer fixtures ``params``; graphtape's are served here, the rest by it."""
    original = fixturedef.func
    if getattr(original, "_lgs_wrapped", False):
        return
    if fixturedef.argname == "async_checkpointer":

        async def fixture(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
            backend = _backend_of(request.param)  # type: ignore[attr-defined]
            if backend is None:
                async for value in original(request):
                    yield value
                return
            with graphtape_saver(backend) as saver:
                yield saver

        func: Any = fixture
    else:

        def sync_fixture(request: pytest.FixtureRequest) -> Iterator[Any]:
            backend = _backend_of(request.param)  # type: ignore[attr-defined]
            if backend is None:
                yield from original(request)
                return
            with graphtape_saver(backend) as saver:
                yield saver

        func = sync_fixture
    func._lgs_wrapped = True
    fixturedef.func = func
    fixturedef.params = list(params)
    fixturedef.ids = None


def _patch_fixtures(module: pytest.Module, params: list[str]) -> None:
    for name in CHECKPOINTER_FIXTURES:
        for fixturedef in module.session._fixturemanager.getfixturedefs(name, module) or ():
            if fixturedef.params is not None:
                _replace_params(fixturedef, params)


# -- the plugin -----------------------------------------------------------------------------------


class Harness:
    def __init__(self, config: pytest.Config):
        self.mode = config.getoption("--lgs-mode")
        self.backends = [b for b in config.getoption("--lgs-backends").split(",") if b]
        out = config.getoption("--lgs-out")
        self.out = open(out, "a", encoding="utf-8") if out else None  # closed at unconfigure
        self.params = [STOCK] + ([GRAPHTAPE_PREFIX + b for b in self.backends] if self.mode == "saver" else [])
        self.phases: dict[str, dict[str, Any]] = {}
        self.replays: dict[str, list[dict[str, Any]]] = {}

    def write(self, row: dict[str, Any]) -> None:
        if self.out is not None:
            self.out.write(json.dumps(row, default=str) + "\n")
            self.out.flush()

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        # the conftest (and so its fixture definitions) is loaded before its first module is collected,
        # and a module's tests are parametrised from those definitions when it is
        if isinstance(collector, pytest.Module):
            _patch_fixtures(collector, self.params)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        if self.mode != "recorded":
            return (yield)
        from graphtape.testing.cassette import Cassette

        with tempfile.TemporaryDirectory(prefix="gt-lgs-") as tmp:
            cassette = Cassette(Path(tmp) / "unused.jsonl", mode="all")
            try:
                try:
                    with cassette.autorecording():
                        result = yield
                finally:
                    # replayed whatever the test's outcome: a run recorded before a failure is still a run
                    self.replays[item.nodeid] = replay_all(cassette)
            finally:
                cassette.close()
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        phase = self.phases.setdefault(report.nodeid, {"outcome": "passed", "duration": 0.0, "message": None})
        phase["duration"] += report.duration
        if report.when == "call" and hasattr(report, "wasxfail"):
            phase["outcome"] = "xpassed" if report.passed else "xfailed"
        elif report.failed:
            phase["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped and phase["outcome"] == "passed":
            phase["outcome"] = "skipped"
        if (report.failed or report.skipped) and phase["message"] is None:
            phase["message"] = _failure_message(report)
            text = report.longreprtext or ""
            # what a failure is about, beyond its first line: graphtape's run link in a value the test
            # compares (checkpoint metadata, a snapshot, a stream event), or graphtape's code on the stack
            phase["mentions_run_id"] = "graphtape_run_id" in text
            phase["graphtape_frames"] = "graphtape/" in text
        if report.when == "teardown":
            row = {"nodeid": report.nodeid, **self.phases.pop(report.nodeid)}
            if self.mode == "recorded":
                row["runs"] = self.replays.pop(report.nodeid, [])
            self.write(row)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.out is not None:
            self.out.close()


def _failure_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        text = str(crash.message)
    elif isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        text = str(report.longrepr[2])
    else:
        text = report.longreprtext or ""
    return text.strip().splitlines()[0][:300] if text.strip() else ""


# -- replaying a test's runs ----------------------------------------------------------------------


def replay_all(cassette: Any) -> list[dict[str, Any]]:
    """Each run the cassette recorded, replayed strictly against the same graph object."""
    rows = []
    for recorder, graph in list(cassette._recorders.values()):
        for run_id in list(recorder.run_ids):
            rows.append(replay_one(cassette.tape, recorder, graph, run_id))
    return rows


def replay_one(tape: Any, recorder: Any, graph: Any, run_id: str) -> dict[str, Any]:
    recorded = tape.store.get_run(run_id)
    row: dict[str, Any] = {
        "run_id": run_id,
        "graph": recorder.name,
        "api": (recorded.meta or {}).get("api") if recorded is not None else None,
        "recorded_status": recorded.status if recorded is not None else None,
        "recorded_error": recorded.error if recorded is not None else None,
    }
    started = time.perf_counter()
    try:
        result = tape.replay(run_id, graph, mode="strict")
    except BaseException as exc:  # a replay that raises is a result of the harness, never the test's
        if isinstance(exc, KeyboardInterrupt):
            raise
        row.update(replayed_status="raised", replay_error=f"{type(exc).__name__}: {exc}"[:500], exact=False)
        row["seconds"] = round(time.perf_counter() - started, 4)
        return row
    div = result.divergence or None
    row.update(
        replayed_status=result.status,
        live=result.live,
        output_matches=result.output_matches,
        replay_error=(result.error or None) and str(result.error)[:500],
        divergence=None
        if div is None
        else {
            "kind": div.get("kind"),
            "node": div.get("node"),
            "step": div.get("step"),
            "reason": div.get("reason"),
            "message": str(div.get("message") or "")[:500],
        },
        seconds=round(time.perf_counter() - started, 4),
    )
    if result.output_matches is None and result.status in ("finished", "interrupted"):
        # which side has no view of its final state (what graphtape compares)
        row["recorded_output"] = _has_output(tape, run_id)
        row["replayed_output"] = _has_output(tape, result.run_id)
    row["exact"] = is_exact(row)
    return row


def _has_output(tape: Any, run_id: str) -> bool:
    from graphtape import events

    rows = tape.store.events(run_id, [events.RunFinished.KIND]) if run_id else []
    return any(events.RunFinished.from_row(r).output is not None for r in rows)


def _error_type(error: str | None) -> str | None:
    return error.split(":", 1)[0].strip() if error else None


def is_exact(row: dict[str, Any]) -> bool:
    """Same status, no live call, no divergence, same final state.

    A run that failed has no final state to compare (``output_matches`` is None): it is exact
    when the replay fails too, with an error of the same type.
    """
    if row.get("replayed_status") != row.get("recorded_status") or row.get("live") or row.get("divergence"):
        return False
    if row["recorded_status"] == "failed":
        return _error_type(row.get("replay_error")) == _error_type(row.get("recorded_error"))
    return row.get("output_matches") is True


def scrub(text: str) -> str:
    """``text`` without the ids that differ between runs (for grouping messages)."""
    return " ".join(re.sub(r"\d+", "N", _HEX.sub("ID", text)).split())


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Harness(config), "langgraph-suite-harness")
