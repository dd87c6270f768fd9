"""The public surface is declared once, in ``graphtape.__all__``; drift fails here."""

from __future__ import annotations

import graphtape

EXPECTED = {
    "ControlError",
    "DatabaseLocked",
    "Divergence",
    "EffectBlocked",
    "EffectInDoubt",
    "EventRow",
    "GraphLoadError",
    "GraphtapeError",
    "GraphtapeWarning",
    "InvalidEdit",
    "LeaseLost",
    "PatchConflict",
    "RecordedCall",
    "RecordedGraph",
    "ReplayError",
    "ReplayResult",
    "RunNotFound",
    "RunRecord",
    "SchemaTooNew",
    "StoreError",
    "Tape",
    "TapeFormatError",
    "TapeStore",
    "ThreadBusy",
    "clock",
    "connect",
    "effect",
    "register_types",
}


def test_all_is_the_declared_surface():
    assert set(graphtape.__all__) == EXPECTED
    for name in graphtape.__all__:
        assert getattr(graphtape, name) is not None


def test_public_names_come_from_one_place():
    import types

    public = {
        n
        for n in dir(graphtape)
        if n.isidentifier() and not n.startswith("_") and not isinstance(getattr(graphtape, n), types.ModuleType)
    }
    assert public - set(graphtape.__all__) == set()


def test_every_error_is_a_graphtape_error():
    for name in graphtape.__all__:
        obj = getattr(graphtape, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and not issubclass(obj, Warning):
            assert issubclass(obj, graphtape.GraphtapeError)


def test_tape_api_shape(tape):
    for method in ("record", "runs", "run", "events", "calls", "replay", "export_run", "export_thread", "import_file"):
        assert callable(getattr(tape, method))
    for method in ("archive", "restore", "prune"):
        assert callable(getattr(tape, method))


def test_tape_async_replay_api_shape(tape):
    import dataclasses
    import inspect

    for method in ("areplay", "afork", "aoverride", "ainvalidate_from", "aresume"):
        assert inspect.iscoroutinefunction(getattr(tape, method)), method
    assert "changed_code" in {f.name for f in dataclasses.fields(graphtape.ReplayResult)}


def test_the_clock_seam_is_public():
    """``graphtape.clock`` is how a test fixes graphtape's timestamps and ids (docs/api.md)."""
    for name in ("now", "new_id", "fixed", "use"):
        assert callable(getattr(graphtape.clock, name))


def test_importing_graphtape_or_its_pytest_plugin_does_not_import_langgraph():
    """The pytest plugin loads in every pytest session of every user: it must not pay LangGraph's import time."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import graphtape, graphtape.testing, graphtape.testing.pytest_plugin\n"
        "assert set(graphtape.__all__) <= set(dir(graphtape)), 'dir() lists the public names before use'\n"
        "assert set(graphtape.testing.__all__) <= set(dir(graphtape.testing))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langgraph', 'langchain_core')))\n"
        "graphtape.Tape\n"  # first use imports the rest
        "print('langgraph' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.splitlines() == ["[]", "True"]
