"""Breakpoints, stepping and per-call decisions during a replay.

The replay runs on a worker thread; graphtape's interceptions call the
debugger's hooks at four moments: a node task starts, a node task ends, an
LLM/tool/effect call is about to be answered, and a checkpoint is written
(the end of a super-step). When a breakpoint matches, the hook hands a
:class:`Pause` to the controlling thread and blocks until told how to go on.

Why a blocked worker rather than LangGraph's ``interrupt()``: a call inside
a node cannot be paused with ``interrupt()`` without re-running the node from
its start on resume, which would re-issue (and re-consume) every call the
node made before it; blocking pauses exactly at the call and keeps the node's
Python frame alive, so "continue with an edited answer" is literally that.
Node breakpoints use the same mechanism, so one model covers both; the replay
runs with ``durability="sync"`` so a super-step boundary is a real pause.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphtape import events
from graphtape.calls import RecordedCall
from graphtape.debug.inject import override_envelope
from graphtape.errors import ControlError, GraphtapeError
from graphtape.record.answer import LIVE, Answerer, Decision
from graphtape.replay.answerer import TapeAnswerer
from graphtape.replay.divergence import render_request
from graphtape.replay.engine import replay

if TYPE_CHECKING:
    from graphtape.record.session import Call, Session
    from graphtape.replay.engine import ReplayResult
    from graphtape.tape import Tape

_INTERNAL = ("branch:", "__")


class DebugStopped(ControlError):
    """The debugging session was stopped before the replay finished (a control error: never retried)."""

    #: how the recorder describes the stopped run (it reads this, and never imports the debugger)
    stop_reason = "stopped in the debugger"


@dataclasses.dataclass
class Breakpoint:
    kind: str  # before | after | call | when
    node: str | None = None
    call_kind: str | None = None
    name: str | None = None
    predicate: Callable[[dict[str, Any]], bool] | None = None
    description: str = ""
    #: a condition fires when it becomes true, not at every step while it stays true
    was_true: bool = False

    def matches_node(self, kind: str, node_path: str) -> bool:
        return self.kind == kind and (self.node == node_path or node_path.split("/")[-1] == self.node)

    def matches_call(self, kind: str, name: str | None, node_path: str) -> bool:
        return (
            self.kind == "call"
            and (self.call_kind is None or self.call_kind == kind)
            and (self.name is None or self.name == name)
            and (self.node is None or self.node == node_path or node_path.split("/")[-1] == self.node)
        )


@dataclasses.dataclass
class Pause:
    """Where the replay stopped and why."""

    reason: str  # before_node | after_node | call | condition | step | done
    node: str | None = None
    step: int | None = None
    call: dict[str, Any] | None = None
    writes: Any = None
    detail: str = ""

    def describe(self) -> str:
        if self.reason == "done":
            return f"replay finished: {self.detail}"
        where = f"node {self.node}" if self.node else "graph"
        step = f" step {self.step}" if self.step is not None else ""
        if self.reason == "call" and self.call:
            answer = "recorded answer available" if self.call.get("recorded") is not None else "no recorded answer"
            return f"before {self.call['kind']} call {self.call.get('name')} in {where}{step} ({answer})"
        return {
            "before_node": f"before {where}{step}",
            "after_node": f"after {where}{step}",
            "condition": f"condition true after{step}: {self.detail}",
            "step": f"super-step done{step}",
        }.get(self.reason, self.reason)


class Debugger:
    """Step through a replay of a recorded run. See the module docstring."""

    def __init__(self, tape: Tape, run_id: str, graph: Any, *, mode: str = "strict", allow_live_effects: bool = False):
        self.tape = tape
        self.run_id = run_id
        self.graph = graph
        self.mode = mode
        self.allow_live_effects = allow_live_effects
        self.breakpoints: list[Breakpoint] = []
        self.paused: Pause | None = None
        self.result: ReplayResult | None = None
        self.error: BaseException | None = None
        self.thread_id: str | None = None
        self._pauses: queue.Queue = queue.Queue()
        self._commands: queue.Queue = queue.Queue()
        self._run_mode = "continue"  # continue | step | step_call | step_node
        self._worker: threading.Thread | None = None
        self._stopped = False
        self._last_values: dict[str, Any] = {}
        #: seconds each thread spent paused at a breakpoint: not node or call latency
        self._paused_seconds: dict[int, float] = {}
        self._nodes: set[str] | None = None

    # -- breakpoints -------------------------------------------------------------

    def node_names(self) -> set[str]:
        """The nodes a breakpoint may name: the graph's, its subgraphs', and any the recorded run ran."""
        if self._nodes is None:
            graph = getattr(self.graph, "original", self.graph)
            names = set(getattr(graph, "nodes", {}) or {})
            try:
                for _, sub in graph.get_subgraphs(recurse=True):
                    names |= set(getattr(sub, "nodes", {}) or {})
            except Exception:
                pass
            try:
                for row in self.tape.store.events(self.tape.run(self.run_id).run_id, [events.TaskStarted.KIND]):
                    names.update(str(events.TaskStarted.from_row(row).node_path or "").split("/"))
            except GraphtapeError:
                pass
            self._nodes = {n for n in names if n and not n.startswith("__")}
        return self._nodes

    def _check_node(self, node: str) -> None:
        """A breakpoint on a node the graph does not have would never fire: say so, with the nodes it has."""
        known = self.node_names()
        if known and node not in known and node.split("/")[-1] not in known:
            raise GraphtapeError(f"the graph has no node {node!r} to break on; its nodes: {', '.join(sorted(known))}")

    def break_before(self, node: str) -> Debugger:
        self._check_node(node)
        self.breakpoints.append(Breakpoint("before", node=node, description=f"before {node}"))
        return self

    def break_after(self, node: str) -> Debugger:
        self._check_node(node)
        self.breakpoints.append(Breakpoint("after", node=node, description=f"after {node}"))
        return self

    def break_on_call(self, kind: str | None = None, name: str | None = None, node: str | None = None) -> Debugger:
        if kind is not None and kind not in events.CALL_KINDS:
            *first, last = events.CALL_KINDS
            raise GraphtapeError(f"unknown call kind {kind!r}; use {', '.join(first)} or {last}")
        if node is not None:
            self._check_node(node)
        label = " ".join(x for x in (kind or "any", name or "", f"in {node}" if node else "") if x)
        self.breakpoints.append(Breakpoint("call", node=node, call_kind=kind, name=name, description=f"call {label}"))
        return self

    def break_when(self, predicate: Callable[[dict[str, Any]], bool], description: str = "predicate") -> Debugger:
        self.breakpoints.append(Breakpoint("when", predicate=predicate, description=description))
        return self

    # -- control (from the controlling thread) ----------------------------------------

    def start(self) -> Pause:
        def work() -> None:
            try:
                result = replay(
                    self.tape,
                    self.run_id,
                    self.graph,
                    mode=self.mode,
                    allow_live_effects=self.allow_live_effects,
                    debugger=self,
                )
                if self._stopped and result.status not in ("finished", "interrupted", "diverged"):
                    # quitting is not a failure of the replayed code: the replay was stopped
                    result = dataclasses.replace(result, status="stopped", error=None)
                self.result = result
                detail = f"{self.result.status}, {self.result.served} served, {self.result.live} live"
                if self.result.error:
                    detail += f": {self.result.error}"
                self._pauses.put(Pause("done", detail=detail))
            except BaseException as exc:
                self.error = exc
                self._pauses.put(Pause("done", detail=f"stopped: {type(exc).__name__}: {exc}"))

        self._worker = threading.Thread(target=work, name="graphtape-debug", daemon=True)
        self._worker.start()
        return self._next()

    def _next(self) -> Pause:
        self.paused = self._pauses.get()
        return self.paused

    def _resume(self, command: tuple[str, Any]) -> Pause:
        if self.paused is None or self.paused.reason == "done":
            raise GraphtapeError("the replay is not paused; start() it first (or it has finished)")
        self._commands.put(command)
        return self._next()

    def continue_(self) -> Pause:
        """Run to the next breakpoint or the end."""
        self._run_mode = "continue"
        return self._resume(("go", None))

    def step(self) -> Pause:
        """Run one super-step (to the next checkpoint)."""
        self._run_mode = "step"
        return self._resume(("go", None))

    def step_node(self) -> Pause:
        """Run to the start or end of the next node task."""
        self._run_mode = "step_node"
        return self._resume(("go", None))

    def step_call(self) -> Pause:
        """Run to the next LLM, tool or effect call."""
        self._run_mode = "step_call"
        return self._resume(("go", None))

    def use(self, output: Any) -> Pause:
        """At a call: answer it with ``output`` instead of the recorded answer, then continue."""
        if self.paused is None or self.paused.reason != "call":
            raise GraphtapeError("`use` answers a paused call; the replay is not paused at a call")
        self._run_mode = "continue"
        return self._resume(("use", output))

    def live(self) -> Pause:
        """At a call: send it live (model, tool or effect really runs), then continue."""
        if self.paused is None or self.paused.reason != "call":
            raise GraphtapeError("`live` applies to a paused call; the replay is not paused at a call")
        self._run_mode = "continue"
        return self._resume(("live", None))

    def stop(self) -> None:
        self._stopped = True
        if self.paused is not None and self.paused.reason != "done":
            self._commands.put(("stop", None))
            self._next()

    def __enter__(self) -> Debugger:
        return self

    def __exit__(self, *exc: object) -> None:
        # A debugger left paused would hold its replay's thread (and lease) forever.
        self.stop()

    def state(self) -> dict[str, Any]:
        """The state at the last checkpoint of the replay (internal channels left out)."""
        return dict(self._last_values)

    # -- hooks (on the worker thread) ---------------------------------------------------

    def paused_seconds(self) -> float:
        """Seconds the calling thread has spent paused at breakpoints so far.

        Node and call latencies subtract it: time a user spends reading the
        state at a breakpoint is not time the node took (``record/tasks.py``).
        """
        return self._paused_seconds.get(threading.get_ident(), 0.0)

    def _wait(self, pause: Pause, *, can_raise: bool = True) -> tuple[str, Any]:
        """Hand ``pause`` to the controller and block for its command.

        ``can_raise=False`` for hooks called by LangChain's callback manager,
        which logs an exception raised in a handler as an error before passing
        it on: there a stop is only noted, and the next hook that graphtape
        calls itself (a call, the step's checkpoint) raises :class:`DebugStopped`.
        """
        if self._stopped:
            if can_raise:
                raise DebugStopped("debugging stopped by the user")
            return ("stop", None)
        self._pauses.put(pause)
        began = time.perf_counter()
        command = self._commands.get()
        ident = threading.get_ident()
        self._paused_seconds[ident] = self._paused_seconds.get(ident, 0.0) + time.perf_counter() - began
        if command[0] == "stop":
            self._stopped = True
            if can_raise:
                raise DebugStopped("debugging stopped by the user")
        return command

    def on_task_start(self, info: dict[str, Any]) -> None:
        node = info.get("node_path") or ""
        if self._stopped:
            return
        if self._run_mode == "step_node" or any(b.matches_node("before", node) for b in self.breakpoints):
            self._wait(Pause("before_node", node=node, step=info.get("step")), can_raise=False)

    def on_task_end(self, info: dict[str, Any], outputs: Any) -> None:
        node = info.get("node_path") or ""
        if self._stopped:
            return
        if self._run_mode == "step_node" or any(b.matches_node("after", node) for b in self.breakpoints):
            from graphtape.serde import to_jsonable

            self._wait(
                Pause("after_node", node=node, step=info.get("step"), writes=to_jsonable(outputs)), can_raise=False
            )

    def on_call(self, session: Any, call: Any, recorded: Any, request: dict[str, Any]) -> tuple[str, Any]:
        """``("default", None)``, ``("use", output)`` or ``("live", None)`` for a call about to be answered."""
        if self._stopped:
            raise DebugStopped("debugging stopped by the user")
        site = call.site
        name = call.summary.get("name") or call.summary.get("model")
        if self._run_mode != "step_call" and not any(
            b.matches_call(site.kind, name, site.node_path) for b in self.breakpoints
        ):
            return ("default", None)
        lines = render_request(site.kind, request, call.messages_view)
        info = {
            "kind": site.kind,
            "name": name,
            "node": site.node_path,
            "call_id": recorded.call_id if recorded is not None else None,
            "request": "\n".join(lines),
            "recorded": self._recorded_value(recorded, session.types),
        }
        paused = self.paused_seconds()
        command = self._wait(Pause("call", node=site.node_path, step=site.step, call=info))
        call.started += self.paused_seconds() - paused  # the pause is not the call's latency
        return command if command[0] in ("use", "live") else ("default", None)

    def _recorded_value(self, recorded: Any, types: Any = None) -> Any:
        """The recorded answer as the objects the code would receive (messages for an LLM call)."""
        if recorded is None or recorded.response_ref is None:
            return None
        from graphtape import serde

        store = self.tape.store
        try:
            return serde.decode_value(store.get_json(recorded.response_ref), store.get_json, types)
        except Exception:  # an answer that cannot be rebuilt here is shown as stored
            return self.tape.payload(recorded.response_ref)

    def on_checkpoint(self, values: dict[str, Any], step: int | None, ns: str) -> None:
        if self._stopped:
            raise DebugStopped("debugging stopped by the user")
        if ns:
            return
        self._last_values = {k: v for k, v in values.items() if not k.startswith(_INTERNAL)}
        for b in self.breakpoints:
            if b.kind == "when" and b.predicate is not None:
                try:
                    now = bool(b.predicate(self._last_values))
                except Exception:  # a predicate that cannot evaluate yet (missing key) is false
                    now = False
                hit, b.was_true = now and not b.was_true, now
                if hit:
                    self._wait(Pause("condition", step=step, detail=b.description))
                    return
        if self._run_mode == "step":
            self._wait(Pause("step", step=step))

    def answerer(self, inner: TapeAnswerer) -> DebugAnswerer:
        """The answerer of the replay this debugger steps through: ``inner``'s answers, paused and injected."""
        return DebugAnswerer(inner, self)


class DebugAnswerer(Answerer):
    """Pauses at calls, tasks and checkpoints; answers a paused call as the user says (``use``/``live``).

    Calls the user lets through are answered by ``inner`` (the replay's own
    answerer) with the recorded call already taken for them.
    """

    replays = True
    watches_tasks = True
    pauses = True

    def __init__(self, inner: TapeAnswerer, debugger: Debugger):
        self.inner = inner
        self.debugger = debugger

    def answer(self, session: Session, call: Call, request: dict[str, Any]) -> Decision:
        rec = self.inner.matcher.take(call.site, call.fingerprint)
        command, output = self.debugger.on_call(session, call, rec, request)
        if command == "use":
            site = call.site
            served = rec or RecordedCall(
                call_id="(injected)",
                run_id=session.run_id,
                seq=-1,
                kind=site.kind,
                node=site.node,
                node_path=site.node_path,
                branch=site.branch,
                step=site.step,
                ordinal=site.ordinal,
                fingerprint=call.fingerprint,
                request_ref=call.request_ref,
                messages_ref=call.messages_ref,
                response_ref=None,
                error=None,
                tokens=0,
                cost=0.0,
                latency=0.0,
                name=None,
            )
            return Decision.serve(served, override_envelope(served, output))
        if command == "live":
            return LIVE
        return self.inner.judge(session, call, request, rec)

    def knows(self, kind: str, fingerprint: str) -> bool:
        return self.inner.knows(kind, fingerprint)

    def task_started(self, info: dict[str, Any]) -> None:
        self.debugger.on_task_start(info)

    def task_ending(self, info: dict[str, Any], outputs: Any) -> None:
        self.debugger.on_task_end(info, outputs)

    def task_ended(self, session: Session, info: dict[str, Any], outputs: Any) -> None:
        self.inner.task_ended(session, info, outputs)

    def checkpoint(self, values: dict[str, Any], step: int | None, ns: str) -> None:
        self.debugger.on_checkpoint(values, step, ns)

    def paused_seconds(self) -> float:
        return self.debugger.paused_seconds()
