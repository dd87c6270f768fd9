"""A test's tape, used the way vcrpy uses a cassette: recorded once, replayed ever after.

A :class:`Cassette` belongs to one test. It lives in a temporary SQLite
store for the test's duration; graphs recorded through it (or, with
autorecording, every compiled graph the test invokes) are either

* **recorded** live, and the runs are written to the cassette file when the
  test passes (normalised, so that an unchanged recording gives the same
  bytes: :mod:`graphtape.testing.normalize`);
* **replayed**: the cassette file is loaded and every call the test's
  graphs make is served from it; a call it does not hold (a changed prompt,
  a new tool call) stops the run with a :class:`~graphtape.Divergence` that
  carries the diff, and nothing reaches a model;
* **re-recorded in flight**: calls the file holds are served, new ones run
  live, and the file is rewritten with what the test did.

Which one follows from the mode (vcrpy's vocabulary, see :data:`MODES`)
and whether the file exists. The test drives its graphs with its own
inputs: a replay matches the calls they make against the calls on the
tape, by request, not by the order of invocations.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

#: none: replay only (strict); once: record when missing, else replay;
#: new_episodes: serve what is recorded, record what is new; all: re-record
MODES = ("none", "once", "new_episodes", "all")
#: thread ids of the runs loaded from a cassette get this prefix, so that a
#: test that names its threads ("t1") starts them afresh
LOADED_THREAD_PREFIX = "graphtape-cassette:"
#: set while a recorder's update_state runs: the graph updates it makes inside are LangGraph's own
_UPDATING: contextvars.ContextVar[bool] = contextvars.ContextVar("graphtape_cassette_updating", default=False)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-\[\]]+")


def under_ci(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Whether the ``CI`` environment variable is set (GitHub Actions, GitLab, CircleCI... set it)."""
    value = (environ if environ is not None else os.environ).get("CI", "")
    return value.strip().lower() not in ("", "0", "false", "no")


def default_mode(environ: dict[str, str] | None = None) -> str:
    """``none`` under CI (a missing or stale tape fails the build), ``once`` elsewhere."""
    return "none" if under_ci(environ) else "once"


def tape_path(test_file: str | Path, nodeid: str) -> Path:
    """Where the cassette of the test ``nodeid`` (defined in ``test_file``) lives.

    ``tests/test_agent.py::TestRefund::test_ok[gpt]`` ->
    ``tests/tapes/test_agent/TestRefund.test_ok[gpt].jsonl``; characters
    that do not belong in a file name become ``_``.
    """
    test_file = Path(test_file)
    name = ".".join(nodeid.split("::")[1:]) or nodeid
    return test_file.parent / "tapes" / test_file.stem / f"{_UNSAFE.sub('_', name)}.jsonl"


