"""A run being recorded (or replayed): the one object every interception talks to.

Interceptions (LLM, tool, effect, node callbacks, the checkpoint tap) find
the current session through a ``ContextVar`` that LangGraph propagates into
its executor threads and asyncio tasks, and fall back to the
``graphtape_run_id`` that graphtape puts in the run's config metadata (it is
inherited by every nested runnable), so a call made from a thread that lost
the context is still attributed to its run. A ``threading.local`` would lose
``ToolNode`` calls, which run on executor threads.

Each call is identified by a :class:`CallSite`: the node path with task ids
removed (``sub/sub_llm``), the branch (``Send`` index), the step, and the
call's ordinal within its task. Task and checkpoint ids are *not* part of it
because LangGraph regenerates them on every execution.

Writes are buffered and flushed in one transaction per checkpoint (from the
checkpoint tap, which runs off the main thread under LangGraph's default
``durability="async"``) and at the end of the run.
"""

from __future__ import annotations

import contextvars
import dataclasses
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphtape import serde, typepolicy
from graphtape.errors import Divergence, EffectBlocked
# Recorded errors are written and rebuilt in errors_codec (``_error_info`` keeps its old name here).
from graphtape.record.errors_codec import error_info as _error_info
from graphtape.record.errors_codec import rebuild_error
from graphtape.store.base import EventRow, RunRecord, WriteBatch
from graphtape.store.listing import call_levels, listed_call

if TYPE_CHECKING:
    from graphtape.replay.matcher import Matcher, RecordedCall
    from graphtape.tape import Tape

_CURRENT: contextvars.ContextVar[Session | None] = contextvars.ContextVar("graphtape_session", default=None)
_BY_RUN: dict[str, Session] = {}
_UUIDISH = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

RUN_META_KEY = "graphtape_run_id"
#: Put by graphtape's ``BaseChatModel.batch``/``abatch`` wrapper into each input's config metadata:
#: the input's index, so a batch's calls are matched by slot, not by the order their threads started.
BATCH_SLOT_KEY = "graphtape_batch_slot"

#: Beside a foreign checkpoint saver, the tape is written at most this often
#: (and at the end of every run): one extra transaction per super-step was
#: the largest recording cost measured. graphtape's own saver writes the tape
#: in the checkpoint's transaction instead.
FLUSH_INTERVAL = 0.05


class Lazy:
    """An event field computed at flush time (off the hot path when LangGraph saves in the background)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn

    def resolve(self) -> Any:
        return self.fn()


def current_session(metadata: dict[str, Any] | None = None) -> Session | None:
    """The session of the run this code executes in, if any."""
    s = _CURRENT.get()
    if s is not None and s.active:
        return s
    rid = (metadata or {}).get(RUN_META_KEY)
    if rid is None:
        try:
            from langchain_core.runnables.config import var_child_runnable_config

            cfg = var_child_runnable_config.get()
        except Exception:  # pragma: no cover - defensive
            cfg = None
        if cfg:
            rid = (cfg.get("metadata") or {}).get(RUN_META_KEY)
    if rid is not None:
        s = _BY_RUN.get(rid)
        if s is not None and s.active:
            return s
    return None


def _runnable_metadata() -> dict[str, Any]:
    from langchain_core.runnables.config import var_child_runnable_config

    cfg = var_child_runnable_config.get()
    return dict((cfg or {}).get("metadata") or {})


def _normalise_path(path: Any) -> Any:
    """LangGraph's task path without ids and objects, e.g. ``["__pregel_push", 2]``."""
    if isinstance(path, (list, tuple)):
        return [p for p in (_normalise_path(x) for x in path) if p is not None]
    if isinstance(path, bool) or path is None:
        return None
    if isinstance(path, int):
        return path
    if isinstance(path, str):
        return None if _UUIDISH.match(path) else path
    return None


