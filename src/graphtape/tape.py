"""``graphtape.connect()`` and the :class:`Tape`: the library's front door.

Why over 500 lines: every public operation of the library is a method here, each a
docstring and a delegation to the module that does the work (``replay.engine``,
``debug.*``, ``runtime.*``, ``export``); splitting the class would scatter the one
place users read to learn what graphtape can do.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from graphtape.errors import RunNotFound
from graphtape.pricing import PriceTable
from graphtape.store import open_store
from graphtape.store.base import EventRow, RunRecord, TapeStore


class Tape:
    """A tape store plus what graphtape needs to record into and replay from it.

    Use :func:`connect` to get one. A ``Tape`` is safe to share between
    threads; close it (or use it as a context manager) when done.
    """

    def __init__(
        self,
        store: TapeStore,
        *,
        redact: Iterable[str] = (),
        prices: dict[str, tuple[float, float]] | None = None,
        types: Iterable[type] = (),
    ):
        from graphtape.typepolicy import check_types

        self.store = store
        self.redact_keys = frozenset(redact)
        self.pricing = PriceTable(prices)
        #: classes values and errors may be rebuilt as, beside what each graph declares (graphtape.typepolicy)
        self.types = check_types(types)

    @property
    def url(self) -> str:
        return self.store.url

    def __enter__(self) -> Tape:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    # -- recording --------------------------------------------------------------

    def record(
        self,
        graph: Any,
        *,
        name: str | None = None,
        checkpointer: Any = None,
        wait: float = 0.0,
        lease_ttl: float = 30.0,
    ):
        """Wrap a compiled LangGraph graph so that every call of it is recorded.

        The graph's own checkpointer is kept, or ``checkpointer`` is used.
        Without either, the graph keeps LangGraph's semantics: each call
        starts afresh (nothing carried between calls on one ``thread_id``),
        recorded on a thread of its own on graphtape's saver, and a state
        value that cannot be stored is a placeholder in its checkpoints (with
        a :class:`~graphtape.GraphtapeWarning`), never a failure. For threads
        that persist, pass ``checkpointer=tape.saver`` (graphtape's saver on
        this store: checkpoints and tape written together).
        Only one process runs a thread at a time: a second one waits up to
        ``wait`` seconds, then raises :class:`~graphtape.ThreadBusy`; a dead
        process's claim expires after ``lease_ttl`` seconds.
        """
        from graphtape.recorder import RecordedGraph

        return RecordedGraph(self, graph, name=name, checkpointer=checkpointer, wait=wait, lease_ttl=lease_ttl)

    @property
    def saver(self) -> Any:
        """graphtape's LangGraph checkpoint saver on this tape's store, one per store.

        Its checkpoints are written with the recording run's tape events in the
        same transaction. ``tape.record(graph, checkpointer=tape.saver)`` gives
        a graph compiled without a checkpointer durable threads (as LangGraph's
        server gives one its own); it can also be compiled in:
        ``builder.compile(checkpointer=tape.saver)``.
        """
        from graphtape.runtime.saver import saver_for

        return saver_for(self.store)

    # -- reading ----------------------------------------------------------------

    def runs(
        self, *, thread_id: str | None = None, status: str | None = None, limit: int | None = 50
    ) -> list[RunRecord]:
        """Recorded runs, newest first."""
        return self.store.list_runs(thread_id=thread_id, status=status, limit=limit)

    def run(self, run_id: str) -> RunRecord:
        """The run with this id (or unique id prefix); raises :class:`RunNotFound`."""
        run = self.store.get_run(run_id)
        if run is not None:
            return run
        matches = self.store.find_runs(run_id, limit=2) if len(run_id) >= 4 else []
        if len(matches) == 1:
            found = self.store.get_run(matches[0])
            if found is not None:
                return found
        if len(matches) > 1:
            raise RunNotFound(f"run id prefix {run_id!r} is ambiguous; give more characters")
        raise RunNotFound(f"no run {run_id!r} in {self.url}; list runs with `graphtape runs`")

    def events(self, run_id: str, kinds: list[str] | None = None) -> list[EventRow]:
        """The run's events in order."""
        return self.store.events(self.run(run_id).run_id, kinds)

    def calls(self, run_id: str):
        """The run's LLM, tool and effect calls as :class:`~graphtape.replay.matcher.RecordedCall`."""
        from graphtape.replay.matcher import CALL_KINDS, RecordedCall

        return [RecordedCall.from_event(e) for e in self.events(run_id, list(CALL_KINDS))]

    def payload(self, ref: str) -> Any:
        """A stored JSON payload by its content address, with message references expanded.

        On the tape, messages are stored once and referenced (``{"t": "msg"}``
        in restorable values, ``{"$m": ...}`` and ``{"$chain": ...}`` in
        views); the payload comes back self-contained, messages inlined as
        langchain's serialised form.
        """
        return self.expand(self.store.get_json(ref))

    def expand(self, obj: Any) -> Any:
        """``obj`` with message references replaced by the messages."""
        from langchain_core.load import dumpd

        from graphtape.serde import message_from_json

        def message(h: str, msg_id: Any = None) -> Any:
            data = self.store.get_json(h)
            try:
                msg = message_from_json(data)
            except Exception:  # not a message we can revive: show it as stored
                return data
            if msg_id is not None:
                msg = msg.model_copy(update={"id": msg_id})
            return dumpd(msg)

        if isinstance(obj, dict):
            if obj.get("t") == "msg" and isinstance(obj.get("h"), str):
                return {"t": "lc", "v": message(obj["h"], obj.get("id"))}
            if isinstance(obj.get("$m"), str):
                return message(obj["$m"], obj.get("id"))
            if isinstance(obj.get("$chain"), str):
                return [message(h) for h in self.store.get_chain(obj["$chain"])]
            return {k: self.expand(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.expand(v) for v in obj]
        return obj

    def request(self, call: Any) -> dict[str, Any]:
        """The full request of a recorded call, messages included."""
        import json

        req = dict(self.store.get_json(call.request_ref))
        if call.messages_ref is not None:
            hashes = self.store.get_chain(call.messages_ref)
            blobs = self.store.get_blobs(hashes)
            req["messages"] = [json.loads(blobs[h]) for h in hashes]
        return req

    # -- time travel -----------------------------------------------------------------

    def history(self, run_or_thread: str, *, namespaces: bool = False):
        """The checkpoints of a run (id or unique prefix) or a thread, oldest first, and its branches.

        Returns a :class:`~graphtape.debug.history.History`: ``entries``
        (checkpoint id, parent, namespace, step, source, time, run, the nodes
        that wrote it, the calls of its step, what ran next) and ``branches``
        (a tree of runs: continuations, forks, replays, with their labels).
        ``namespaces=True`` adds subgraph checkpoints. Nothing is
        deserialised: a listing reads only what it shows.
        """
        from graphtape.debug.history import build_history

        return build_history(self, run_or_thread, namespaces=namespaces)

    def state(self, checkpoint_id: str, *, thread_id: str | None = None, graph: Any = None) -> dict[str, Any]:
        """The state (channel values) at a checkpoint, LangGraph's internal channels left out.

        ``checkpoint_id`` is an id or a unique prefix (8+ characters); its
        thread is found on the tape unless given. A checkpoint kept by
        another saver than graphtape's needs ``graph`` (compiled with that
        checkpointer); otherwise :class:`~graphtape.errors.RunNotFound` says so.
        """
        from graphtape.debug.locate import checkpoint_state

        return checkpoint_state(self, checkpoint_id, thread_id=thread_id, graph=graph)

    def diff(self, a: str, b: str, *, graph: Any = None):
        """A structural diff of the states at checkpoints ``a`` and ``b`` (any threads or runs).

        Returns a :class:`~graphtape.debug.diff.StateDiff`: ``changes``,
        ``render()`` (readable text) and ``json_patch()`` (RFC 6902).
        Messages are compared by role and content; ids are ignored.
        """
        from graphtape.debug.diff import diff_states
        from graphtape.debug.locate import locate_checkpoint, values_at

        ref_a = locate_checkpoint(self, a)
        ref_b = locate_checkpoint(self, b)
        return diff_states(
            values_at(self, ref_a, graph),
            values_at(self, ref_b, graph),
            a_label=ref_a.checkpoint_id,
            b_label=ref_b.checkpoint_id,
        )

    def label(self, run_id: str, label: str | None, note: str | None = None) -> None:
        """Attach a label (and a note) to a run, shown on its branch by :meth:`history`.

        Appends a ``label`` event (the tape is append-only): the latest label
        of a run wins; ``label=None`` clears it.
        """
        from graphtape.debug.history import label_run

        label_run(self, run_id, label, note)

    # -- replaying ----------------------------------------------------------------

    def replay(
        self,
        run_id: str,
        graph: Any,
        *,
        mode: str = "strict",
        allow_live_effects: bool = False,
        from_checkpoint: str | None = None,
        raise_on_divergence: bool = False,
        progress: Any = None,
        new_run_id: str | None = None,
    ):
        """Re-run ``graph`` (the current code) against the recorded run ``run_id``.

        ``mode="strict"`` serves every call from the tape and reports a
        divergence if the code asks anything else; ``mode="flight"`` serves
        unchanged calls and makes changed ones live. ``from_checkpoint``
        starts from one of the run's (root) checkpoints instead of its input.
        ``new_run_id`` (a UUID string) is the id of the new run that replays
        ``run_id``, chosen up front (a server answers with it before the run starts).
        Returns a
        :class:`~graphtape.replay.engine.ReplayResult`.
        """
        from graphtape.replay.engine import replay

        if hasattr(graph, "original"):  # a RecordedGraph: replay its graph
            graph = graph.original
        result = replay(
            self,
            run_id,
            graph,
            mode=mode,
            allow_live_effects=allow_live_effects,
            from_checkpoint=from_checkpoint,
            progress=progress,
            new_run_id=new_run_id,
        )
        if raise_on_divergence:
            result.raise_for_divergence()
        return result

    async def areplay(
        self,
        run_id: str,
        graph: Any,
        *,
        mode: str = "strict",
        allow_live_effects: bool = False,
        from_checkpoint: str | None = None,
        raise_on_divergence: bool = False,
        progress: Any = None,
        new_run_id: str | None = None,
    ):
        """:meth:`replay` in the running event loop (notebooks, FastAPI handlers, async tests).

        Runs recorded with ``ainvoke``/``astream``/``astream_events`` are
        awaited in the caller's loop; runs recorded with the sync API run in
        a worker thread. Same arguments and result as :meth:`replay`.
        """
        from graphtape.replay.engine import areplay

        if hasattr(graph, "original"):
            graph = graph.original
        result = await areplay(
            self,
            run_id,
            graph,
            mode=mode,
            allow_live_effects=allow_live_effects,
            from_checkpoint=from_checkpoint,
            progress=progress,
            new_run_id=new_run_id,
        )
        if raise_on_divergence:
            result.raise_for_divergence()
        return result

    # -- logic injection -------------------------------------------------------------

    def fork(
        self,
        checkpoint_id: str,
        graph: Any,
        *,
        values: dict[str, Any] | None = None,
        as_node: str | None = None,
        mode: str = "flight",
        allow_live_effects: bool = False,
        run_id: str | None = None,
        new_run_id: str | None = None,
    ):
        """Continue from a checkpoint in a new thread, optionally with an edited state.

        ``values`` are checked against the graph's state schema and applied as
        node ``as_node`` would have written them; ``mode`` is ``strict``,
        ``flight`` or ``live``. The original run is not changed. ``run_id``
        looks the checkpoint up among that run's; ``new_run_id`` names the new run.
        """
        from graphtape.debug.inject import fork

        return fork(
            self,
            checkpoint_id,
            graph,
            values=values,
            as_node=as_node,
            mode=mode,
            allow_live_effects=allow_live_effects,
            run_id=run_id,
            new_run_id=new_run_id,
        )

    def override(
        self,
        run_id: str,
        call_id: str,
        output: Any,
        graph: Any,
        *,
        mode: str = "flight",
        allow_live_effects: bool = False,
        from_start: bool = False,
        new_run_id: str | None = None,
    ):
        """Re-run with one recorded LLM, tool or effect output replaced by ``output``.

        Runs from the checkpoint before the call (or from the start): earlier
        calls are served, the override is injected, later calls follow ``mode``.
        """
        from graphtape.debug.inject import override

        return override(
            self,
            run_id,
            call_id,
            output,
            graph,
            mode=mode,
            allow_live_effects=allow_live_effects,
            from_start=from_start,
            new_run_id=new_run_id,
        )

    def invalidate_from(
        self, run_id: str, node: str, graph: Any, *, allow_live_effects: bool = False, new_run_id: str | None = None
    ):
        """Re-run with every call from the first execution of ``node`` on made live, earlier ones served."""
        from graphtape.debug.inject import invalidate_from

        return invalidate_from(self, run_id, node, graph, allow_live_effects=allow_live_effects, new_run_id=new_run_id)

    async def afork(
        self,
        checkpoint_id: str,
        graph: Any,
        *,
        values: dict[str, Any] | None = None,
        as_node: str | None = None,
        mode: str = "flight",
        allow_live_effects: bool = False,
        run_id: str | None = None,
        new_run_id: str | None = None,
    ):
        """:meth:`fork` in the running event loop."""
        from graphtape.debug.inject import afork

        return await afork(
            self,
            checkpoint_id,
            graph,
            values=values,
            as_node=as_node,
            mode=mode,
            allow_live_effects=allow_live_effects,
            run_id=run_id,
            new_run_id=new_run_id,
        )

    async def aoverride(
        self,
        run_id: str,
        call_id: str,
        output: Any,
        graph: Any,
        *,
        mode: str = "flight",
        allow_live_effects: bool = False,
        from_start: bool = False,
        new_run_id: str | None = None,
    ):
        """:meth:`override` in the running event loop."""
        from graphtape.debug.inject import aoverride

        return await aoverride(
            self,
            run_id,
            call_id,
            output,
            graph,
            mode=mode,
            allow_live_effects=allow_live_effects,
            from_start=from_start,
            new_run_id=new_run_id,
        )

    async def ainvalidate_from(
        self, run_id: str, node: str, graph: Any, *, allow_live_effects: bool = False, new_run_id: str | None = None
    ):
        """:meth:`invalidate_from` in the running event loop."""
        from graphtape.debug.inject import ainvalidate_from

        return await ainvalidate_from(
            self, run_id, node, graph, allow_live_effects=allow_live_effects, new_run_id=new_run_id
        )

    def resume(
        self,
        thread_id: str,
        graph: Any,
        value: Any = None,
        *,
        by_id: dict[str, Any] | None = None,
        name: str | None = None,
    ):
        """Answer the pending ``interrupt()`` of a thread (several at once with ``by_id``); a recorded run.

        Returns the recorded graph wrapper; its ``last_run_id`` is the new run.
        """
        recorded, config = self._resume_target(thread_id, graph, name)
        recorded.invoke(_resume_command(thread_id, recorded.get_state(config).interrupts, value, by_id), config)
        return recorded

    async def aresume(
        self,
        thread_id: str,
        graph: Any,
        value: Any = None,
        *,
        by_id: dict[str, Any] | None = None,
        name: str | None = None,
    ):
        """:meth:`resume` in the running event loop (the run is recorded with ``ainvoke``)."""
        recorded, config = self._resume_target(thread_id, graph, name)
        pending = (await recorded.aget_state(config)).interrupts
        await recorded.ainvoke(_resume_command(thread_id, pending, value, by_id), config)
        return recorded

    def _resume_target(self, thread_id: str, graph: Any, name: str | None) -> tuple[Any, dict[str, Any]]:
        from graphtape.recorder import thread_saver

        last = self.runs(thread_id=thread_id, limit=1)
        # (the thread persists: resumed on the graph's own checkpointer, else graphtape's saver)
        recorded = self.record(
            graph, name=name or (last[0].graph if last else None), checkpointer=thread_saver(self, graph)
        )
        return recorded, {"configurable": {"thread_id": thread_id}}

    # -- durability ------------------------------------------------------------------

    def orphaned_runs(self):
        """Runs left ``running`` by a process that died (their thread's lease has expired)."""
        from graphtape.runtime.recovery import orphaned_runs

        return orphaned_runs(self)

    def recover(self, graph: Any, *, run_id: str | None = None, progress: Any = None):
        """Finish the runs dead processes left behind, serving every call they had completed.

        ``graph`` is the compiled graph, or a function from the crashed
        :class:`RunRecord` to its graph. Returns one
        :class:`~graphtape.runtime.recovery.Recovery` per run.
        """
        from graphtape.runtime.recovery import recover

        return recover(self, graph, run_id=run_id, progress=progress)

    # -- retention and monitoring ------------------------------------------------------

    def prune(
        self,
        *,
        older_than: float | None = None,
        keep_last: int | None = None,
        statuses: Iterable[str] | None = None,
        truncate_threads: bool | None = None,
        dry_run: bool = False,
        progress: Any = None,
    ):
        """Delete runs by age (``older_than`` seconds), count (``keep_last`` per thread) or status.

        Runs that kept runs depend on stay (the original of a replay, the
        earlier runs of a thread, the run a recovery recovers); running runs
        are never deleted. ``dry_run`` deletes nothing. Returns a
        :class:`~graphtape.runtime.retention.PruneResult` whose ``plan`` says
        what goes and what stays and why; see :mod:`graphtape.runtime.retention`.
        """
        from graphtape.runtime.retention import plan_prune, prune

        plan = plan_prune(
            self, older_than=older_than, keep_last=keep_last, statuses=statuses, truncate_threads=truncate_threads
        )
        return prune(self, plan, dry_run=dry_run, progress=progress)

    def stats(self, *, stuck_after: float = 300.0, size_warning: int = 1_000_000, limit_runs: int | None = 1000):
        """Monitoring figures: runs by status, tape and checkpoint sizes, write and node latency, stuck threads.

        Returns :class:`~graphtape.runtime.stats.Stats` (``to_dict()``, ``to_prometheus()``).
        """
        from graphtape.runtime.stats import collect_stats

        return collect_stats(self, stuck_after=stuck_after, size_warning=size_warning, limit_runs=limit_runs)

    # -- moving tapes --------------------------------------------------------------

    def export_run(self, run_id: str, path: str | Path) -> int:
        """Write one run (and everything it references) to a JSONL file; returns lines written.

        A run that crashed and was recovered is written with its recoveries, so that the file
        replays it whole (:mod:`graphtape.replay.lineage`).
        """
        from graphtape.export import export_runs
        from graphtape.replay.lineage import recovered_line

        return export_runs(self, recovered_line(self.store, self.run(run_id)), path, kind="run")

    def export_thread(self, thread_id: str, path: str | Path) -> int:
        """Write every run of a thread to a JSONL file."""
        from graphtape.export import export_runs

        runs = self.store.list_runs(thread_id=thread_id, limit=None, newest_first=False)
        if not runs:
            raise RunNotFound(f"no runs on thread {thread_id!r} in {self.url}")
        return export_runs(self, runs, path, kind="thread")

    def archive(
        self,
        *,
        older_than: float,
        to: str | Path,
        status: str | list[str] | None = None,
        dry_run: bool = False,
        expire_after: float | None = None,
        keep_interrupted_for: float | None = None,
    ):
        """Move threads quiet for more than ``older_than`` seconds to compressed files in ``to``
        (a directory or an fsspec URL), verified before they leave the store; see
        :mod:`graphtape.runtime.archive`. ``status`` limits it to threads whose runs all have it;
        ``expire_after`` (seconds) deletes the archives this store made longer ago than that;
        ``keep_interrupted_for`` (seconds) keeps a thread waiting at an interrupt that long, however
        old it is."""
        from graphtape.runtime.archive import archive

        statuses = [status] if isinstance(status, str) else status
        return archive(
            self,
            older_than=older_than,
            to=to,
            statuses=statuses,
            dry_run=dry_run,
            expire_after=expire_after,
            keep_interrupted_for=keep_interrupted_for,
        )

    def restore(self, thread_or_file: str, *, from_: str | Path | None = None):
        """Bring an archived thread back (an archive file, or a thread id whose file is in ``from_``)."""
        from graphtape.runtime.archive import restore

        return restore(self, thread_or_file, from_=from_)

    def import_file(self, path: str | Path) -> list[str]:
        """Load an exported tape into this store; returns the ids of the runs added."""
        from graphtape.export import import_file

        return import_file(self, path)


def _resume_command(thread_id: str, pending: Any, value: Any, by_id: dict[str, Any] | None) -> Any:
    """The ``Command(resume=...)`` answering a thread's pending interrupts, checked against them."""
    from langgraph.types import Command

    from graphtape.errors import ReplayError

    if not pending:
        raise ReplayError(f"thread {thread_id} has no pending interrupt to answer")
    if by_id is not None:
        unknown = set(by_id) - {i.id for i in pending}
        if unknown:
            raise ReplayError(
                f"no pending interrupt {sorted(unknown)[0]!r} on thread {thread_id}; "
                f"pending: {', '.join(i.id for i in pending)}"
            )
        return Command(resume=by_id)
    if len(pending) > 1:
        raise ReplayError(f"thread {thread_id} has {len(pending)} pending interrupts; answer them by id")
    return Command(resume=value)


def connect(
    url: str | None = None,
    *,
    redact: Iterable[str] = (),
    prices: dict[str, tuple[float, float]] | None = None,
    types: Iterable[type] = (),
) -> Tape:
    """Open the tape store at ``url`` (default: ``GRAPHTAPE_URL`` or ``.graphtape/tape.db``).

    ``redact`` names extra config or parameter keys whose values are never
    written; keys that look like secrets (``api_key``, ``token``, ...) are
    always redacted. ``prices`` adds or overrides model prices (USD per
    million input/output tokens) used for cost estimates. ``types`` are
    pydantic models, enums, dataclasses, named tuples and exception classes that replays
    from this tape may rebuild besides those the graph declares (see
    :func:`graphtape.register_types`).
    """
    from graphtape.typepolicy import check_types

    types = check_types(types)  # before opening: a wrong class must leave no store open
    return Tape(open_store(url), redact=redact, prices=prices, types=types)