class Cassette:
    """One test's cassette: its file, its mode, the temporary store its runs go to.

    ``action`` is what the test does: ``record`` (no file yet, or mode
    ``all``), ``replay`` (strict) or ``flight`` (``new_episodes`` with a
    file). ``redact`` names extra keys whose values are never written (like
    vcrpy's ``filter_headers``); ``ignore_params`` names request parameters
    (``temperature``) whose values are not matched: they are redacted on
    recording and on replay alike, so a different value asks the same
    request (see :func:`graphtape.connect`).
    """

    def __init__(
        self, path: str | Path, mode: str = "once", *, redact: Iterable[str] = (), ignore_params: Iterable[str] = ()
    ):
        import graphtape
        from graphtape.errors import GraphtapeError

        if mode not in MODES:
            raise GraphtapeError(f"unknown cassette mode {mode!r}; use one of {', '.join(MODES)}")
        self.path = Path(path)
        self.mode = mode
        exists = self.path.is_file()
        if mode == "none" and not exists:
            raise GraphtapeError(
                f"no tape at {self.path}: mode 'none' only replays; record it with "
                "`pytest --graphtape-mode=once` and commit it"
            )
        if mode == "all" or not exists:
            self.action = "record"
        else:
            self.action = "flight" if mode == "new_episodes" else "replay"
        self._dir = tempfile.TemporaryDirectory(prefix="graphtape-cassette-")
        self.tape = graphtape.connect(
            f"sqlite:///{Path(self._dir.name) / 'cassette.db'}", redact=[*redact, *ignore_params]
        )
        #: runs loaded from the file (replay and flight), oldest first
        self.loaded: list[str] = []
        self.matcher: Any = None
        #: the recorded task writes a strict replay compares each task with (None: not compared)
        self.state_check: Any = None
        self._recorders: dict[int, tuple[Any, Any]] = {}
        self._inner: dict[int, Any] = {}
        try:
            if self.action != "record":
                self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        from graphtape.export import read_file
        from graphtape.replay.matcher import Matcher
        from graphtape.replay.statecheck import StateCheck

        _, batch = read_file(self.path)  # verified, and refused if it names what is not data
        for run in batch.new_runs:
            run.thread_id = LOADED_THREAD_PREFIX + run.thread_id
        self.tape.store.write(batch)
        self.loaded = [r.run_id for r in sorted(batch.new_runs, key=lambda r: (r.started_at, r.run_id))]
        self.matcher = Matcher.from_store(self.tape.store, self.loaded)
        if self.action == "replay":  # flight runs change the state on purpose
            self.state_check = StateCheck.from_store(self.tape, self.loaded)

    # -- the graphs of the test ---------------------------------------------------------

    def record(self, graph: Any, **kwargs: Any) -> Any:
        """``graph`` recorded into (or replayed from) this cassette: a :class:`~graphtape.RecordedGraph`.

        Keyword arguments are those of :meth:`graphtape.Tape.record`.
        """
        recorder = self.tape.record(graph, **kwargs)
        if self.action != "record":
            answer_from(
                recorder,
                self.matcher,
                mode="strict" if self.action == "replay" else "flight",
                replay_of=self.loaded[0] if self.loaded else None,
                state_check=self.state_check,
            )
        self._inner[id(recorder.graph)] = recorder.graph
        self._recorders[id(recorder)] = (recorder, graph)
        return recorder

    def recorder_for(self, graph: Any) -> Any | None:
        """The recorder autorecording uses for ``graph``; None for graphtape's own copies of graphs."""
        if id(graph) in self._inner:
            return None
        for recorder, original in self._recorders.values():
            if original is graph:
                return recorder
        return self.record(graph)

    @property
    def run_ids(self) -> list[str]:
        """The runs the test made through this cassette, in order."""
        return [rid for recorder, _ in self._recorders.values() for rid in recorder.run_ids]

    @contextlib.contextmanager
    def autorecording(self) -> Iterator[None]:
        """Route every top-level ``invoke``/``ainvoke``/``stream``/``astream`` of a compiled graph here,
        and its ``update_state`` calls (and their bulk and async forms) between runs.

        LangGraph's ``Pregel`` methods are replaced for the block and put
        back after it. A graph invoked inside a running node (a subgraph) is
        part of its parent's run and is left alone, as are graphtape's own
        copies of the graphs it records.
        """
        from langchain_core.runnables.config import var_child_runnable_config
        from langgraph.pregel import Pregel

        from graphtape.record.updates import APIS as UPDATE_APIS

        names: tuple[str, ...] = ("invoke", "ainvoke", "stream", "astream", *UPDATE_APIS)
        saved = {name: Pregel.__dict__[name] for name in names}

        def target(graph: Any) -> Any:
            if var_child_runnable_config.get() is not None:
                return None
            return self.recorder_for(graph)

        def invoke(graph: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
            rec = target(graph)
            return (
                saved["invoke"](graph, input, config, **kwargs) if rec is None else rec.invoke(input, config, **kwargs)
            )

        async def ainvoke(graph: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
            rec = target(graph)
            if rec is None:
                return await saved["ainvoke"](graph, input, config, **kwargs)
            return await rec.ainvoke(input, config, **kwargs)

        def stream(graph: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
            rec = target(graph)
            return (
                saved["stream"](graph, input, config, **kwargs) if rec is None else rec.stream(input, config, **kwargs)
            )

        def astream(graph: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
            rec = target(graph)
            return (
                saved["astream"](graph, input, config, **kwargs)
                if rec is None
                else rec.astream(input, config, **kwargs)
            )

        def updating(name: str) -> Any:
            # An update_state between runs is kept for the thread's next run, which a replay repeats.
            # The recorder's update calls LangGraph's, which updates a subgraph's namespace through the
            # subgraph's own method: that inner call is part of the recorded one, and goes to LangGraph.
            if name.startswith("a"):

                async def aupdate(graph: Any, *args: Any, **kwargs: Any) -> Any:
                    rec = None if _UPDATING.get() else target(graph)
                    if rec is None:
                        return await saved[name](graph, *args, **kwargs)
                    token = _UPDATING.set(True)
                    try:
                        return await getattr(rec, name)(*args, **kwargs)
                    finally:
                        _UPDATING.reset(token)

                return aupdate

            def update(graph: Any, *args: Any, **kwargs: Any) -> Any:
                rec = None if _UPDATING.get() else target(graph)
                if rec is None:
                    return saved[name](graph, *args, **kwargs)
                token = _UPDATING.set(True)
                try:
                    return getattr(rec, name)(*args, **kwargs)
                finally:
                    _UPDATING.reset(token)

            return update

        patched = {"invoke": invoke, "ainvoke": ainvoke, "stream": stream, "astream": astream}
        for name in UPDATE_APIS:
            patched[name] = updating(name)
        for name in names:
            patched[name].__name__ = patched[name].__qualname__ = name
            patched[name].__doc__ = saved[name].__doc__
            setattr(Pregel, name, patched[name])
        try:
            yield
        finally:
            for name in names:
                setattr(Pregel, name, saved[name])

    # -- after the test -----------------------------------------------------------------

    def live_calls(self) -> int:
        """How many calls of the test's runs went live (a flight re-recording has something new)."""
        from graphtape.replay.matcher import CALL_KINDS

        return sum(
            1
            for rid in self.run_ids
            for ev in self.tape.store.events(rid, list(CALL_KINDS))
            if ev.data.get("source") not in ("tape", "override")
        )

    def save(self) -> bool:
        """Write the test's runs to the cassette file (after a passing test); whether the file changed.

        A replay writes nothing. A flight re-recording in which every call
        was served, with as many runs as the file holds, leaves the file
        alone. The file is written normalised and only if its bytes change.
        """
        from graphtape.export import export_runs
        from graphtape.testing.normalize import normalize_export

        if self.action == "replay" or not self.run_ids:
            return False
        if self.action == "flight" and self.live_calls() == 0 and len(self.run_ids) == len(self.loaded):
            return False
        runs = [self.tape.store.get_run(rid) for rid in self.run_ids]
        staging = Path(self._dir.name) / "export.jsonl"
        export_runs(self.tape, [r for r in runs if r is not None], staging, kind="cassette")
        text = normalize_export(staging.read_text(encoding="utf-8"))
        if self.path.is_file() and self.path.read_text(encoding="utf-8") == text:
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(self.path)
        return True

    def close(self) -> None:
        self.tape.close()
        self._dir.cleanup()


def answer_from(recorder: Any, matcher: Any, *, mode: str, replay_of: str | None, state_check: Any = None) -> None:
    """Make ``recorder``'s next runs answer their calls from ``matcher`` (``strict`` or ``flight``).

    With ``state_check`` (strict), each task's writes are also compared with
    a recorded task of the same node and step (:mod:`graphtape.replay.statecheck`):
    a node that reads the clock directly fails the test even though every
    call was served.

    The one place that sets a recorder's replay plan for runs the test
    drives itself (the replay engine does it for runs it re-executes).
    """
    from graphtape.record.answer import ReplayPlan
    from graphtape.replay.answerer import TapeAnswerer

    recorder.plan = ReplayPlan(
        TapeAnswerer(matcher, mode, state_check=state_check),
        mode,
        replay_of=replay_of,
        meta={"replay_mode": mode, "cassette": True},
    )


def divergence_text(exc: BaseException, cassette_path: Path | None = None) -> str:
    """A failed test's report for a divergence: what differed, where, and the diff of the requests."""
    report = getattr(exc, "report", None) or {}
    lines = []
    if cassette_path is not None:
        lines.append(f"graphtape: the test no longer matches its tape {cassette_path}")
    lines.append(str(exc))
    diff = report.get("diff")
    if diff:
        lines += ["", diff]
    if cassette_path is not None:
        lines += [
            "",
            "if the change is intended, re-record what changed: "
            "pytest --graphtape-mode=new_episodes (calls the model for the changed calls only)",
        ]
    return "\n".join(lines)
