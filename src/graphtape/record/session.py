"""A run being recorded (or replayed): the one object every interception talks to.

Interceptions find it through :mod:`graphtape.record.context`. The session holds
the run's recording state: its identity, the calls in flight and their ordinals
(see :mod:`graphtape.calls`), counts and replay totals, and the per-step bookkeeping graphtape's saver stores with each
checkpoint. What happens to each call is asked of the run's answerer
(:mod:`graphtape.record.answer`); rows are buffered and written by its
:class:`~graphtape.record.writer.TapeWriter`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any

from graphtape import clock, events, serde, typepolicy
from graphtape.calls import CallSite, RecordedCall, site_from_metadata
from graphtape.errors import Divergence
from graphtape.record import context
from graphtape.record.answer import RECORD, Answerer
from graphtape.record.checkpoints import FLUSHER
from graphtape.record.errors_codec import error_info, rebuild_error
from graphtape.record.writer import TapeWriter
from graphtape.store.base import EventRow, RunRecord, WriteBatch
from graphtape.store.listing import call_levels, listed_call

if TYPE_CHECKING:
    from collections.abc import Sequence

    from graphtape.record.updates import UpdateCall
    from graphtape.tape import Tape

#: A strict replay writes its held checkpoints at least every this many checkpoints (see Session.flush).
HOLD_MAX = 500

#: the event type each call kind is recorded as
_CALL_EVENTS: dict[str, type[events.CallEvent]] = {
    "llm": events.LlmCall,
    "tool": events.ToolCall,
    "effect": events.EffectCall,
}
_CALL_EVENT_KINDS = {kind: cls.KIND for kind, cls in _CALL_EVENTS.items()}
#: a call event's fields as Session._record_call writes them: those it is given, then those of a call's
#: summary (the model, a tool's name and code, ...), each in the order of events.CallEvent's layout
_CALL_FIELDS = (
    "call_id",
    "node_path",
    "branch",
    "step",
    "task",
    "ordinal",
    "fingerprint",
    "request",
    "messages",
    "response",
    "error",
    "tokens",
    "cost",
    "latency",
    "source",
    "served_from",
    "recorded_latency",
)
_SUMMARY_FIELDS = tuple(name for name, _ in events.CallEvent.LAYOUT if name not in _CALL_FIELDS)
_SUMMARY_KEYS = frozenset(_SUMMARY_FIELDS)


@dataclasses.dataclass
class Call:
    """A call in flight: where it was made, what it asked, how it is answered."""

    call_id: str
    site: CallSite
    fingerprint: str
    request_ref: str
    messages_ref: str | None
    summary: dict[str, Any]
    served: RecordedCall | None = None
    override: Any = None
    started: float = 0.0
    #: the request's messages as JSON, kept only in memory for divergence reports
    messages_view: list[Any] | None = None
    #: set when the answerer reconciled an in-doubt effect: the result to return without running it
    reconciled: Any = None
    is_reconciled: bool = False
    #: the id the caller gave this call (a tool call id): a served ToolMessage answers it (not recorded)
    caller_id: str | None = None


class Session:
    """One run: its recording state; asks its answerer about each call, writes through its tape writer."""

    def __init__(
        self,
        tape: Tape,
        *,
        thread_id: str,
        graph_name: str,
        mode: str = "record",
        answerer: Answerer = RECORD,
        replay_of: str | None = None,
        parent_run_id: str | None = None,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ):
        self.tape = tape
        self.store = tape.store
        self.run_id = run_id or clock.new_id()
        self.thread_id = thread_id
        self.graph_name = graph_name
        self.mode = mode
        self.answerer = answerer
        self.replay_of = replay_of
        self.parent_run_id = parent_run_id
        self.meta = meta or {}
        self.active = False
        #: calls answered from the tape (or an override) and, in a replay, calls that ran live; the
        #: replay's totals are summed from the call events (graphtape.events.replay_stats)
        self.served_calls = 0
        self.live_calls = 0
        self.counts = dict.fromkeys(events.CALL_KINDS, 0)
        self.tokens = 0
        self.divergence: Divergence | None = None
        self.checkpoint_ids: list[str] = []
        self.writer = TapeWriter(self.store, self.run_id)
        on_store = getattr(answerer, "on_store", None)
        if on_store is not None:
            # a replay: the addresses its recorded runs refer to (graphtape.replay.engine)
            self.writer.assume_stored(*on_store)
        # The writer's operations, as the session's: every interception calls them (bound once, not per call).
        self.put_json = self.writer.put_json
        self.encode = self.writer.encode
        self.view = self.writer.view
        self.message_blob = self.writer.message_blob
        self.message_key = self.writer.message_key
        self.put_messages = self.writer.put_messages
        self.event = self.writer.event
        self.emit = self.writer.emit
        self.defer = self.writer.defer
        self._lock = threading.RLock()
        self._ordinals: dict[tuple[str, str], int] = {}
        #: task id -> branch (normalised task path), filled by the task recorder
        self.task_branches: dict[str, Any] = {}
        #: (checkpoint namespace, step) -> {task namespace: node path} of the tasks
        #: started in that step and not interrupted or failed (so far): the writers
        #: of the step's checkpoint, stored on its row by graphtape's saver
        self.step_writers: dict[tuple[str, int], dict[str, str]] = {}
        #: task namespace -> its step; (checkpoint namespace, step) -> the calls made in that step
        #: at any depth, as listed (see note_call): stored with the step's checkpoint too
        self.task_steps: dict[str, int] = {}
        self.step_calls: dict[tuple[str, int], list[list[Any]]] = {}
        self._token: contextvars.Token | None = None
        #: set when a task wrote an interrupt: the run's status needs a state read
        self.saw_interrupt = False
        #: with graphtape's own saver, each completed call is written at once so
        #: that recovery after a crash never sends it again
        self.durable = False
        #: the classes this run's values and errors may be rebuilt as (set from the graph by the recorder)
        self.types: typepolicy.TypePolicy = typepolicy.DEFAULT
        #: a strict replay keeps its checkpoints' rows until the run's next explicit flush (see flush)
        self.holding = mode == "strict" and answerer.replays and not answerer.pauses
        #: a recording with graphtape's saver under LangGraph's ``durability="async"`` hands each
        #: checkpoint to its writer's buffer: the run's next write (the background writer's within
        #: ``FLUSH_INTERVAL``, a call written at once, the run's end) stores it (see flush). Not under
        #: the debugger: a paused run's state is read by the Studio while it waits.
        self.defers_checkpoints = mode == "record" and not answerer.replays and not answerer.pauses
        # a strict replay's events repeat the replayed run's with new ids: stored plain, not deflated
        self.writer.plain_events = mode == "strict" and answerer.replays
        #: whether the answerer looks at checkpoints at all (a recording's does not): asked once, not per step
        self._answers_checkpoints = type(answerer).checkpoint is not Answerer.checkpoint
        self._held = 0
        #: once the run's end is written: its interrupt and run_finished events, as written (see finish)
        self.end_rows: list[EventRow] | None = None
        #: the chain ids of the message list in the run's output, as its end stored it (a run_finished
        #: event refers to them): the recorder hands them to the thread's next run
        self.final_chain: list[str] = []

    @property
    def lease(self) -> Any:
        """The thread's lease (one writer per thread); its token fences every write."""
        return self.writer.lease

    @lease.setter
    def lease(self, lease: Any) -> None:
        self.writer.lease = lease

    @property
    def start_unwritten(self) -> bool:
        """Whether the run's row is still buffered (its start went with no store write yet)."""
        return self.writer.run_unwritten(self.run_id)

    # -- writing ---------------------------------------------------------------

    def flush(self, extra: WriteBatch | None = None, *, deferrable: bool = False) -> None:
        """Write the run's buffered rows, with ``extra`` (a checkpoint from graphtape's saver) if given.

        ``deferrable``: ``extra`` was saved under ``durability="async"``, where
        LangGraph already lets a checkpoint's save overlap the next steps and
        only promises every checkpoint stored when the run ends. A recording
        (``defers_checkpoints``) then buffers it instead of a transaction per
        super-step: the background writer stores it within ``FLUSH_INTERVAL``
        (50 ms), sooner if a call written at once or the run's end writes
        first. The calls' own safety is unchanged (the journal, or a write per
        call): a crash loses at most those 50 ms of checkpoints, and recovery
        resumes from the last stored one, serving the calls the tape holds. A
        ``checkpointer=True`` subgraph's checkpoint is written at once (it is
        read back during the run), and so is every one after a background
        write failed (in line: a store that still fails raises there).

        A strict replay holds its checkpoints instead: they are written with
        the run's next flush without ``extra`` (its end, or the state read
        before it; the divergence report of a diverged replay is written
        there too). A strict replay makes no live call and has no side
        effect, so nothing is lost if it crashes: it is run again. Its
        checkpoints are written every ``HOLD_MAX`` all the same (memory), and
        at once from a checkpoint of a ``checkpointer=True`` subgraph on (its
        namespace has a part without a task id: the subgraph reads its last
        checkpoint back when it is invoked again in the run).
        """
        if extra is not None and self.holding:
            if any(_read_back(row.checkpoint_ns) for row in extra.checkpoints):
                self.holding = False
            else:
                self._held += len(extra.checkpoints)
                if self._held < HOLD_MAX:
                    self.writer.defer(extra)
                    return
                self._held = 0
        elif deferrable and extra is not None and self.defers_checkpoints:
            if not any(_read_back(row.checkpoint_ns) for row in extra.checkpoints):
                self.writer.defer(extra)
                FLUSHER.later(self)
                return
        self.writer.flush(extra)

    def background_flush(self) -> None:
        """The background writer's write (``record/checkpoints.py``): beside a foreign saver whatever is
        buffered; with graphtape's saver calls still waiting in the journal for a checkpoint, and
        deferred checkpoints (see flush)."""
        if not self.durable:
            self.flush()
        elif self.writer.journal_pending() or self.writer.holds_checkpoints():
            # a failure keeps the rows buffered (and in the journal): the run's next write retries
            # them and raises it there, in line (its next checkpoint is no longer deferred)
            try:
                self.flush()
            except Exception:
                self.defers_checkpoints = False

    def maybe_flush(self) -> None:
        """Flush if the last flush is old (beside a foreign saver; a strict replay holds its rows)."""
        if not self.holding:
            self.writer.maybe_flush()

    # -- lifecycle ------------------------------------------------------------

    def register(self) -> None:
        """Make the run findable by its id (from config metadata) by every interception."""
        self.active = True
        context.register(self)

    def activate(self) -> None:
        """Register, and make this the current run of the calling context too."""
        self.register()
        self._token = context.make_current(self)

    def deactivate(self) -> None:
        self.active = False
        context.unregister(self)
        self.writer.close_journal()
        if self._token is not None:
            # reset from another context is a no-op: the session is inactive anyway, so lookups ignore it
            context.reset_current(self._token)
            self._token = None

    def start(
        self,
        run_input: Any,
        config: dict[str, Any],
        call_kwargs: dict[str, Any] | None = None,
        *,
        write_now: bool = True,
        updates: Sequence[UpdateCall] = (),
    ) -> None:
        """Buffer the run's row and start events; write them at once if ``write_now``.

        ``updates``: the ``update_state`` calls made on the thread since its last run
        (:mod:`graphtape.record.updates`), stored as this run's ``state_update`` events.

        Beside a foreign saver (``write_now`` False) they go with the run's
        first background tape write or with its end, in that transaction
        (see :class:`~graphtape.record.checkpoints.TapeFlusher`): the promise
        there is that a crash loses at most the last ``FLUSH_INTERVAL`` of
        tape, and a run's first 50 ms are within it. That saves a store
        transaction per run (a conversation turn shorter than 50 ms writes
        once, at its end).
        """
        run = RunRecord(
            run_id=self.run_id,
            thread_id=self.thread_id,
            graph=self.graph_name,
            status="running",
            started_at=clock.now(),
            parent_run_id=self.parent_run_id,
            replay_of=self.replay_of,
            mode=self.mode,
            meta=self.meta,
        )
        self.started_at = run.started_at
        input_ref = self.put_json(self.encode(run_input))
        self.writer.new_run(run)
        # Run, thread, mode and replay link are on the run row; the config and
        # versions repeat from run to run, so they are stored by address.
        self.emit(
            events.RunStarted(
                input=input_ref,
                config=self.put_json(serde.redact(serde.to_jsonable(_config_for_tape(config)), self.tape.redact_keys)),
                versions=self._put_versions(),
                # the call's JSON-able arguments (version="v2", stream_mode, ...): replayed as recorded
                kwargs=serde.redact(call_kwargs, self.tape.redact_keys) if call_kwargs else None,
            )
        )
        if _is_resume(run_input):
            self.emit(events.Resume(value=self.put_json(self.encode(run_input.resume))))
        if updates:
            from graphtape.record import updates as updates_mod

            updates_mod.emit(self, updates)
        # Written at once with graphtape's own saver (recovery reads run_started), and by a strict
        # replay that holds its other rows too: a run listed as running keeps the run it replays from
        # garbage collection (graphtape.runtime.retention), and the replay's rows refer to that run's
        # blobs without writing them again (see the engine).
        if write_now:
            self.flush()

    def _put_blob(self, blob: tuple[bytes, str]) -> str:
        data, h = blob
        self.writer.put_data(h, data)
        return h

    def _put_versions(self) -> str:
        """Buffer the package versions' blob (its stored bytes and address worked out once per process)."""
        global _VERSIONS_BLOB
        if _VERSIONS_BLOB is None:
            data = serde.stored_json(_package_versions())
            _VERSIONS_BLOB = (data, serde.digest(data))
        return self._put_blob(_VERSIONS_BLOB)

    def finish(
        self,
        status: str,
        *,
        output: Any = None,
        error: BaseException | None = None,
        interrupts: list[dict[str, Any]] | None = None,
    ) -> None:
        # the run's interrupts and end as written: a replay reads them from here, not back from the store
        end_rows = [
            self._emit_row(events.Interrupt(interrupt_id=intr["interrupt_id"], value=intr["value"]))
            for intr in interrupts or []
        ]
        ended = clock.now()
        if status == "failed":
            self.emit(events.RunFailed(error=error_info(error)))
        else:
            self.writer.last_chain = []
            output_ref = self.put_json(self.view(output)) if output is not None else None
            # the chain of the output's (last) message list: run_finished refers to it (see final_chain)
            self.final_chain = self.writer.last_chain
            end_rows.append(self._emit_row(events.RunFinished(status=status, output=output_ref)))
        self.writer.update_run(
            {
                "status": status,
                "ended_at": ended,
                "llm_calls": self.counts["llm"],
                "tool_calls": self.counts["tool"],
                "effect_calls": self.counts["effect"],
                "served_calls": self.served_calls,
                "live_calls": self.live_calls,
                "tokens": self.tokens,
                "error": one_line_error(error) if error is not None else None,
                "meta": {**self.meta, "checkpoints": len(self.checkpoint_ids), **self.writer.write_ms()},
            }
        )
        self.flush()
        self.end_rows = end_rows

    def _emit_row(self, event: events.Event) -> EventRow:
        return self.writer.event_row(event.KIND, event.to_data())

    def decode(self, env: dict[str, Any]) -> Any:
        """A recorded value back, rebuilding only the classes ``self.types`` allows."""
        return serde.decode_value(env, self.store.get_json, self.types)

    # -- calls ------------------------------------------------------------------------

    def _next_ordinal(self, task: str, kind: str) -> int:
        with self._lock:
            n = self._ordinals.get((task, kind), 0)
            self._ordinals[(task, kind)] = n + 1
            return n

    def site(self, kind: str, metadata: dict[str, Any] | None) -> CallSite:
        md = metadata if metadata and "langgraph_checkpoint_ns" in metadata else context.runnable_metadata()
        return site_from_metadata(kind, md, self._next_ordinal, self.task_branches)

    def begin(
        self,
        kind: str,
        metadata: dict[str, Any] | None,
        request: dict[str, Any],
        fingerprint: str,
        messages_ref: str | None = None,
        summary: dict[str, Any] | None = None,
        messages_view: list[Any] | None = None,
        request_blob: tuple[bytes, str] | None = None,
    ) -> Call:
        """Register a call and ask the answerer about it: ``call.served`` is set when the tape answers.

        ``request_blob``: ``request``'s stored bytes and address when the caller has them (a chat
        model's parameters, the same on every call: see ``graphtape.record.llm``), else worked out here.

        Raises :class:`Divergence` (strict) or :class:`EffectBlocked` when
        the call may neither be served nor run live.
        """
        if self.divergence is not None:
            # This replay has diverged. A retry layer (or code that caught the Divergence) is
            # calling again: the first report stands, and nothing is matched, served or sent.
            raise self.divergence
        call = Call(
            call_id=clock.new_id(),
            site=self.site(kind, metadata),
            fingerprint=fingerprint,
            request_ref=self.put_json(request) if request_blob is None else self._put_blob(request_blob),
            messages_ref=messages_ref,
            summary=summary or {},
            started=time.perf_counter(),
            messages_view=messages_view,
        )
        if self.answerer is RECORD:
            return call
        decision = self.answerer.answer(self, call, request)
        if decision.code_changed:
            # the tool's or effect's code changed since the recording: listed in the replay's result
            call.summary["code_changed"] = True
        action = decision.action
        if action == "serve":
            call.served = decision.recorded
            call.override = decision.override
        elif action == "reconciled":
            call.reconciled, call.is_reconciled = decision.value, True
        elif action == "diverge":
            assert isinstance(decision.error, Divergence)
            self.divergence = decision.error
            self.emit(events.Divergence.from_data(decision.error.report))
            raise decision.error
        elif action == "block":
            assert decision.error is not None
            raise decision.error
        return call

    def intent(self, call: Call) -> None:
        """Write, durably and before it runs, that an effect with an idempotency key is starting."""
        self.emit(
            events.EffectStarted(
                call_id=call.call_id,
                name=call.summary.get("name"),
                idempotency_key=call.summary.get("idempotency_key"),
                fingerprint=call.fingerprint,
            )
        )
        self.flush()

    def served_value(self, call: Call) -> tuple[Any, BaseException | None]:
        """The recorded (or overriding) result of a served call, and records it."""
        rec = call.served
        assert rec is not None
        if call.override is not None:
            value_env, error, ref = call.override, None, None
        else:
            # the recorded response is already on this store: the new call event points at the same
            # blob instead of serialising and hashing the value again
            value_env, error, ref = rec.response_env(self.store), rec.error, rec.response_ref
        self._record_call(
            call,
            response_env=value_env,
            response_ref=ref,
            error=error,
            latency=0.0,
            usage=None,
            tokens=rec.tokens if call.override is None else 0,
            source="override" if call.override is not None else "tape",
        )
        with self._lock:
            self.served_calls += 1
        if error is not None:
            return None, rebuild_error(error, self.types)
        if call.override is not None:
            return self.decode(value_env), None
        return serde.decode_value(value_env, rec.getter(self.store), self.types), None

    def end_live(
        self,
        call: Call,
        *,
        result: Any = None,
        error: BaseException | None = None,
        usage: dict[str, Any] | None = None,
        model_name: str | None = None,
        source: str = "live",
    ) -> None:
        if error is not None and is_control_flow(error):
            # interrupt() / Command bubbling through the call: the call did not
            # complete; it runs again when the node resumes.
            return
        latency = time.perf_counter() - call.started
        env = self.encode(result) if error is None else None
        tokens = serde.usage_tokens(usage)
        cost = self.tape.pricing.cost(model_name, tokens[0], tokens[1]) if usage else 0.0
        self._record_call(
            call,
            response_env=env,
            error=error_info(error) if error else None,
            latency=latency,
            usage=usage,
            source=source,
            cost=cost,
        )
        if call.summary.get("idempotency_key") is not None:
            self.flush()
        elif self.durable and self.writer.secure():
            # safe before the run goes on (recovery serves it instead of sending it again) by a
            # journal append; its rows ride with the next checkpoint, or are written in a moment
            FLUSHER.later(self)
        if self.answerer.replays:
            with self._lock:
                self.live_calls += 1

    def _record_call(
        self,
        call: Call,
        *,
        response_env: Any,
        error: dict[str, Any] | None,
        response_ref: str | None = None,
        latency: float,
        usage: dict[str, Any] | None,
        source: str,
        cost: float | None = None,
        tokens: int | None = None,
    ) -> None:
        site = call.site
        counted = serde.usage_tokens(usage)
        if tokens is not None:
            counted = (0, 0, tokens)
        tokens_total = counted[2]
        if cost is None:
            cost = call.served.cost if call.served is not None and source == "tape" else 0.0
        served = call.served
        response = response_ref or (self.put_json(response_env) if response_env is not None else None)
        summary = call.summary
        values = (
            call.call_id,
            site.node_path,
            site.branch,
            site.step,
            site.task,
            site.ordinal,
            call.fingerprint,
            call.request_ref,
            call.messages_ref,
            response,
            error,
            tokens_total or None,
            round(cost, 10) or None,
            round(latency, 6),
            source,
            served.call_id if served is not None else None,
            round(served.latency, 6) if served is not None else None,
        )
        if summary.keys() <= _SUMMARY_KEYS:
            # the call event's JSON form (events.CallEvent.to_data: its fields in order, None left out),
            # built here: every call passes through this, and the typed event's construction and
            # to_data cost more than the rest of it (tests/test_percall_event.py compares the two forms)
            data = {k: v for k, v in zip(_CALL_FIELDS, values) if v is not None}
            if summary:
                get = summary.get
                for key in _SUMMARY_FIELDS:
                    v = get(key)
                    if v is not None:
                        data[key] = v
            kind = _CALL_EVENT_KINDS[site.kind]
        else:  # a key no call event has: the typed event says so (TypeError), as it always did
            given: dict[str, Any] = dict(zip(_CALL_FIELDS, values))
            event = _CALL_EVENTS[site.kind](**given, **summary)
            data, kind = event.to_data(), event.KIND
        with self._lock:
            self.counts[site.kind] += 1
            self.tokens += tokens_total
        self.event(kind, data)
        self.note_call(site.kind, data)

    def note_call(self, kind: str, data: dict[str, Any]) -> None:
        """Count a call in the step of every level it was made at: the step of its own task, and of
        each enclosing task (a subgraph's call belongs to the root step that ran the subgraph too),
        so that the checkpoint of each step can list its calls without reading call events."""
        summary = listed_call(kind, data)
        task = data.get("task") or ""
        if task and task != "(root)" and "|" not in task:
            # a task of the root graph (most calls): one level, what call_levels gives for one segment
            at = self.task_steps.get(task)
            if at is None:
                at = data.get("step")
            keys = [("", at)] if isinstance(at, int) else []
        else:
            keys = call_levels(task, data.get("step"), self.task_steps.get)
        with self._lock:
            for key in keys:
                self.step_calls.setdefault(key, []).append(summary)

    # -- checkpoints ---------------------------------------------------------

    def on_checkpoint(self, config: dict[str, Any], checkpoint: dict[str, Any], metadata: dict[str, Any]) -> None:
        conf = config.get("configurable", {})
        self.checkpoint_ids.append(checkpoint["id"])
        if self._answers_checkpoints:
            self.answerer.checkpoint(
                checkpoint.get("channel_values") or {}, metadata.get("step"), conf.get("checkpoint_ns", "")
            )
        # events.Checkpoint's JSON form, built here: every super-step passes through this (on the run's
        # thread with durability="sync"), and the typed event's construction and to_data cost as much
        # as the rest of it (tests/test_stepcost4_tap.py compares the two forms)
        self.writer.event_row(
            "checkpoint",
            {
                "checkpoint_id": checkpoint["id"],
                "parent_id": conf.get("checkpoint_id"),
                "ns": conf.get("checkpoint_ns", ""),
                "step": metadata.get("step"),
                "source": metadata.get("source"),
            },
        )


