"""``Tape.record(graph)``: the same graph, every call of it recorded as a run.

The wrapper changes nothing in the user's graph. It

* puts the run id into the run's ``configurable`` (``context.RUN_CONF_KEY``:
  LangGraph hands it to every task, nested runnable, subgraph and
  checkpoint write, which is how interceptions find their run, and shows it
  in no metadata or stream part, so the user sees what an unrecorded run
  shows),
* records its node tasks (LangGraph's task runner, wrapped by
  ``record/task_runner.py``, finds the run from that id; no callback handler),
* wraps the checkpointer (the graph's own, or the one passed to
  ``Tape.record``) so each checkpoint is linked to the run and flushes the
  tape.

A graph without a checkpointer keeps LangGraph's semantics for one: every
call starts afresh, nothing is carried from one call to the next, whatever
``thread_id`` it is given, and its state may hold values no serializer knows.
graphtape still needs checkpoints of its runs (replay, recovery, the
Studio's timeline): each call runs on graphtape's saver, on a thread of its
own (the caller's ``thread_id`` is kept in the run's meta, ``thread_id_given``),
and a value that cannot be stored is a placeholder in its checkpoints
(``GraphtapeSaver(opaque=True)``), never a failure of the user's run. Durable
threads are asked for by passing a saver: ``tape.record(graph,
checkpointer=tape.saver)``, as graphtape's server, CLI, recovery and replay do
(:func:`thread_saver`).

The run id is ``recorder.last_run_id``; a ``run_id`` given in the config is
used as the graphtape run id, so callers can also choose it up front.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import BaseCallbackManager
from langgraph.checkpoint.base import BaseCheckpointSaver

from graphtape import clock
from graphtape.errors import ControlError, Divergence, StoreError
from graphtape.record import install, task_runner
from graphtape.record import writer as writer_mod
from graphtape.record.answer import RECORD, ReplayPlan
from graphtape.record.checkpoints import FLUSHER, TapSaver
from graphtape.record.context import RUN_CONF_KEY
from graphtape.record.session import Session
from graphtape.record.tasks import TaskCallbacks, TaskRecorder
from graphtape.record.updates import UpdateCall
from graphtape.runtime.lease import ThreadLease
from graphtape.store.base import WriteBatch

if TYPE_CHECKING:
    from graphtape.tape import Tape


#: the run meta keys of a run of a graph without a checkpointer: it ran on a thread of its own (True), and the
#: ``thread_id`` its caller gave, if any (shown; LangGraph ignores it without a checkpointer)
NO_CHECKPOINTER_META = "no_checkpointer"
GIVEN_THREAD_META = "thread_id_given"

#: the methods of a graph that read or write a thread's checkpoints: a graph without a checkpointer answers
#: them itself when recorded (LangGraph's "No checkpointer set"), not from the threads graphtape made for its runs
STATE_METHODS = frozenset({"get_state", "aget_state", "get_state_history", "aget_state_history"})


def own_checkpointer(graph: Any) -> BaseCheckpointSaver | None:
    """The checkpointer ``graph`` was compiled with (None for none, or ``True``/``False``)."""
    saver = getattr(graph, "checkpointer", None)
    return saver if isinstance(saver, BaseCheckpointSaver) else None


def thread_saver(tape: Tape, graph: Any, *, opaque: bool = False) -> BaseCheckpointSaver:
    """The saver whose threads persist for ``graph``: its own checkpointer, else graphtape's (``tape.saver``).

    For the callers that keep a graph's threads between calls whatever it was
    compiled with, as LangGraph's server injects its checkpointer: graphtape's
    server, the CLI's run commands, ``Tape.resume``, recovery and replay.
    ``opaque``: for a run recorded without a checkpointer (recovery), whose
    values graphtape could not store are placeholders (``GraphtapeSaver``).
    """
    own = own_checkpointer(graph)
    if own is not None:
        return own
    from graphtape.runtime.saver import saver_for

    return saver_for(tape.store, opaque=opaque)


#: threads whose last run a recorded graph remembers (RecordedGraph._previous_run); past it, it forgets them all
LAST_RUNS_MAX = 4096


def code_fingerprint(graph: Any) -> str:
    """A hash of the source of the graph's node functions (shown, never matched on)."""
    h = hashlib.blake2b(digest_size=8)
    for name, node in sorted(getattr(graph, "nodes", {}).items()):
        h.update(name.encode())
        bound = getattr(node, "bound", None)
        fn = getattr(bound, "func", None) or getattr(bound, "afunc", None) or bound
        try:
            h.update(_node_source(fn).encode())
        except (TypeError, OSError):
            h.update(type(bound).__qualname__.encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1024)
