"""pytest plugin (registered through the ``pytest11`` entry point).

Merely having graphtape installed costs a test run nothing: this module
imports only pytest, and graphtape (with LangGraph) is imported the first
time a test asks for one of these fixtures or carries the marker.

Cassettes (docs/testing.md):

* ``@pytest.mark.graphtape`` records every compiled graph the test invokes
  to ``tapes/<module>/<test>.jsonl`` beside the test file, and replays it
  from there afterwards, offline. Marker keywords: ``mode`` (``none``,
  ``once``, ``new_episodes``, ``all``), ``ignore_params=[...]`` (request
  parameters whose values are not matched), ``redact=[...]`` (extra keys
  never written), ``autorecord=False`` (only graphs passed through the
  fixture), ``path=`` (another cassette file).
* ``graphtape_cassette``: the test's :class:`~graphtape.testing.cassette.Cassette`;
  ``graphtape_cassette.record(graph)`` records or replays that graph. It is
  not called ``tape``: that name is what projects (graphtape's own suite
  among them) already give their own tape fixtures, and a plugin fixture
  would be silently shadowed by, or shadow, theirs.
* ``--graphtape-mode`` / ini ``graphtape_mode`` choose the mode (marker
  keywords win); the default is ``none`` when ``CI`` is set, else ``once``.

Older fixtures:

* ``graphtape_tape``: a tape in a temporary SQLite file, closed and removed
  after the test.
* ``graphtape_replay``: a function ``(tape_file, graph, mode="strict")`` that
  imports a committed tape into a temporary store, replays each of its
  threads against ``graph`` and fails the test with the divergence report
  if the current code no longer reproduces it.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

_MODES = ("none", "once", "new_episodes", "all")
_MARKER_KEYS = {"mode", "ignore_params", "redact", "autorecord", "path"}
_REPORT_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphtape", "graphtape cassettes")
    group.addoption(
        "--graphtape-mode",
        choices=_MODES,
        default=None,
        help="How @pytest.mark.graphtape tests use their tapes: none (replay only, the default under CI), "
        "once (record when missing, the default), new_episodes (serve what is recorded, record what is new), "
        "all (re-record).",
    )
    group.addoption(
        "--graphtape-list-tapes",
        metavar="FILE",
        default=None,
        help="Write the cassette path of every collected graphtape test to FILE (used by `graphtape tapes prune`).",
    )
    parser.addini("graphtape_mode", "Default mode of @pytest.mark.graphtape tests (see --graphtape-mode).", default="")
    parser.addini("graphtape_redact", "Extra keys whose values cassettes never store.", type="linelist", default=[])
    parser.addini(
        "graphtape_ignore_params",
        "Request parameters whose values cassettes do not match on.",
        type="linelist",
        default=[],
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "graphtape(mode=None, ignore_params=(), redact=(), autorecord=True, path=None): record the compiled "
        "graphs this test invokes to tapes/<module>/<test>.jsonl and replay them from there (docs/testing.md)",
    )
    mode = config.getini("graphtape_mode")
    if mode and mode not in _MODES:
        raise pytest.UsageError(f"graphtape_mode = {mode!r} is not a cassette mode; use one of {', '.join(_MODES)}")


def _uses_cassette(item: pytest.Item) -> bool:
    return item.get_closest_marker("graphtape") is not None or "graphtape_cassette" in getattr(item, "fixturenames", ())


def cassette_path(item: pytest.Item) -> Path:
    """The cassette file of ``item``: ``tapes/<module>/<test>.jsonl`` beside its file, or the marker's ``path``."""
    from graphtape.testing.cassette import tape_path

    marker = item.get_closest_marker("graphtape")
    explicit = marker.kwargs.get("path") if marker is not None else None
    if explicit is not None:
        p = Path(explicit)
        return p if p.is_absolute() else Path(item.path).parent / p
    return tape_path(item.path, item.nodeid)