_VERSIONS: dict[str, str] | None = None
#: the stored bytes of ``_VERSIONS`` and their address: every run's start refers to them (see Session._put_versions)
_VERSIONS_BLOB: tuple[bytes, str] | None = None


def _package_versions() -> dict[str, str]:
    """The versions of the packages a run depends on, read once per process.

    ``importlib.metadata`` scans the installed distributions on every call
    (about 0.7 ms for the five packages: a tenth of a short run's recording
    cost); the modules this process imported do not change version while it
    runs, so the first reading stands.
    """
    global _VERSIONS
    if _VERSIONS is None:
        from graphtape import versions

        _VERSIONS = versions.package_versions()
    return dict(_VERSIONS)


def _read_back(ns: str) -> bool:
    """Whether checkpoints in namespace ``ns`` are read again during the run that writes them.

    A subgraph's namespace is ``node:task_id|...``: a new one for every
    invocation. A ``checkpointer=True`` subgraph keeps one history per thread,
    under its namespace without task ids, and reads it back when invoked again.
    """
    return bool(ns) and any(":" not in part for part in ns.split("|"))


#: LangGraph's own ``configurable`` keys (``langgraph._internal._constants``) a caller sets to choose how
#: a run behaves: kept on the tape with a plain value, so that a replay runs the same way (strict resume
#: refuses an answer it cannot match, durability, v2 message streaming). LangGraph's other ``__`` keys
#: hold its objects (senders, readers, scratchpads) or ids of a nested call: left out.
_LANGGRAPH_BEHAVIOUR_KEYS = frozenset(("__pregel_strict_resume", "__pregel_durability", "__pregel_stream_messages_v2"))
_PLAIN = (bool, int, float, str, type(None))