def _node_source(fn: Any) -> str:
    """A node function's source, read once per function (every replay records the graph afresh)."""
    return inspect.getsource(fn)


def replayable_kwargs(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """The call's keyword arguments that a replay passes again: the JSON-able ones.

    ``version="v2"``, ``stream_mode``, ``output_keys``, ``subgraphs``,
    ``interrupt_before``/``interrupt_after`` and ``durability`` change what a
    run returns or where it stops; replayed without them, unchanged code
    would return something else. Objects (``control``, a dataclass
    ``context``) are not kept: a tape is data.
    """
    out: dict[str, Any] = {}
    for key, value in (kwargs or {}).items():
        if isinstance(value, tuple):
            value = list(value)
        if _plain_json(value):
            out[key] = value
    return out


def _plain_json(value: Any) -> bool:
    if value is None or type(value) in (bool, int, float, str):  # not enums that subclass str/int
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json(v) for k, v in value.items())
    return False


def _with_callback(config: dict[str, Any], handler: TaskCallbacks) -> dict[str, Any]:
    cbs = config.get("callbacks")
    if cbs is None:
        config["callbacks"] = [handler]
    elif isinstance(cbs, list):
        config["callbacks"] = [*cbs, handler]
    elif isinstance(cbs, BaseCallbackManager):
        mgr = cbs.copy()
        mgr.add_handler(handler, inherit=True)
        config["callbacks"] = mgr
    return config