def pytest_collection_finish(session: pytest.Session) -> None:
    target = session.config.getoption("--graphtape-list-tapes")
    if not target:
        return
    paths = sorted({str(cassette_path(item).resolve()) for item in session.items if _uses_cassette(item)})
    Path(target).write_text("".join(p + "\n" for p in paths), encoding="utf-8")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    item.stash.setdefault(_REPORT_KEY, {})[report.when] = report
    # A divergence is the test's result, not a crash in its code: show what differed, not a traceback.
    errors = sys.modules.get("graphtape.errors")
    if (
        errors is not None
        and call.excinfo is not None
        and report.failed
        and isinstance(call.excinfo.value, errors.Divergence)
        and _uses_cassette(item)
    ):
        from graphtape.testing.cassette import divergence_text

        path = cassette_path(item)
        with contextlib.suppress(ValueError):  # shown relative to the rootdir when it is under it
            path = path.relative_to(item.config.rootpath)
        report.longrepr = divergence_text(call.excinfo.value, path)
    return report


def _mode(request: pytest.FixtureRequest, marker: pytest.Mark | None) -> str:
    from graphtape.testing.cassette import default_mode

    if marker is not None and marker.kwargs.get("mode"):
        return str(marker.kwargs["mode"])
    return request.config.getoption("--graphtape-mode") or request.config.getini("graphtape_mode") or default_mode()


@pytest.fixture
def graphtape_cassette(request: pytest.FixtureRequest):
    """The test's cassette (see the module docstring); ``.record(graph)`` records or replays a graph."""
    from graphtape.errors import GraphtapeError
    from graphtape.testing.cassette import Cassette

    marker = request.node.get_closest_marker("graphtape")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    unknown = set(kwargs) - _MARKER_KEYS
    if unknown or (marker is not None and marker.args):
        pytest.fail(
            f"@pytest.mark.graphtape takes only keywords {sorted(_MARKER_KEYS)}; got "
            f"{sorted(unknown) or list(marker.args)}",
            pytrace=False,
        )
    path = cassette_path(request.node)
    try:
        cassette = Cassette(
            path,
            _mode(request, marker),
            redact=[*request.config.getini("graphtape_redact"), *kwargs.get("redact", ())],
            ignore_params=[*request.config.getini("graphtape_ignore_params"), *kwargs.get("ignore_params", ())],
        )
    except GraphtapeError as exc:
        pytest.fail(str(exc), pytrace=False)
    autorecord = bool(kwargs.get("autorecord", marker is not None))
    try:
        if autorecord:
            with cassette.autorecording():
                yield cassette
        else:
            yield cassette
        reports = request.node.stash.get(_REPORT_KEY, {})
        if all(r.passed for r in reports.values()) and "call" in reports:
            cassette.save()
    finally:
        cassette.close()


@pytest.fixture(autouse=True)
def _graphtape_marker(request: pytest.FixtureRequest) -> None:
    """A test marked ``@pytest.mark.graphtape`` gets its cassette without asking for the fixture."""
    if request.node.get_closest_marker("graphtape") is not None:
        request.getfixturevalue("graphtape_cassette")


@pytest.fixture
def graphtape_tape(tmp_path):
    import graphtape

    tape = graphtape.connect(f"sqlite:///{tmp_path / 'graphtape-test.db'}")
    yield tape
    tape.close()


@pytest.fixture
def graphtape_replay(graphtape_tape):
    def replay_file(tape_file: str | Path, graph, *, mode: str = "strict"):
        from graphtape.testing.tapefiles import replay_threads

        results = []
        for result in replay_threads(graphtape_tape, graphtape_tape.import_file(tape_file), graph, mode=mode):
            if result.divergence is not None:
                pytest.fail(f"{result.error}\n{result.divergence.get('diff', '')}", pytrace=False)
            if result.status == "failed":
                pytest.fail(f"replay of {result.replay_of} failed: {result.error}", pytrace=False)
            results.append(result)
        return results

    return replay_file