def _config_for_tape(config: dict[str, Any]) -> dict[str, Any]:
    """The run's config as worth keeping: no callbacks, internals or per-run ids.

    Without the per-run ids the config of every run of a thread is the same
    blob, stored once.
    """
    out = {k: v for k, v in config.items() if k not in ("callbacks", "run_id")}
    out["configurable"] = {
        k: v
        for k, v in (config.get("configurable") or {}).items()
        if not k.startswith("__") or (k in _LANGGRAPH_BEHAVIOUR_KEYS and isinstance(v, _PLAIN))
    }
    return out


def is_control_flow(error: BaseException) -> bool:
    """An interrupt or ``Command`` passing through (the task runs again later), not a failure.

    graphtape's own control errors are ``GraphBubbleUp``s only so that retry layers leave
    them alone: a task stopped by a divergence failed, and is recorded as failed.
    """
    from langgraph.errors import GraphBubbleUp

    from graphtape.errors import ControlError

    if isinstance(error, ControlError):
        return False
    return isinstance(error, (GraphBubbleUp, GeneratorExit, KeyboardInterrupt))


def _is_resume(value: Any) -> bool:
    from langgraph.types import Command

    return isinstance(value, Command) and value.resume is not None


def one_line_error(error: BaseException | None) -> str | None:
    """An error as the run row keeps it: its type and the first line of its message."""
    if error is None:
        return None
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()
