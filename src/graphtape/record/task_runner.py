"""Node tasks recorded from LangGraph's task runner, without a LangChain callback handler.

LangGraph's ``PregelRunner`` runs every task through ``run_with_retry`` /
``arun_with_retry`` (``pregel/_retry.py``, imported by ``pregel/_runner.py``),
which calls ``task.proc.invoke`` (``ainvoke``) once per attempt. The wrappers
installed here hand those functions the same task with its ``proc`` wrapped:
each attempt opens a ``task_started`` event and ends in ``task_finished``,
``task_failed`` or ``task_interrupted`` (:class:`~graphtape.record.tasks.TaskRecorder`),
as the callback handler they replace did, retries included.

A task run with streaming (``arun_with_retry(stream=True)``: ``astream_events``,
``astream_log``) drains the node's stream and never sees its output; that task
gets a :class:`~graphtape.record.tasks.TaskCallbacks` handler on its own run
instead (not inherited by the runnables inside it).

Inert for every task whose run is not being recorded: the run is found from
the run id in the task's ``configurable`` (``record/context.py``), and
only runs opened by :class:`~graphtape.recorder.RecordedGraph` register a
recorder here. Removed by ``graphtape.record.uninstall()``; if LangGraph's
runner is not where it is expected, nothing is installed and the recorder
falls back to the callback handler for the whole run.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import types
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from langchain_core.callbacks import BaseCallbackManager

from graphtape.record.context import RUN_CONF_KEY
from graphtape.record.intercept import Interceptor, Patch, PatchOnDemand
from graphtape.record.tasks import Opened, TaskCallbacks, TaskRecorder, step_tagged

#: run id -> the task recorder of the run (registered by the recorder while the run is open)
_RECORDERS: dict[str, TaskRecorder] = {}

#: The recorders of the task running in this context, outermost run first. A recorded graph invoked
#: inside a node of another recorded graph has its tasks recorded by the enclosing run too, as the
#: enclosing run's callback handler, inherited by everything inside its task, recorded them before.
_ENCLOSING: contextvars.ContextVar[tuple[TaskRecorder, ...]] = contextvars.ContextVar(
    "graphtape_enclosing_tasks", default=()
)


def register(run_id: str, recorder: TaskRecorder) -> None:
    """Record the tasks of run ``run_id`` with ``recorder`` (until :func:`unregister`)."""
    _RECORDERS[run_id] = recorder


def unregister(run_id: str) -> None:
    _RECORDERS.pop(run_id, None)


def _recorders_for(task: Any) -> tuple[TaskRecorder, ...]:
    """The recorders of ``task``: its run's (found from its config) after the enclosing runs' ones.

    Only tasks the callback handler saw: runs LangGraph tags ``graph:step:<n>`` (a task's own callback
    manager; see tasks.py). A functional-API task called with its caller's callbacks is not tagged, and
    a ``RunnableCallable`` proc that opens no run sent no callback.
    """
    config = task.config
    conf = config.get("configurable")
    rid = conf.get(RUN_CONF_KEY) if conf else None
    recorder = _RECORDERS.get(rid) if rid is not None else None
    enclosing = _ENCLOSING.get()
    if recorder is None and not enclosing:
        return ()
    if not (step_tagged(getattr(config.get("callbacks"), "tags", None)) or step_tagged(config.get("tags"))):
        return ()
    if getattr(task.proc, "trace", True) is False:
        return ()
    if not enclosing:
        return (recorder,) if recorder is not None and recorder.session.active else ()
    found = [r for r in enclosing if r.session.active]
    if recorder is not None and recorder.session.active and recorder not in found:
        found.append(recorder)
    return tuple(found)


def _ended(opened: list[tuple[TaskRecorder, Opened]], what: str, end: Callable[[TaskRecorder, Opened], None]) -> None:
    """``end`` each opened attempt: what a watching recorder raises propagates (the debugger's stops, a
    strict replay's check), any other recorder's error is logged as a failed recording of ``what``."""
    for recorder, attempt in opened:
        if recorder.watching:
            end(recorder, attempt)
            continue
        try:
            end(recorder, attempt)
        except Exception:
            recorder.recording_failed(what)


class _RecordedProc:
    """A task's ``proc`` whose every ``invoke``/``ainvoke`` (one per attempt) is recorded as a task.

    A task has one recorder unless a recorded graph runs inside another's node; that one is called
    directly (``_one``), without the list of opened attempts, the loops and the closure each end
    takes for several (about 2 us of the ~30 us a task's recording costs on the run's thread, in a
    recorded run of benchmark 1). Its hooks behave as :func:`_ended`'s: a watching recorder's error
    propagates, any other's is logged.
    """

    __slots__ = ("_metadata", "_name", "_one", "_proc", "_recorders")

    def __init__(self, proc: Any, recorders: tuple[TaskRecorder, ...], metadata: dict[str, Any], name: str):
        self._proc = proc
        self._recorders = recorders
        self._one = recorders[0] if len(recorders) == 1 else None
        self._metadata = metadata
        self._name = name

    def __getattr__(self, name: str) -> Any:
        # anything else LangGraph may read of the proc (its name, its steps) is the proc's
        return getattr(self._proc, name)

    def _opened(self) -> list[tuple[TaskRecorder, Opened]]:
        opened = []
        for recorder in self._recorders:
            if recorder.watching:  # the debugger's before-node stop propagates from here
                opened.append((recorder, recorder.opened(self._metadata, self._name)))
                continue
            try:
                opened.append((recorder, recorder.opened(self._metadata, self._name)))
            except Exception:
                recorder.recording_failed("task_started")
        return opened

    @staticmethod
    def _finished(opened: list[tuple[TaskRecorder, Opened]], output: Any) -> None:
        # a strict replay's write check and the after-node stop propagate (see _ended)
        _ended(opened, "task_finished", lambda recorder, attempt: recorder.finished(attempt, output))

    @staticmethod
    def _failed(opened: list[tuple[TaskRecorder, Opened]], error: BaseException) -> None:
        _ended(opened, "task_failed", lambda recorder, attempt: recorder.failed(attempt, error))

    def _open_one(self, recorder: TaskRecorder) -> Opened | None:
        try:
            return recorder.opened(self._metadata, self._name)
        except Exception:
            if recorder.watching:  # the debugger's before-node stop
                raise
            recorder.recording_failed("task_started")
            return None

    @staticmethod
    def _end_one(
        recorder: TaskRecorder, what: str, end: Callable[[Opened, Any], None], attempt: Opened, arg: Any
    ) -> None:
        """An attempt's end (``recorder.finished`` or ``.failed``), as :func:`_ended` calls it for one recorder."""
        try:
            end(attempt, arg)
        except Exception:
            if recorder.watching:  # a strict replay's write check, the after-node stop
                raise
            recorder.recording_failed(what)

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        recorder = self._one
        if recorder is None:
            opened = self._opened()
            try:
                output = self._proc.invoke(input, config, **kwargs)
            except BaseException as exc:
                self._failed(opened, exc)
                raise
            self._finished(opened, output)
            return output
        attempt = self._open_one(recorder)
        try:
            output = self._proc.invoke(input, config, **kwargs)
        except BaseException as exc:
            if attempt is not None:
                self._end_one(recorder, "task_failed", recorder.failed, attempt, exc)
            raise
        if attempt is not None:
            self._end_one(recorder, "task_finished", recorder.finished, attempt, output)
        return output

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        recorder = self._one
        if recorder is None:
            opened = self._opened()
            try:
                output = await self._proc.ainvoke(input, config, **kwargs)
            except BaseException as exc:
                self._failed(opened, exc)
                raise
            self._finished(opened, output)
            return output
        attempt = self._open_one(recorder)
        try:
            output = await self._proc.ainvoke(input, config, **kwargs)
        except BaseException as exc:
            if attempt is not None:
                self._end_one(recorder, "task_failed", recorder.failed, attempt, exc)
            raise
        if attempt is not None:
            self._end_one(recorder, "task_finished", recorder.finished, attempt, output)
        return output

    # Not reached from the runner (a streamed task gets TaskCallbacks instead), but a proc is a Runnable.
    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Iterator[Any]:
        return self._proc.stream(input, config, **kwargs)

    def astream(self, input: Any, config: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        return self._proc.astream(input, config, **kwargs)


#: (task class, field) -> a function copying a task of that class with that field replaced (see _copier)
_COPIERS: dict[tuple[type, str], Callable[[Any, Any], Any]] = {}
_set = object.__setattr__


def _copier(cls: type, name: str) -> Callable[[Any, Any], Any]:
    """A function ``(task, value)`` that returns a copy of ``task`` (a ``cls``) whose ``name`` is ``value``.

    Written out field by field, as ``dataclasses`` writes a class's ``__init__``, and each field set
    with its slot's own setter (``PregelExecutableTask`` is a frozen dataclass with slots): 1.0 us per
    copy against 2.1 us for a loop over the fields with ``getattr`` and ``object.__setattr__``
    (``dataclasses.replace``: 5 us, the frozen ``__init__`` and its field checks).
    """
    names = [f.name for f in dataclasses.fields(cls)]
    if not all(n.isidentifier() for n in names):  # pragma: no cover - dataclass fields are identifiers
        raise TypeError(f"unexpected fields of {cls.__name__}: {names}")
    setters: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = ["def copy(task, value):", "    c = _new(_cls)"]
    for i, field in enumerate(names):
        slot = cls.__dict__.get(field)
        if isinstance(slot, types.MemberDescriptorType):
            setters[f"_s{i}"] = slot.__set__
        else:  # pragma: no cover - a dataclass without slots (LangGraph on Python < 3.10)
            setters[f"_s{i}"] = functools.partial(_set_named, field)
        lines.append(f"    _s{i}(c, {'value' if field == name else 'task.' + field})")
    lines.append("    return c")
    exec("\n".join(lines), setters)
    return setters["copy"]


def _set_named(field: str, obj: Any, value: Any) -> None:
    _set(obj, field, value)


def _copy_with(task: Any, name: str, value: Any) -> Any:
    """A copy of ``task`` with ``name`` set to ``value``; the runner keeps its own task object."""
    key = (type(task), name)
    copy = _COPIERS.get(key)
    if copy is None:
        copy = _COPIERS[key] = _copier(*key)
    return copy(task, value)


def _recorded(task: Any, recorders: tuple[TaskRecorder, ...]) -> Any:
    """``task`` with its proc recorded (a copy sharing the task's ``writes``)."""
    proc = _RecordedProc(task.proc, recorders, task.config.get("metadata") or {}, task.name)
    return _copy_with(task, "proc", proc)


def _with_callbacks(task: Any, recorders: tuple[TaskRecorder, ...]) -> Any:
    """``task`` whose own run (only: not inherited) reports to a :class:`TaskCallbacks` per recorder."""
    manager = task.config["callbacks"].copy()
    for recorder in recorders:
        manager.add_handler(TaskCallbacks(recorder), inherit=False)
    return _copy_with(task, "config", {**task.config, "callbacks": manager})


def _wrap_run(original: Any) -> Any:
    def run_with_retry(task: Any, *args: Any, **kwargs: Any) -> Any:
        recorders = _recorders_for(task)
        if not recorders:
            return original(task, *args, **kwargs)
        token = _ENCLOSING.set(recorders)
        try:
            return original(_recorded(task, recorders), *args, **kwargs)
        finally:
            _ENCLOSING.reset(token)

    run_with_retry.__wrapped__ = original  # type: ignore[attr-defined]
    run_with_retry.__graphtape_tasks__ = True  # type: ignore[attr-defined]
    return run_with_retry


def _wrap_arun(original: Any) -> Any:
    async def arun_with_retry(task: Any, *args: Any, **kwargs: Any) -> Any:
        recorders = _recorders_for(task)
        if not recorders:
            return await original(task, *args, **kwargs)
        # arun_with_retry(task, retry_policy, stream=False, configurable=None)
        stream = kwargs["stream"] if "stream" in kwargs else (len(args) > 1 and args[1])
        if stream and isinstance(task.config.get("callbacks"), BaseCallbackManager):
            task = _with_callbacks(task, recorders)
        else:
            task = _recorded(task, recorders)
        token = _ENCLOSING.set(recorders)
        try:
            return await original(task, *args, **kwargs)
        finally:
            _ENCLOSING.reset(token)

    arun_with_retry.__wrapped__ = original  # type: ignore[attr-defined]
    arun_with_retry.__graphtape_tasks__ = True  # type: ignore[attr-defined]
    return arun_with_retry


class _ModulePatch(Patch):
    """A :class:`Patch` of a module's global (the runner calls the functions it imported by name)."""

    def conflict(self) -> str | None:
        if self.wrapper is None or self.is_ours():
            return None
        return (
            f"{self.owner.__name__}.{self.name} was replaced after graphtape patched it; "
            "uninstall that wrapper first, then graphtape's"
        )


def _build() -> Interceptor | None:
    try:
        from langgraph.pregel import _runner
    except ImportError:  # pragma: no cover - LangGraph moved its runner
        return None
    names = ("run_with_retry", "arun_with_retry")
    if not all(callable(_runner.__dict__.get(n)) for n in names):
        return None  # pragma: no cover - not where expected: the callback handler records tasks
    if any(getattr(_runner.__dict__[n], "__graphtape_tasks__", False) for n in names):
        return None  # another copy of this module's patch: left alone
    return Interceptor(
        "task runner",
        [
            _ModulePatch(_runner, "run_with_retry", _wrap_run),  # type: ignore[arg-type]
            _ModulePatch(_runner, "arun_with_retry", _wrap_arun),  # type: ignore[arg-type]
        ],
    )


#: the patch on LangGraph's runner (``PATCH.current`` while installed)
PATCH = PatchOnDemand(_build)


def installed() -> bool:
    """Whether tasks are recorded from the runner (else the recorder adds the callback handler)."""
    return PATCH.current is not None


def install() -> None:
    """Wrap the runner's ``run_with_retry``/``arun_with_retry`` (idempotent; inert outside recorded runs)."""
    PATCH.install()


def uninstall() -> None:
    """Restore LangGraph's runner (raises PatchConflict, and leaves it, if someone wrapped it after graphtape)."""
    PATCH.uninstall()