@dataclasses.dataclass(frozen=True)
class CallSite:
    """Where a call was made, in terms that survive re-execution."""

    kind: str  # "llm" | "tool" | "effect"
    node: str
    node_path: str
    branch: str
    step: int | None
    task: str  # full checkpoint namespace including task ids: unique per task execution
    ordinal: int

    def describe(self) -> str:
        where = self.node_path or "(outside any node)"
        step = f" step {self.step}" if self.step is not None else ""
        return f"{self.kind} call #{self.ordinal} in node {where}{step}"


def branch_of(metadata: dict[str, Any]) -> str:
    parts = _normalise_path(metadata.get("langgraph_path") or [])
    return ",".join(str(p) for p in parts) if isinstance(parts, list) else ""


def site_from_metadata(kind: str, metadata: dict[str, Any], counter: Callable[[str, str], int],
                       branches: dict[str, Any] | None = None) -> CallSite:
    ns = metadata.get("langgraph_checkpoint_ns") or metadata.get("checkpoint_ns") or ""
    node = metadata.get("langgraph_node") or ""
    pairs = [seg.partition(":") for seg in ns.split("|") if seg] if ns else []
    segments = [name for name, _, _ in pairs]
    node_path = "/".join(segments) if segments else node
    # The branch of every enclosing task, not just the innermost: two Send
    # workers that each invoke a subgraph differ only in the outer index.
    if branches and pairs:
        branch = "/".join(branch_of({"langgraph_path": branches.get(tid)}) for _, _, tid in pairs[:-1])
        branch = f"{branch}/{branch_of(metadata)}" if branch else branch_of(metadata)
    else:
        branch = branch_of(metadata)
    step = metadata.get("langgraph_step")
    task = ns or "(root)"
    counted = task
    slot = metadata.get(BATCH_SLOT_KEY)
    if slot is not None:
        # One input of a model.batch(): its slot is part of the site, and ordinals are
        # counted per slot, because the batch's threads reach this point in any order.
        branch = f"{branch}#{slot}"
        counted = f"{task}#{slot}"
    return CallSite(kind, node, node_path, branch, step, task, counter(counted, kind))


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


@dataclasses.dataclass
class ReplayStats:
    served: int = 0
    live: int = 0
    tokens_saved: int = 0
    cost_saved: float = 0.0
    time_saved: float = 0.0
    live_tokens: int = 0
    live_cost: float = 0.0