class RecordedGraph:
    """A compiled graph whose ``invoke``/``ainvoke``/``stream``/``astream`` are recorded."""

    def __init__(
        self,
        tape: Tape,
        graph: Any,
        *,
        name: str | None = None,
        checkpointer: BaseCheckpointSaver | None = None,
        wait: float = 0.0,
        lease_ttl: float = 30.0,
        plan: ReplayPlan | None = None,
    ):
        install()
        self.tape = tape
        self.original = graph
        inner = checkpointer or own_checkpointer(graph)
        #: no checkpointer (none compiled in, none given): each call on a thread of its own (module docstring)
        self.fresh_threads = not isinstance(inner, BaseCheckpointSaver)
        if not isinstance(inner, BaseCheckpointSaver):
            from graphtape.runtime.saver import saver_for

            inner = saver_for(tape.store, opaque=True)
        if isinstance(inner, TapSaver):
            inner = inner.inner
        # With LANGGRAPH_STRICT_MSGPACK, compiling a graph gives its saver a msgpack allowlist of the
        # graph's own types, and LangGraph reads a value of any other type back as a dict. The saver
        # set here (the user's, graphtape's own) gets the graph's list too: the copy below does not
        # keep it (``Pregel.copy`` drops ``_serde_allowlist``), and a recorded run must read its
        # state back as the unrecorded one does. Applied once: LangGraph would otherwise clone the
        # saver on every invoke.
        apply_allowlist = getattr(graph, "_apply_checkpointer_allowlist", None)
        if callable(apply_allowlist):
            inner = apply_allowlist(inner)
        self.checkpointer = inner
        # graphtape's own saver links checkpoints to runs itself, in the same
        # transaction; any other saver is wrapped to do it beside the write.
        from graphtape.runtime.saver import GraphtapeSaver

        self.durable = isinstance(inner, GraphtapeSaver)
        saver = inner if self.durable else TapSaver(inner)
        # the saves that cost less than a hand-over to one of LangGraph's threads run in line
        from graphtape.replay import saver as replay_saver

        if replay_saver.in_line_saves(saver):
            replay_saver.install()
        self.graph = graph.copy(update={"checkpointer": saver})
        #: seconds to wait for a thread another process is running (0: fail fast with ThreadBusy)
        self.wait = wait
        self.lease_ttl = lease_ttl
        self.name = name or getattr(graph, "name", None) or "graph"
        self.last_run_id: str | None = None
        #: the status the last run ended with, as written on its run row (None while it runs)
        self.last_status: str | None = None
        #: the last run's interrupt and run_finished events as its end wrote them (None until then)
        self.last_end_rows: list[Any] | None = None
        self.run_ids: list[str] = []
        self._fingerprint = code_fingerprint(graph)
        #: thread id -> (lease token, run id) of the last run of this graph started on the thread: see _previous_run
        self._last_runs: dict[str, tuple[int, str]] = {}
        #: thread id -> (lease token, chain ids) of the last message list the last run on the thread stored
        self._last_chains: dict[str, tuple[int, list[str]]] = {}
        #: thread id -> the message list the last run of this graph on the thread ended with (see _open);
        #: at most writer.MEMO_MAX messages in all, let go when the message memo drops its older half
        self._last_histories: dict[str, writer_mod.History] = {}
        self._history_messages = 0
        self._forms_drops = writer_mod.forms_drops
        #: Set by a replay, the debugger or recovery: how the next runs' calls are answered (None: recorded)
        self.plan: ReplayPlan | None = plan
        #: thread id -> the ``update_state`` calls made on it since this graph's last run there, stored
        #: with the thread's next run (graphtape.record.updates)
        self._updates: dict[str, list[UpdateCall]] = {}
        #: threads a replay named for itself (``replay-<new id>``) on which this graph has not run yet: no
        #: run can be on them, so the first run there has no previous run to look up (see _open)
        self.new_threads: set[str] = set()

    @property
    def types(self) -> Any:
        """The classes values and errors of this graph's runs may be rebuilt as (graphtape.typepolicy)."""
        policy = self.__dict__.get("_types")
        if policy is None:
            from graphtape.typepolicy import TypePolicy

            policy = self.__dict__["_types"] = TypePolicy.for_graph(self.original, self.tape.types)
        return policy

    def __getattr__(self, name: str) -> Any:
        # get_state, get_state_history, update_state, get_graph, ... of the graph.
        return getattr(self._state_graph if name in STATE_METHODS else self.graph, name)

    @property
    def _state_graph(self) -> Any:
        """The graph that answers state reads and updates: without a checkpointer, the user's own.

        Its runs' threads are graphtape's, one per call: a thread the caller
        names has no state, and LangGraph raises for a graph without a
        checkpointer, as it does unrecorded.
        """
        return self.original if self.fresh_threads else self.graph

    # -- session plumbing ---------------------------------------------------------

    def _open(
        self, run_input: Any, config: dict[str, Any] | None, api: str, kwargs: dict[str, Any] | None = None
    ) -> tuple[Session, dict[str, Any]]:
        config = dict(config or {})
        configurable = dict(config.get("configurable") or {})
        made_up = "thread_id" not in configurable  # a new thread: no run before this one
        meta: dict[str, Any] = {"api": api, "code_fingerprint": self._fingerprint}
        if self.fresh_threads:
            # LangGraph runs a graph without a checkpointer from nothing, whatever thread it is
            # given: so does this run, on a thread of its own (a past checkpoint named with it is
            # of no thread of this run either)
            meta[NO_CHECKPOINTER_META] = True
            if not made_up:
                meta[GIVEN_THREAD_META] = str(configurable["thread_id"])
            for key in ("checkpoint_id", "checkpoint_map"):
                configurable.pop(key, None)
            made_up = True
        if made_up:
            configurable["thread_id"] = clock.new_id()
        config["configurable"] = configurable
        thread_id = str(configurable["thread_id"])
        run_id = str(config.get("run_id") or clock.new_id())
        plan = self.plan
        lease = ThreadLease(self.tape.store, thread_id, ttl=self.lease_ttl, wait=self.wait)
        lease.acquire()
        # a replay's own new thread is new too, for its first run (the next runs of the replayed chain
        # are linked by _previous_run, from this graph's last run on it)
        first_there = made_up or thread_id in self.new_threads
        self.new_threads.discard(thread_id)
        try:
            parent_run_id = None if first_there else self._previous_run(thread_id, lease.token)
        except BaseException:
            lease.release()
            raise
        session = Session(
            self.tape,
            thread_id=thread_id,
            graph_name=self.name,
            mode=plan.mode if plan is not None else "record",
            answerer=plan.answerer if plan is not None else RECORD,
            replay_of=plan.replay_of if plan is not None else None,
            parent_run_id=parent_run_id,
            run_id=run_id,
            meta={**meta, **(plan.meta if plan is not None else {})},
        )
        if config.get("run_id"):
            # the caller chose the id up front to follow the run by it while it runs (the Studio's
            # replay answers 202 with it and viewers stream the run's events): a strict replay then
            # writes as it goes instead of holding its rows to its end
            session.holding = False
        session.lease = lease
        session.durable = self.durable
        carried = self._last_chains.pop(thread_id, None)
        if (
            carried is not None
            and plan is None
            and lease.token is not None
            and lease.token == carried[0] + 1
            and self.tape.store.bumps_leases_on_delete
        ):
            # Nobody held the thread since this graph's last run there, and no run of it was
            # deleted (that moves the token on): the chain that run stored and referred to is on
            # the store, and a conversation's next request starts with it (no store probe).
            session.writer.assume_stored(set(), set(carried[1]))
        history = self._last_histories.pop(thread_id, None)
        if history is not None:
            # The thread's next request starts with the state its last run ended with, read back from the
            # checkpointer as new objects: compared with that list's messages as a whole (a form depends on
            # the message only, whatever store or run it was made for), not looked up one by one.
            self._history_messages -= len(history[0])
            session.writer.carry(history)
        session.types = self.types
        configurable[RUN_CONF_KEY] = session.run_id  # (the config's own copy, made above)
        tasks = TaskRecorder(session)
        if task_runner.installed():
            task_runner.register(session.run_id, tasks)
        else:
            # graphtape.uninstall() was called after this graph was wrapped (or LangGraph's runner
            # moved): the tasks are recorded from callbacks, as before the runner wrapper
            _with_callback(config, TaskCallbacks(tasks))
        try:
            # Beside a foreign saver a recorded run's start goes with its first tape write (at most
            # FLUSH_INTERVAL later) or its end. At once: with graphtape's own saver (recovery needs
            # the start), for a replay, recovery or debugger (plan), and for a run whose caller chose
            # its id to follow it while it runs.
            write_now = self.durable or plan is not None or bool(config.get("run_id"))
            session.start(
                run_input,
                config,
                call_kwargs=replayable_kwargs(kwargs),
                write_now=write_now,
                updates=self._updates.get(thread_id, ()),
            )
            if not write_now:
                FLUSHER.began(session)
        except BaseException:
            task_runner.unregister(session.run_id)
            lease.release()
            raise
        self._updates.pop(thread_id, None)  # (on the tape now, with this run's start)
        if lease.token is not None:
            if len(self._last_runs) >= LAST_RUNS_MAX:
                self._last_runs.clear()
            self._last_runs[thread_id] = (lease.token, session.run_id)
        self.last_run_id = session.run_id
        self.last_status = None
        self.last_end_rows = None
        self.run_ids.append(session.run_id)
        return session, config

    def _previous_run(self, thread_id: str, token: int | None) -> str | None:
        """The id of the thread's latest run: the new run's ``parent_run_id``.

        Read from the store, except when this graph started the thread's
        last run itself and nobody held the thread since: every run takes
        the thread's lease, and its token grows by one each time the lease
        changes hands (a renewal keeps it). The token after this graph's
        last run on the thread, plus one, is then the one just received.
        A conversation's turns skip a read each (a round trip on PostgreSQL
        and Redis). What bypasses the lease is not seen: runs imported into
        the thread meanwhile (``graphtape import``), or the previous run
        deleted by ``prune``, which the read would have passed over.
        """
        known = self._last_runs.get(thread_id)
        if known is not None and token is not None and token == known[0] + 1:
            return known[1]
        previous = self.tape.store.list_runs(thread_id=thread_id, limit=1)
        return previous[0].run_id if previous else None

    def _needs_state(self, session: Session, kwargs: dict[str, Any]) -> bool:
        """Whether the run may have paused: only then is the state read after it.

        A replayed run is no exception: an ``interrupt()`` it reaches is seen
        in its pending writes (``saw_interrupt``) as in a recorded run, and a
        strict replay's held checkpoint rows are written by the run's end
        (``Session.finish``) without a state read before it (a get_state and
        a flush per replayed run before).
        """
        return bool(
            session.saw_interrupt
            or kwargs.get("interrupt_before")
            or kwargs.get("interrupt_after")
            or getattr(self.graph, "interrupt_before_nodes", None)
            or getattr(self.graph, "interrupt_after_nodes", None)
        )

    def _status(self, config: dict[str, Any], session: Session | None = None) -> tuple[str, list[dict[str, Any]]]:
        if session is not None:
            session.flush()  # deferred pending writes (interrupts) must be readable
        snap = _snapshot(self.graph, config)
        return _status_from_snapshot(snap) if snap is not None else ("finished", [])

    async def _astatus(
        self, config: dict[str, Any], session: Session | None = None
    ) -> tuple[str, list[dict[str, Any]]]:
        if session is not None:
            session.flush()
        try:
            snap = await self.graph.aget_state(config)
        except Exception:
            return "finished", []
        return _status_from_snapshot(snap)

    def _close(
        self,
        session: Session,
        status: str,
        *,
        output: Any = None,
        error: BaseException | None = None,
        interrupts: list[dict[str, Any]] | None = None,
    ) -> None:
        if session.divergence is not None:
            status, error = "diverged", session.divergence
        elif error is not None and _stopped_from_outside(error):
            # Ctrl-C, a cancelled task, quitting the debugger: the run did not fail, it was stopped
            # where it was. ``graphtape recover`` continues a recorded one (runtime/recovery.py).
            session.meta["stopped_by"] = type(error).__name__
            how = (
                "`graphtape recover` continues it"
                if session.mode in ("record", "recover")
                else "replay again to finish"
            )
            status, error = "interrupted", type(error)(f"{_stopped_from_outside(error)}; {how}")
        lease = session.lease
        try:
            if isinstance(error, StoreError):
                # The store itself failed (connection lost, server restarting,
                # lease taken over): the run did not fail, it could not be kept.
                # It stays ``running`` so that ``recover`` finishes it from its
                # last durable checkpoint once the store is back. A start not
                # written yet (it goes with the run's first tape write beside a
                # foreign saver, which may be the write that failed) is tried once
                # more, so that the run is listed.
                if session.start_unwritten:
                    FLUSHER.forget(session)
                    with contextlib.suppress(Exception):
                        session.flush()
                return
            # the background writer is done with this run (one under way finishes first): the run's
            # last write is the one below, which may give the lease up
            FLUSHER.forget(session)
            release = WriteBatch()
            releasing = lease is not None and lease.release_in(release)
            if releasing:
                session.defer(release)
            session.finish(status, output=output, error=error, interrupts=interrupts)
            self._keep_history(session)
            self.last_status = status
            self.last_end_rows = session.end_rows
            # the chain of the final state's messages, which the run's stored end refers to
            if (
                status == "finished"
                and output is not None
                and lease is not None
                and lease.token is not None
                and session.final_chain
            ):
                if len(self._last_chains) >= LAST_RUNS_MAX:
                    self._last_chains.clear()
                self._last_chains[session.thread_id] = (lease.token, session.final_chain)
            if releasing:
                lease.released_by_write()
        finally:
            session.deactivate()
            task_runner.unregister(session.run_id)
            FLUSHER.forget(session)
            if lease is not None:
                lease.release()  # a no-op when the last write gave it up

    def _keep_history(self, session: Session) -> None:
        """Keep the message list the run ended with (its final state's) for the thread's next run.

        A conversation's request repeats that state, read back from the
        checkpointer as new objects; its messages were each looked up in the
        message memo (``writer._known_head``), and are now compared with the
        kept list as a whole (:func:`graphtape.record.writer._carried_head`):
        the message forms of a turn of benchmark 3's conversation took
        0.84-0.86x of their CPU at turns 180-200 (2.26 -> 1.94 and 2.00 ->
        1.69 ms, in-run, old and new interleaved; the rest is comparing each
        message's fields, which stays).
        """
        history = session.writer.history()
        if writer_mod.forms_drops != self._forms_drops:
            # the memo let its older copies go: so do the lists that may hold them
            self._forms_drops = writer_mod.forms_drops
            self._last_histories.clear()
            self._history_messages = 0
        if history is None:
            return
        old = self._last_histories.pop(session.thread_id, None)
        if old is not None:
            self._history_messages -= len(old[0])
        if self._history_messages + len(history[0]) > writer_mod.MEMO_MAX:
            self._last_histories.clear()
            self._history_messages = 0
        self._last_histories[session.thread_id] = history
        self._history_messages += len(history[0])

    # -- the graph API -------------------------------------------------------------

    def update_state(
        self, config: dict[str, Any], values: Any, as_node: str | None = None, task_id: str | None = None
    ) -> Any:
        """LangGraph's ``update_state``, kept for the thread's next run (a replay repeats it)."""
        out = self._state_graph.update_state(config, values, as_node, task_id)
        self._note_update("update_state", config, [[(values, as_node, task_id)]], out)
        return out

    async def aupdate_state(
        self, config: dict[str, Any], values: Any, as_node: str | None = None, task_id: str | None = None
    ) -> Any:
        out = await self._state_graph.aupdate_state(config, values, as_node, task_id)
        self._note_update("aupdate_state", config, [[(values, as_node, task_id)]], out)
        return out

    def bulk_update_state(self, config: dict[str, Any], supersteps: Any) -> Any:
        out = self._state_graph.bulk_update_state(config, supersteps)
        self._note_update("bulk_update_state", config, supersteps, out)
        return out

    async def abulk_update_state(self, config: dict[str, Any], supersteps: Any) -> Any:
        out = await self._state_graph.abulk_update_state(config, supersteps)
        self._note_update("abulk_update_state", config, supersteps, out)
        return out

    def _note_update(self, api: str, config: dict[str, Any], supersteps: Any, out: Any) -> None:
        """Keep an update LangGraph applied until the thread's next run stores it (see record/updates.py)."""
        thread_id = str(((config or {}).get("configurable") or {}).get("thread_id"))
        self._updates.setdefault(thread_id, []).append(UpdateCall.of(api, config, supersteps, out))

    def _no_thread(self, config: dict[str, Any] | None) -> bool:
        """Whether a run is called without a thread on a graph compiled with its own checkpointer.

        LangGraph refuses such a run (a ``ValueError`` asking for ``thread_id`` when the config has no
        ``configurable``; the saver's own error otherwise), so it is handed to LangGraph as it is, not
        recorded: a thread graphtape made up would run a graph that LangGraph does not. (A graph
        recorded without a checkpointer gets a thread of its own, on graphtape's saver, every call.)
        """
        if "thread_id" in ((config or {}).get("configurable") or {}):
            return False
        return isinstance(getattr(self.original, "checkpointer", None), BaseCheckpointSaver)

    def invoke(self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        if self._no_thread(config):
            return self.graph.invoke(input, config, **kwargs)
        session, config = self._open(input, config, "invoke", kwargs)
        session.activate()
        try:
            out = self.graph.invoke(input, config, **kwargs)
        except BaseException as exc:
            self._close(session, "failed", error=exc)
            # the caught exception itself or the run's divergence: `from exc` would chain an exception to itself
            raise _prefer_divergence(session, exc)  # noqa: B904
        try:
            # may write (a strict replay's held rows) and read the store: a failure still ends the run
            status, interrupts = (
                self._status(config, session) if self._needs_state(session, kwargs) else ("finished", [])
            )
        except BaseException as exc:
            self._close(session, "failed", error=exc)
            raise
        self._close(session, status, output=out, interrupts=interrupts)
        return out

    async def ainvoke(self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        if self._no_thread(config):
            return await self.graph.ainvoke(input, config, **kwargs)
        session, config = self._open(input, config, "ainvoke", kwargs)
        session.activate()
        try:
            out = await self.graph.ainvoke(input, config, **kwargs)
        except BaseException as exc:
            self._close(session, "failed", error=exc)
            # the caught exception itself or the run's divergence: `from exc` would chain an exception to itself
            raise _prefer_divergence(session, exc)  # noqa: B904
        try:
            if self._needs_state(session, kwargs):
                status, interrupts = await self._astatus(config, session)
            else:
                status, interrupts = "finished", []
        except BaseException as exc:
            self._close(session, "failed", error=exc)
            raise
        self._close(session, status, output=out, interrupts=interrupts)
        return out

    def stream(self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> Iterator[Any]:
        if self._no_thread(config):
            yield from self.graph.stream(input, config, **kwargs)
            return
        session, config = self._open(input, config, "stream", kwargs)
        session.register()
        try:
            yield from self.graph.stream(input, config, **kwargs)
        except BaseException as exc:
            if isinstance(exc, GeneratorExit):
                self._close(session, "failed", error=RuntimeError("stream closed by the consumer before the end"))
                raise
            self._close(session, "failed", error=exc)
            # the caught exception itself or the run's divergence: `from exc` would chain an exception to itself
            raise _prefer_divergence(session, exc)  # noqa: B904
        try:
            session.flush()  # deferred pending writes (interrupts) must be readable
            snap = _snapshot(self.graph, config)
        except BaseException as exc:
            self._close(session, "failed", error=exc)
            raise
        status, interrupts = _status_from_snapshot(snap) if snap is not None else ("finished", [])
        self._close(session, status, interrupts=interrupts, output=snap.values if snap is not None else None)

    # An async generator is closed when its consumer closes it (``aclosing``, ``break`` out of
    # ``async with``), but one it iterates is not: each stream here is closed by its wrapper, so that
    # LangGraph's own stream cancels the run's other tasks before the consumer's close returns, as
    # it does unrecorded (else they ran on until the garbage collector closed it, if ever).

    async def astream(self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        async with contextlib.aclosing(self._astream_api("astream", self.graph.astream, input, config, **kwargs)) as s:
            async for item in s:
                yield item

    async def astream_events(
        self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        api = self._astream_api("astream_events", self.graph.astream_events, input, config, **kwargs)
        async with contextlib.aclosing(api) as s:
            async for item in s:
                yield item

    async def _astream_api(self, api: str, fn: Any, input: Any, config: dict[str, Any] | None, **kwargs: Any):
        if self._no_thread(config):
            async for item in fn(input, config, **kwargs):
                yield item
            return
        session, config = self._open(input, config, api, kwargs)
        session.register()
        try:
            async with contextlib.aclosing(fn(input, config, **kwargs)) as stream:
                async for item in stream:
                    yield item
        except BaseException as exc:
            if isinstance(exc, GeneratorExit):
                self._close(session, "failed", error=RuntimeError("stream closed by the consumer before the end"))
                raise
            self._close(session, "failed", error=exc)
            # the caught exception itself or the run's divergence: `from exc` would chain an exception to itself
            raise _prefer_divergence(session, exc)  # noqa: B904
        try:
            session.flush()
        except BaseException as exc:
            self._close(session, "failed", error=exc)
            raise
        try:
            snap = await self.graph.aget_state(config)
        except Exception:
            snap = None
        status, interrupts = _status_from_snapshot(snap) if snap is not None else ("finished", [])
        self._close(session, status, interrupts=interrupts, output=snap.values if snap is not None else None)


def _stopped_from_outside(error: BaseException | None) -> str | None:
    """How a run was stopped on purpose from outside (not a failure of its code), else None."""
    if isinstance(error, KeyboardInterrupt):
        return "stopped by Ctrl-C"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    # a stop decided by whoever answers the run's calls (the debugger's quit): the error says how
    reason = getattr(error, "stop_reason", None) if isinstance(error, ControlError) else None
    return reason if isinstance(reason, str) else None


def _snapshot(graph: Any, config: dict[str, Any]) -> Any:
    """The thread's latest state, read once for both the run's status and its output."""
    try:
        return graph.get_state(config)
    except Exception:
        return None


def _prefer_divergence(session: Session, exc: BaseException) -> BaseException:
    """A divergence caught and re-wrapped by user code still surfaces as itself."""
    if session.divergence is not None and not isinstance(exc, Divergence):
        return session.divergence
    return exc


def _status_from_snapshot(snap: Any) -> tuple[str, list[dict[str, Any]]]:
    from graphtape import serde

    interrupts = []
    for intr in getattr(snap, "interrupts", ()) or ():
        interrupts.append({"interrupt_id": intr.id, "value": serde.to_jsonable(intr.value)})
    if snap.next:
        return "interrupted", interrupts
    return "finished", interrupts