class Session:
    """One run: buffers its events, answers calls from the tape when replaying."""

    def __init__(
        self,
        tape: Tape,
        *,
        thread_id: str,
        graph_name: str,
        mode: str = "record",
        matcher: Matcher | None = None,
        replay_of: str | None = None,
        parent_run_id: str | None = None,
        allow_live_effects: bool = False,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ):
        self.tape = tape
        self.store = tape.store
        self.run_id = run_id or str(uuid.uuid4())
        self.thread_id = thread_id
        self.graph_name = graph_name
        self.mode = mode
        self.matcher = matcher
        self.allow_live_effects = allow_live_effects
        self.replay_of = replay_of
        self.parent_run_id = parent_run_id
        self.meta = meta or {}
        self.active = False
        self.stats = ReplayStats()
        self.counts = {"llm": 0, "tool": 0, "effect": 0}
        self.tokens = 0
        self.divergence: Divergence | None = None
        self.checkpoint_ids: list[str] = []
        self._lock = threading.RLock()
        self._batch = WriteBatch()
        self._seq = 0
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
        # Addresses this run already wrote: not sent again. Per run, not per
        # process: garbage collection (``prune``) may delete a blob between two
        # runs, and a later run must then write it again, not point at nothing.
        self._written_blobs: set[str] = set()
        #: id(message) -> (message, ids of its field values, request JSON, blob address): see message_blob
        #: (and, once asked for, its canonical key: see message_key)
        self._messages: dict[int, list[Any]] = {}
        self._last_flush = time.monotonic()
        #: seconds each store write of this run took (summarised into ``meta.write_ms``)
        self._write_seconds: list[float] = []
        #: set when a task wrote an interrupt: the run's status needs a state read
        self.saw_interrupt = False
        #: the thread's lease (one writer per thread); its token fences every write
        self.lease: Any = None
        #: with graphtape's own saver, each completed call is written at once so
        #: that recovery after a crash never sends it again
        self.durable = False
        #: a graphtape.debug.Debugger stepping through this run, if any
        self.debugger: Any = None
        #: the classes this run's values and errors may be rebuilt as (set from the graph by the recorder)
        self.types: typepolicy.TypePolicy = typepolicy.DEFAULT
        #: strict replay: a graphtape.replay.statecheck.StateCheck comparing each task's writes with the tape's
        self.state_check: Any = None
        #: set by recovery: the crashed runs whose effect intents must be honoured
        self.recovering = False
        self.recovery_runs: list[str] = []
        self.reconciled: dict[str, Any] = {}

    # -- lifecycle ------------------------------------------------------------

    def register(self) -> None:
        """Make the run findable by its id (from config metadata) by every interception."""
        self.active = True
        _BY_RUN[self.run_id] = self

    def activate(self) -> None:
        """Register, and make this the current run of the calling context too."""
        self.register()
        self._token = _CURRENT.set(self)

    def deactivate(self) -> None:
        self.active = False
        _BY_RUN.pop(self.run_id, None)
        if self._token is not None:
            try:
                _CURRENT.reset(self._token)
            except ValueError:
                # Reset from another context (an async generator closed elsewhere):
                # the session is inactive anyway, so lookups ignore it.
                pass
            self._token = None

    def start(self, run_input: Any, config: dict[str, Any], call_kwargs: dict[str, Any] | None = None) -> None:
        from graphtape import versions

        run = RunRecord(
            run_id=self.run_id,
            thread_id=self.thread_id,
            graph=self.graph_name,
            status="running",
            started_at=time.time(),
            parent_run_id=self.parent_run_id,
            replay_of=self.replay_of,
            mode=self.mode,
            meta=self.meta,
        )
        self.started_at = run.started_at
        input_ref = self.put_json(self.encode(run_input))
        with self._lock:
            self._batch.new_runs.append(run)
        # Run, thread, mode and replay link are on the run row; the config and
        # versions repeat from run to run, so they are stored by address.
        self.event(
            "run_started",
            {
                "input": input_ref,
                "config": self.put_json(serde.redact(serde.to_jsonable(_config_for_tape(config)), self.tape.redact_keys)),
                "versions": self.put_json(versions.package_versions()),
                # the call's JSON-able arguments (version="v2", stream_mode, ...): replayed as recorded
                **({"kwargs": serde.redact(call_kwargs, self.tape.redact_keys)} if call_kwargs else {}),
            },
        )
        if _is_resume(run_input):
            self.event("resume", {"value": self.put_json(self.encode(run_input.resume))})
        self.flush()

    def finish(self, status: str, *, output: Any = None, error: BaseException | None = None,
               interrupts: list[dict[str, Any]] | None = None) -> None:
        for intr in interrupts or []:
            self.event("interrupt", intr)
        ended = time.time()
        if status == "failed":
            self.event("run_failed", {"error": _error_info(error)})
        else:
            data: dict[str, Any] = {"status": status}
            if output is not None:
                data["output"] = self.put_json(self.view(output))
            self.event("run_finished", data)
        update = {
            "status": status,
            "ended_at": ended,
            "llm_calls": self.counts["llm"],
            "tool_calls": self.counts["tool"],
            "effect_calls": self.counts["effect"],
            "served_calls": self.stats.served,
            "live_calls": self.stats.live,
            "tokens": self.tokens,
            "error": _one_line(error) if error is not None else None,
            "meta": {**self.meta, "checkpoints": len(self.checkpoint_ids), **_write_ms(self._write_seconds)},
        }
        with self._lock:
            self._batch.run_updates.append((self.run_id, update))
        self.flush()

    # -- buffering ----------------------------------------------------------------

    def put_json(self, obj: Any) -> str:
        """Store a JSON value in its own key order (hash what is matched on: ``serde.canonical_json``)."""
        data = serde.stored_json(obj)
        h = serde.digest(data)
        if h not in self._written_blobs:
            with self._lock:
                self._batch.blobs[h] = data
        return h

    def encode(self, obj: Any) -> dict[str, Any]:
        """An exactly restorable envelope; messages stored once, by reference."""
        return serde.encode_value(obj, self.put_json)

    def decode(self, env: dict[str, Any]) -> Any:
        """A recorded value back, rebuilding only the classes ``self.types`` allows."""
        return serde.decode_value(env, self.store.get_json, self.types)

    def message_blob(self, msg: Any) -> tuple[dict[str, Any], str]:
        """A message's request JSON and its blob address, computed once per message object in a run.

        A run meets the same message objects several times: in every chat
        request that carries the history, and again in the final state. At
        turn 200 of a conversation, turning 400 messages into JSON twice was
        half the cost of recording the turn. The memo holds the message (so
        its ``id()`` is not reused) and the identities of its field values: a
        field given a new value is seen and the message is read again.
        """
        fields = tuple(map(id, msg.__dict__.values()))
        hit = self._messages.get(id(msg))
        if hit is not None and hit[0] is msg and hit[1] == fields:
            return hit[2], hit[3]
        js = serde.message_for_request(msg)
        h = self.put_json(js)
        self._messages[id(msg)] = [msg, fields, js, h, None]
        return js, h

    def message_key(self, msg: Any) -> str:
        """The digest of a message's *canonical* JSON: what request fingerprints are built from.

        The blob address (``message_blob``) hashes the stored, order-preserving
        JSON; fingerprints must not depend on key order (and must stay what
        tapes recorded before blobs kept their order), so they use this key.
        """
        self.message_blob(msg)
        entry = self._messages[id(msg)]
        if entry[4] is None:
            entry[4] = serde.digest(serde.canonical_bytes(entry[2]))
        return entry[4]

    def message_ref(self, msg: Any) -> dict[str, Any]:
        ref: dict[str, Any] = {"$m": self.message_blob(msg)[1]}
        if msg.id is not None:
            ref["id"] = msg.id
        return ref

    def view(self, obj: Any) -> Any:
        """A compact JSON view for display and comparison.

        Messages become references to their (id-less) blob and lists of
        messages become chains, which share their prefixes with the chat
        requests already on the tape: the final state of turn 200 of a
        conversation adds one chain node, not 400 messages.
        """
        from langchain_core.messages import BaseMessage

        if isinstance(obj, BaseMessage):
            return self.message_ref(obj)
        if isinstance(obj, (list, tuple)) and obj and all(isinstance(m, BaseMessage) for m in obj):
            hashes = [self.message_blob(m)[1] for m in obj]
            return {"$chain": self.put_messages(hashes)}
        if isinstance(obj, dict):
            return {str(k): self.view(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.view(v) for v in obj]
        if hasattr(obj, "model_dump") and not isinstance(obj, type) and hasattr(type(obj), "model_fields"):
            return {k: self.view(getattr(obj, k)) for k in type(obj).model_fields}
        return serde.to_jsonable(obj)

    def put_messages(self, hashes: list[str]) -> str | None:
        """Store a message list as a chain; returns its head (content addressed)."""
        parent: str | None = None
        new: dict[str, tuple[str | None, str]] = {}
        for mh in hashes:
            cid = serde.digest(f"{parent or ''}/{mh}")
            if cid not in self._written_blobs:
                new[cid] = (parent, mh)
            parent = cid
        if new:
            with self._lock:
                self._batch.chains.update(new)
        return parent

    def event(self, kind: str, data: dict[str, Any]) -> int:
        with self._lock:
            seq = self._seq
            self._seq += 1
            self._batch.events.append(EventRow(self.run_id, seq, kind, time.time(), data))
            return seq

    def defer(self, batch: WriteBatch) -> None:
        """Add ``batch`` to what the next flush writes (in the same transaction)."""
        with self._lock:
            self._batch.extend(batch)

    def maybe_flush(self) -> None:
        """Flush if the last flush is older than ``FLUSH_INTERVAL`` (used beside foreign savers)."""
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self.flush()

    def flush(self, extra: WriteBatch | None = None) -> None:
        """Write the buffered events, together with ``extra`` (a checkpoint) if given, in one transaction."""
        with self._lock:
            self._last_flush = time.monotonic()
            for ev in self._batch.events:
                for key, value in ev.data.items():
                    if isinstance(value, Lazy):
                        ev.data[key] = value.resolve()
            batch, self._batch = self._batch, WriteBatch()
            if extra is not None:
                batch.extend(extra)
            if batch:
                try:
                    t0 = time.perf_counter()
                    self.store.write(batch, fence=self.lease.fence if self.lease is not None else None)
                    self._write_seconds.append(time.perf_counter() - t0)
                except BaseException:
                    # Keep the events for the next flush; the checkpoint's writer sees the error.
                    if extra is not None:
                        batch.checkpoints.clear()
                        batch.writes.clear()
                    batch.extend(self._batch)
                    self._batch = batch
                    raise
                self._written_blobs.update(batch.blobs)
                self._written_blobs.update(batch.chains)

    # -- calls ------------------------------------------------------------------------

    def _next_ordinal(self, task: str, kind: str) -> int:
        with self._lock:
            n = self._ordinals.get((task, kind), 0)
            self._ordinals[(task, kind)] = n + 1
            return n

    def site(self, kind: str, metadata: dict[str, Any] | None) -> CallSite:
        md = metadata if metadata and "langgraph_checkpoint_ns" in metadata else _runnable_metadata()
        return site_from_metadata(kind, md, self._next_ordinal, self.task_branches)

    def begin(self, kind: str, metadata: dict[str, Any] | None, request: dict[str, Any],
              fingerprint: str, messages_ref: str | None = None, summary: dict[str, Any] | None = None,
              messages_view: list[Any] | None = None) -> Call:
        """Register a call; if the tape can answer it, ``call.served`` is set.

        Raises :class:`Divergence` (strict) or :class:`EffectBlocked` when
        the call may neither be served nor run live.
        """
        if self.divergence is not None:
            # This replay has diverged. A retry layer (or code that caught the Divergence) is
            # calling again: the first report stands, and nothing is matched, served or sent.
            raise self.divergence
        site = self.site(kind, metadata)
        call = Call(
            call_id=str(uuid.uuid4()),
            site=site,
            fingerprint=fingerprint,
            request_ref=self.put_json(request),
            messages_ref=messages_ref,
            summary=summary or {},
            started=time.perf_counter(),
            messages_view=messages_view,
        )
        if self.matcher is None:
            return call
        rec = self.matcher.take(site, fingerprint)
        if rec is None and kind == "effect" and self.recovering and summary and summary.get("idempotency_key"):
            rec = self._in_doubt(call, summary)
        if self.debugger is not None:
            decision, output = self.debugger.on_call(self, call, rec, request)
            if decision == "use":
                from graphtape.debug.inject import override_envelope
                from graphtape.replay.matcher import RecordedCall

                call.served = rec or RecordedCall(
                    call_id="(injected)", run_id=self.run_id, seq=-1, kind=kind, node=site.node,
                    node_path=site.node_path, branch=site.branch, step=site.step, ordinal=site.ordinal,
                    fingerprint=fingerprint, request_ref=call.request_ref, messages_ref=messages_ref,
                    response_ref=None, error=None, tokens=0, cost=0.0, latency=0.0, name=None)
                call.override = override_envelope(call.served, output)
                return call
            if decision == "live":
                return call
        if rec is not None:
            override = self.matcher.override_for(rec.call_id)
            if rec.code is not None and call.summary.get("code") not in (None, rec.code):
                # the tool's or effect's code changed since the recording: listed in the replay's
                # result; in flight mode a tool runs live (an effect only with allow_live_effects)
                call.summary["code_changed"] = True
                if override is None and self.mode in ("flight", "live") and (kind == "tool" or self.allow_live_effects):
                    return call
            call.served = rec
            call.override = override
            return call
        if self.mode == "strict":
            self._diverge(call, request)
        if kind == "effect" and not self.allow_live_effects:
            expected = self.matcher.expected(site)
            why = "its request changed" if expected is not None else "the tape has no such call"
            raise EffectBlocked(
                f"effect {summary.get('name') if summary else '?'} in node {site.node_path or '?'} would run live "
                f"({why}); pass allow_live_effects=True (CLI: --allow-live-effects) to let it run"
            )
        return call

    def intent(self, call: Call) -> None:
        """Write, durably and before it runs, that an effect with an idempotency key is starting."""
        self.event("effect_started", {"call_id": call.call_id, "name": call.summary.get("name"),
                                      "idempotency_key": call.summary.get("idempotency_key"),
                                      "fingerprint": call.fingerprint})
        self.flush()

    def _in_doubt(self, call: Call, summary: dict[str, Any]) -> Any:
        """An effect that started before a crash and never reported back: never run it twice."""
        from graphtape.record.effect import NOT_DONE, reconcilers

        key = summary["idempotency_key"]
        name = summary.get("name")
        started = any(
            ev.data.get("idempotency_key") == key and ev.data.get("name") == name
            for rid in self.recovery_runs
            for ev in self.store.events(rid, ["effect_started"])
        )
        if not started:
            return None
        reconcile = reconcilers.get(name)
        if reconcile is None:
            from graphtape.errors import EffectInDoubt

            raise EffectInDoubt(
                f"effect {name} with idempotency key {key!r} started before a crash and never finished; "
                "graphtape will not run it twice: check the outside world, then give the effect a "
                "reconcile= function (or re-run the thread by hand)"
            )
        result = reconcile(key)
        if result is NOT_DONE:
            return None
        self.reconciled[call.call_id] = result
        return None

    def _diverge(self, call: Call, request: dict[str, Any]) -> None:
        from graphtape.replay.divergence import build_divergence

        div = build_divergence(self, call, request)
        self.divergence = div
        self.event("divergence", div.report)
        raise div

    def served_value(self, call: Call) -> tuple[Any, BaseException | None]:
        """The recorded (or overriding) result of a served call, and records it."""
        rec = call.served
        assert rec is not None
        if call.override is not None:
            value_env, error = call.override, None
        else:
            value_env, error = rec.response_env(self.store), rec.error
        self._record_call(call, response_env=value_env, error=error, latency=0.0,
                          usage=None, tokens=rec.tokens if call.override is None else 0,
                          source="override" if call.override is not None else "tape")
        with self._lock:
            self.stats.served += 1
            self.stats.tokens_saved += rec.tokens
            self.stats.cost_saved += rec.cost
            self.stats.time_saved += rec.latency
        if error is not None:
            return None, rebuild_error(error, self.types)
        return self.decode(value_env), None

    def end_live(self, call: Call, *, result: Any = None, error: BaseException | None = None,
                 usage: dict[str, Any] | None = None, model_name: str | None = None,
                 source: str = "live") -> None:
        if error is not None and _is_control_flow(error):
            # interrupt() / Command bubbling through the call: the call did not
            # complete; it runs again when the node resumes.
            return
        latency = time.perf_counter() - call.started
        env = self.encode(result) if error is None else None
        tokens = serde.usage_tokens(usage)
        cost = self.tape.pricing.cost(model_name, tokens[0], tokens[1]) if usage else 0.0
        self._record_call(call, response_env=env, error=_error_info(error) if error else None,
                          latency=latency, usage=usage, source=source, cost=cost)
        if self.durable or call.summary.get("idempotency_key") is not None:
            self.flush()
        if self.matcher is not None:
            with self._lock:
                self.stats.live += 1
                self.stats.live_tokens += tokens[2]
                self.stats.live_cost += cost

    def _record_call(self, call: Call, *, response_env: Any, error: dict[str, Any] | None, latency: float,
                     usage: dict[str, Any] | None, source: str, cost: float | None = None,
                     tokens: int | None = None) -> None:
        site = call.site
        counted = serde.usage_tokens(usage)
        if tokens is not None:
            counted = (0, 0, tokens)
        tokens_total = counted[2]
        if cost is None:
            cost = call.served.cost if call.served is not None and source == "tape" else 0.0
        data = {
            "call_id": call.call_id,
            "node_path": site.node_path,
            "branch": site.branch,
            "step": site.step,
            "task": site.task,
            "ordinal": site.ordinal,
            "fingerprint": call.fingerprint,
            "request": call.request_ref,
            "messages": call.messages_ref,
            "response": self.put_json(response_env) if response_env is not None else None,
            "error": error,
            "tokens": tokens_total or None,
            "cost": round(cost, 10) or None,
            "latency": round(latency, 6),
            "source": source,
            "served_from": call.served.call_id if call.served is not None else None,
            "recorded_latency": round(call.served.latency, 6) if call.served is not None else None,
            **call.summary,
        }
        data = {k: v for k, v in data.items() if v is not None}
        with self._lock:
            self.counts[site.kind] += 1
            self.tokens += tokens_total
        self.event(f"{site.kind}_call", data)
        self.note_call(site.kind, data)

    def note_call(self, kind: str, data: dict[str, Any]) -> None:
        """Count a call in the step of every level it was made at: the step of its own task, and of
        each enclosing task (a subgraph's call belongs to the root step that ran the subgraph too),
        so that the checkpoint of each step can list its calls without reading call events."""
        summary = listed_call(kind, data)
        keys = call_levels(data.get("task") or "", data.get("step"), self.task_steps.get)
        with self._lock:
            for key in keys:
                self.step_calls.setdefault(key, []).append(summary)

    # -- checkpoints and tasks ---------------------------------------------------------

    def on_checkpoint(self, config: dict[str, Any], checkpoint: dict[str, Any], metadata: dict[str, Any]) -> None:
        conf = config.get("configurable", {})
        self.checkpoint_ids.append(checkpoint["id"])
        if self.debugger is not None:
            self.debugger.on_checkpoint(checkpoint.get("channel_values") or {}, metadata.get("step"),
                                        conf.get("checkpoint_ns", ""))
        self.event(
            "checkpoint",
            {
                "checkpoint_id": checkpoint["id"],
                "parent_id": conf.get("checkpoint_id"),
                "ns": conf.get("checkpoint_ns", ""),
                "step": metadata.get("step"),
                "source": metadata.get("source"),
            },
        )


def _write_ms(seconds: list[float]) -> dict[str, Any]:
    """``{"write_ms": {n, sum, p50, p95, max}}`` of a run's store writes (nearest-rank), or nothing."""
    if not seconds:
        return {}
    ms = sorted(x * 1000.0 for x in seconds)
    n = len(ms)
    return {"write_ms": {"n": n, "sum": round(sum(ms), 3), "p50": round(ms[(n + 1) // 2 - 1], 3),
                         "p95": round(ms[max(0, -(-95 * n // 100) - 1)], 3), "max": round(ms[-1], 3)}}


def _config_for_tape(config: dict[str, Any]) -> dict[str, Any]:
    """The run's config as worth keeping: no callbacks, internals or per-run ids.

    Without the per-run ids the config of every run of a thread is the same
    blob, stored once.
    """
    out = {k: v for k, v in config.items() if k not in ("callbacks", "run_id")}
    out["configurable"] = {k: v for k, v in (config.get("configurable") or {}).items() if not k.startswith("__")}
    if "metadata" in config:
        out["metadata"] = {k: v for k, v in config["metadata"].items() if k != RUN_META_KEY}
    return out


def _is_control_flow(error: BaseException) -> bool:
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


def _one_line(error: BaseException | None) -> str | None:
    if error is None:
        return None
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()

