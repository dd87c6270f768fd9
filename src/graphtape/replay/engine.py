"""Re-running the current code of a graph against a recorded run.

A run is one ``invoke``; a conversation with a human in the loop is several
runs on one thread (the first ends at an ``interrupt()``, the next resumes
it). Replaying run *R* therefore replays the chain of runs of R's thread up
to R, in order, in a **new thread**, feeding each its recorded input,
including the recorded ``Command(resume=...)`` answers, so a strict replay
never asks a human again. Each replayed run is a new run linked to the one
it replays (``replay_of``); the original is never touched.

Modes:

* ``strict``: every call must be served from the tape; anything else is a
  :class:`~graphtape.errors.Divergence`.
* ``flight``: unchanged calls are served, changed or new ones go live and
  are recorded on the new run (effects only with ``allow_live_effects``).

A strict replay also compares each task's writes with the tape as it goes
(:mod:`graphtape.replay.statecheck`): nondeterminism the tape cannot serve
(a node reading the clock directly) is a divergence too, not a silent
``output_matches=False``.

Each run is re-executed the way it was called: the same API and the same
recorded keyword arguments (``version="v2"``, ``stream_mode``, ...). The
replay itself is written once, as a generator (:func:`_core`) that yields
each run to execute; :func:`replay` executes them synchronously (async runs
in one event loop for the whole replay) and :func:`areplay` awaits them in
the caller's loop.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from graphtape import clock, events, serde
from graphtape.errors import Divergence, ReplayError, StoreError
from graphtape.record.answer import ReplayPlan
from graphtape.record.context import LEGACY_RUN_META_KEY
from graphtape.record.session import one_line_error
from graphtape.recorder import NO_CHECKPOINTER_META, own_checkpointer
from graphtape.replay.answerer import TapeAnswerer
from graphtape.replay.lineage import recovered_line
from graphtape.replay.matcher import Matcher, RecordedCall, index_calls
from graphtape.replay.startpoint import StartPoints
from graphtape.replay.statecheck import TASK_KINDS, StateCheck
from graphtape.replay.steps import ASYNC_APIS, ReplayLoop, Step, adrive, drive, loop_running
from graphtape.store.base import EventRow, RunRecord

if TYPE_CHECKING:
    from graphtape.tape import Tape

MODES = ("strict", "flight", "live")
#: the configurable keys naming where a run started: the replay's own (graphtape.replay.startpoint)
_START_KEYS = ("checkpoint_id", "checkpoint_ns", "checkpoint_map")
#: the keys of a recorded run's config (besides ``configurable``) its replay is invoked with
_REPLAYED_CONFIG = ("recursion_limit", "tags", "metadata", "max_concurrency")
#: recorded call arguments the replay leaves out: they only print
_NOT_REPLAYED = ("debug", "print_mode")


@dataclasses.dataclass
class ReplayResult:
    """What a replay did. ``run_id`` is the new run that replays the target run."""

    run_id: str
    run_ids: list[str]
    thread_id: str
    replay_of: str
    mode: str
    status: str
    output: Any
    served: int
    live: int
    tokens_saved: int
    cost_saved: float
    time_saved: float
    live_tokens: int
    live_cost: float
    unused: int
    output_matches: bool | None
    divergence: dict[str, Any] | None = None
    error: str | None = None
    #: tools and effects whose code changed since the recording (strict: still served; flight: tools ran live)
    changed_code: list[str] = dataclasses.field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return self.divergence is not None

    def raise_for_divergence(self) -> None:
        if self.divergence is not None:
            raise Divergence(self.error or "replay diverged", self.divergence)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["output"] = serde.to_jsonable(self.output)
        return d


def run_chain(tape: Tape, run: RunRecord) -> list[RunRecord]:
    """The runs of ``run``'s thread from the first up to ``run``, oldest first."""
    chain = [run]
    seen = {run.run_id}
    cur = run
    while cur.parent_run_id:
        parent = tape.store.get_run(cur.parent_run_id)
        if parent is None or parent.run_id in seen:
            break
        chain.append(parent)
        seen.add(parent.run_id)
        cur = parent
    chain.reverse()
    return chain


def strip_ids(value: Any) -> Any:
    """A JSON view without message ids (they differ between executions)."""
    if isinstance(value, dict):
        return {k: strip_ids(v) for k, v in value.items() if k != "id" or not isinstance(v, str)}
    if isinstance(value, list):
        return [strip_ids(v) for v in value]
    return value


#: What a replay reads of each recorded run, in one query per run: its calls (the matcher), its
#: tasks (the state check), its input and output, and its interrupts.
_RECORDED_KINDS = (
    *events.CALL_EVENT_KINDS,
    *TASK_KINDS,
    events.RunStarted.KIND,
    events.RunFinished.KIND,
    events.Interrupt.KIND,
    events.StateUpdate.KIND,
)
#: What a replay reads of each run it made, in one query per run: its interrupts, output and calls (totals).
_REPLAYED_KINDS = (events.Interrupt.KIND, events.RunFinished.KIND, *events.CALL_EVENT_KINDS)
#: The same without the calls, when the answerer summed them as it served them (see :func:`_core`).
_REPLAYED_END_KINDS = (events.Interrupt.KIND, events.RunFinished.KIND)


@dataclasses.dataclass(frozen=True)
class _RecordedRun:
    """What a replay reads of one recorded run, indexed: its events of :data:`_RECORDED_KINDS`, its
    calls with their responses and messages (bytes, parsed only when served), the addresses its events
    refer to (``events.refs``) and its input and config blobs. Nothing here is changed by a replay."""

    rows: list[EventRow]
    calls: list[RecordedCall]
    blobs: frozenset[str]
    chains: frozenset[str]
    inputs: dict[str, bytes]

    @property
    def size(self) -> int:
        """About how many bytes keeping it holds: the stored values read, and ~300 per event."""
        held = sum(len(c.response_data or b"") + sum(map(len, c.message_data.values())) for c in self.calls)
        return held + sum(map(len, self.inputs.values())) + 300 * len(self.rows)


#: The recorded runs indexed so far, per store (weakly: a closed tape's go with it) and run id, the
#: most recently replayed last; at most :data:`_KEPT_MAX` runs and about :data:`_KEPT_BYTES` per store.
#: Only runs that ended are kept: a run's events are written before or with its end and never change
#: after it (a recovery or a replay is a new run). Reading and indexing a run was ~8% of a strict
#: replay of benchmark 2's 10-node run (its events unpacked, 20 calls built, two blob reads): a replay
#: of a run replayed before reads none of it. A kept run is used only while the store still has it
#: (the replay reads every run of its chain first), so what its events refer to is still there too
#: (garbage collection keeps it with them).
#: An entry is used only while the run's row still reads as when it was kept (:func:`_stamp`): a run
#: deleted and imported again under its id from another tape is read again.
_KEPT: weakref.WeakKeyDictionary[Any, OrderedDict[str, tuple[_RecordedRun, int, tuple[Any, ...]]]] = (
    weakref.WeakKeyDictionary()
)
_KEPT_MAX = 64
_KEPT_BYTES = 32 << 20
_KEPT_LOCK = threading.Lock()
#: the statuses of a run that ended (``running`` may still be written; ``crashed`` is left out too)
_ENDED = frozenset(("finished", "interrupted", "failed"))


def _stamp(run: RunRecord) -> tuple[Any, ...]:
    """What a kept run's row must still read for the run to be served from :data:`_KEPT`."""
    return (run.status, run.started_at, run.ended_at, run.llm_calls, run.tool_calls, run.effect_calls, run.tokens)


def _recorded_runs(tape: Tape, chain: list[RunRecord]) -> dict[str, _RecordedRun]:
    """Each run of ``chain`` indexed (:class:`_RecordedRun`): kept from an earlier replay, or read now
    in one events query per run and two blob reads for them all (the responses, inputs and configs;
    the messages the chat responses refer to)."""
    store = tape.store
    out: dict[str, _RecordedRun] = {}
    with _KEPT_LOCK:
        kept = _KEPT.get(store)
        if kept is not None:
            for run in chain:
                hit = kept.get(run.run_id)
                if hit is not None and hit[2] == _stamp(run):
                    kept.move_to_end(run.run_id)
                    out[run.run_id] = hit[0]
    missing = [run for run in chain if run.run_id not in out]
    if not missing:
        return out
    rows = {run.run_id: store.events(run.run_id, list(_RECORDED_KINDS)) for run in missing}
    calls, inputs = index_calls(
        store,
        [row for run in missing for row in rows[run.run_id]],
        read_with=[h for run in missing for h in _input_refs(rows[run.run_id])],
    )
    calls_of: dict[str, list[RecordedCall]] = {run.run_id: [] for run in missing}
    for call in calls:
        calls_of[call.run_id].append(call)
    fresh = []
    for run in missing:
        blobs: set[str] = set()
        chains: set[str] = set()
        for row in rows[run.run_id]:
            events.refs(row.kind, row.data, blobs, chains)
        own = {h: inputs[h] for h in _input_refs(rows[run.run_id]) if h in inputs}
        out[run.run_id] = _RecordedRun(rows[run.run_id], calls_of[run.run_id], frozenset(blobs), frozenset(chains), own)
        if run.status in _ENDED:
            fresh.append(run.run_id)
    if fresh:
        stamps = {run.run_id: _stamp(run) for run in missing}
        sizes = [(run_id, out[run_id].size) for run_id in fresh]
        with _KEPT_LOCK:
            kept = _KEPT.setdefault(store, OrderedDict())
            for run_id, size in sizes:
                if size <= _KEPT_BYTES:
                    kept.pop(run_id, None)  # (a stale entry: re-inserted last)
                    kept[run_id] = (out[run_id], size, stamps[run_id])
            total = sum(entry[1] for entry in kept.values())
            while kept and (len(kept) > _KEPT_MAX or total > _KEPT_BYTES):
                total -= kept.popitem(last=False)[1][1]
    return out


def _of(rows: list[EventRow], *kinds: str) -> list[EventRow]:
    return [r for r in rows if r.kind in kinds]


def _input_refs(rows: list[EventRow]) -> list[str]:
    """The addresses of the input and the config a run's ``run_started`` event refers to (none: not there)."""
    for row in _of(rows, events.RunStarted.KIND):
        return [v for v in (row.data.get("input"), row.data.get("config")) if isinstance(v, str)]
    return []


def _recorded_input(
    tape: Tape,
    run: RunRecord,
    types: Any = None,
    rows: list[EventRow] | None = None,
    read: dict[str, bytes] | None = None,
    opaque: bool = False,
) -> tuple[Any, dict[str, Any], events.RunStarted]:
    """The run's input (decoded), its config and its ``run_started`` event (``rows``: its events, if read;
    ``read``: blobs already read, among which the input and config may be; ``opaque``: a value stored
    only as its repr, which a graph without a checkpointer may be given, is an :class:`serde.Opaque`)."""
    if rows is None:
        rows = tape.store.events(run.run_id, [events.RunStarted.KIND])
    rows = _of(rows, events.RunStarted.KIND)
    if not rows:
        raise ReplayError(f"run {run.run_id} has no run_started event: the tape is incomplete")
    started = events.RunStarted.from_row(rows[0])
    if started.input is None:
        raise ReplayError(f"run {run.run_id} has no recorded input: the tape is incomplete")
    # the input and the config (stored by address, the same blob for every run of a thread): one read
    config: Any = started.config or {}
    wanted = [started.input, config] if isinstance(config, str) else [started.input]
    read = read or {}
    found = {h: read[h] for h in wanted if h in read}
    if len(found) < len(wanted):
        found.update(tape.store.get_blobs([h for h in wanted if h not in found]))
    missing = [h for h in wanted if h not in found]
    if missing:
        raise StoreError(f"blob {missing[0]} is missing from {tape.store.url}: the tape is incomplete")
    if isinstance(config, str):
        config = json.loads(found[config])
    # ``types``: the classes the replayed graph declares (graphtape.typepolicy); nothing else is rebuilt
    value = serde.decode_value(json.loads(found[started.input]), tape.store.get_json, types, opaque=opaque)
    return value, config, started


#: the output of a run that ended with none (LangGraph returned None, or the state had no values yet)
NO_OUTPUT = "(no output)"


def _output_ref(tape: Tape, run: RunRecord | None, rows: list[EventRow] | None = None) -> str | None:
    """The address of the run's output view (``rows``: its events, if read; else ``run``'s are read);
    :data:`NO_OUTPUT` for a run that ended without one, None when its end is not on the tape."""
    if rows is None:
        if run is None:
            return None
        rows = tape.store.events(run.run_id, [events.RunFinished.KIND])
    rows = _of(rows, events.RunFinished.KIND)
    if not rows:
        return None
    return events.RunFinished.from_row(rows[0]).output or NO_OUTPUT


def _outputs_match(tape: Tape, recorded_ref: str | None, replayed_ref: str | None) -> bool | None:
    """Whether two output views (by address) show the same output; None when one is missing.

    A run that ended with no output (a Pregel graph whose output channel was never written returns
    None; an interrupted functional-API run has no state values yet) is compared too: no output on
    both sides is the same final state, as LangGraph would report it.
    """
    if recorded_ref is None or replayed_ref is None:
        return None
    if NO_OUTPUT in (recorded_ref, replayed_ref):
        return recorded_ref == replayed_ref
    if recorded_ref == replayed_ref:  # the same stored view (a replay of unchanged code, usually)
        return True
    recorded, replayed = tape.store.get_json(recorded_ref), tape.store.get_json(replayed_ref)
    # Views refer to messages by blob address, which depends on the stored key order (and
    # differs between tapes recorded before and after blobs kept it): compare the messages.
    return _unordered_interrupts(strip_ids(recorded)) == _unordered_interrupts(strip_ids(replayed)) or (
        _unordered_interrupts(strip_ids(tape.expand(recorded)))
        == _unordered_interrupts(strip_ids(tape.expand(replayed)))
    )


def _interrupt_ids(rows: list[EventRow]) -> list[str]:
    """The ids of the interrupts among a run's events."""
    return [events.Interrupt.from_row(e).interrupt_id or "" for e in _of(rows, events.Interrupt.KIND)]


#: how many earlier answers of one task an interrupt's id is looked for with (see :func:`_raised_by`)
_MAX_ANSWERED = 32


def _interrupt_id_function() -> Any:
    """LangGraph's ``(task namespace, answers so far) -> interrupt id``."""
    try:
        from langgraph.types import _interrupt_id

        return _interrupt_id
    except ImportError:  # a LangGraph without answer counts: the id is the namespace's hash
        from xxhash import xxh3_128_hexdigest

        return lambda ns, answered: xxh3_128_hexdigest(ns.encode())


def _raised_by(ids: list[str], rows: list[EventRow]) -> dict[str, tuple[str, Any, int]]:
    """The task that raised each interrupt of ``ids``: interrupt id -> (node path, step, answers before it).

    LangGraph's id of an interrupt is a hash of the checkpoint namespace of the task that raised it
    and of how many answers that task already had (``langgraph.types._interrupt_id``). The namespace
    holds the task's id, which differs in a replay (it is made from the checkpoint's id), so the ids
    differ too; the node path and the step do not. ``rows``: the run's ``task_started`` events (an id
    none of them hashes to is left out).
    """
    interrupt_id = _interrupt_id_function()
    tasks = {}
    for row in _of(rows, events.TaskStarted.KIND):
        ns = row.data.get("task")
        if isinstance(ns, str) and ns:
            tasks[ns] = (row.data.get("node_path") or "", row.data.get("step"))
    wanted = set(ids)
    found: dict[str, tuple[str, Any, int]] = {}
    for answered in range(_MAX_ANSWERED):
        for ns, (node_path, step) in tasks.items():
            iid = interrupt_id(ns, answered)
            if iid in wanted and iid not in found:
                found[iid] = (node_path, step, answered)
        if len(found) == len(wanted):
            break
    return found


def _match_interrupts(recorded: list[EventRow], replayed: list[EventRow], read_replayed: Any) -> dict[str, str]:
    """Recorded interrupt id -> the id of the same interrupt in the replay.

    Interrupts are matched by the task that raised them (:func:`_raised_by`), not by their order:
    tasks of one step finish in any order, and a subgraph's interrupts reach its parent in the order
    they finished. Two interrupts of one node at one step (a ``Send`` fan-out) are told apart by
    their values; what is left is paired in order. ``read_replayed()``: the replayed run's
    ``task_started`` events, read only when there are several interrupts to match.
    """
    rec_rows = _of(recorded, events.Interrupt.KIND)
    new_rows = _of(replayed, events.Interrupt.KIND)
    rec_ids = [events.Interrupt.from_row(e).interrupt_id or "" for e in rec_rows]
    new_ids = [events.Interrupt.from_row(e).interrupt_id or "" for e in new_rows]
    if len(rec_ids) < 2 or len(new_ids) < 2:
        return dict(zip(rec_ids, new_ids))
    rec_values = {i: e.data.get("value") for i, e in zip(rec_ids, rec_rows)}
    new_values = {i: e.data.get("value") for i, e in zip(new_ids, new_rows)}
    rec_tasks = _raised_by(rec_ids, recorded)
    new_tasks = _raised_by(new_ids, read_replayed())
    out: dict[str, str] = {}
    free = list(new_ids)
    for rid in rec_ids:
        if rid in free:  # the same id: the same task (a replay onto the recorded checkpoints)
            out[rid] = rid
            free.remove(rid)
    for rid in rec_ids:
        key = rec_tasks.get(rid)
        if rid in out or key is None:
            continue
        same_task = [n for n in free if new_tasks.get(n) == key]
        pick = next((n for n in same_task if new_values[n] == rec_values[rid]), same_task[0] if same_task else None)
        if pick is not None:
            out[rid] = pick
            free.remove(pick)
    # (a tape whose tasks left no namespace to find: in order)
    out.update(zip([rid for rid in rec_ids if rid not in out], free))
    return out


def _ended_otherwise(original: RunRecord, status: str) -> bool:
    """Whether a replayed run of a chain ended otherwise than the recorded one (interrupted where it
    finished, or the reverse): the next run would then continue from another state, and may still
    end as recorded (a resume with nothing to resume), so the difference is reported where it is.
    A run stopped from outside (cancelled, Ctrl-C) is not held to where it was stopped."""
    if original.status not in ("finished", "interrupted") or (original.meta or {}).get("stopped_by"):
        return False
    return status != original.status


def _status_divergence(original: RunRecord, replay_run_id: str, status: str) -> dict[str, Any]:
    reason = f"the run ended {status}; the recorded run ended {original.status}"
    hint = (
        "a node interrupted (or did not) as it did not when recorded: check what decides whether it "
        "calls interrupt(); a counter or the outside world read directly differs in a replay"
    )
    message = f"replay of run {original.run_id} diverged at its end: {reason}; {hint}"
    return events.Divergence(
        message=message,
        run_id=original.run_id,
        replay_run_id=replay_run_id,
        kind="state",
        name="?",
        reason=reason,
        diff=f"--- recorded\n+++ replay\n-status: {original.status}\n+status: {status}",
        hint=hint,
    ).to_data()


def _same_failure(recorded: str | None, replayed: str | None, id_map: dict[str, str]) -> bool:
    """Whether a replayed run's error line (``RunRecord.error``) is the recorded one: equal, with the
    interrupt ids they name taken as equal (an interrupt's id differs in a replay, and LangGraph's
    strict resume names the first one it refused in the order of those ids)."""
    if recorded is None or replayed is None:
        return False
    for iid in {*id_map, *id_map.values()}:
        if iid:
            recorded, replayed = recorded.replace(iid, "<interrupt>"), replayed.replace(iid, "<interrupt>")
    return recorded == replayed


def _unordered_interrupts(view: Any) -> Any:
    """An output view with its lists of interrupts in one order: LangGraph lists a step's interrupts in
    the order their tasks finished, which is not part of what a run did."""
    if isinstance(view, dict):
        out = {k: _unordered_interrupts(v) for k, v in view.items()}
        for key in ("__interrupt__", "interrupts"):
            items = out.get(key)
            if isinstance(items, list) and all(isinstance(i, dict) and "value" in i for i in items):
                out[key] = sorted(items, key=lambda i: json.dumps(i, sort_keys=True, default=str))
        return out
    if isinstance(view, list):
        return [_unordered_interrupts(v) for v in view]
    return view


def _resumed_tasks(
    value: Any, chain: list[RunRecord], index: int, recorded_rows: dict[str, list[EventRow]]
) -> frozenset[tuple[str, Any]]:
    """(node path, step) of the tasks whose interrupts the run at ``index`` of ``chain`` answers
    (its input ``value`` a ``Command(resume=...)``): those that raised the previous run's."""
    from langgraph.types import Command

    if index == 0 or not isinstance(value, Command) or value.resume is None:
        return frozenset()
    rows = recorded_rows[chain[index - 1].run_id]
    return frozenset(task[:2] for task in _raised_by(_interrupt_ids(rows), rows).values())


def _translate_resume(value: Any, id_map: dict[str, str]) -> Any:
    """Map a resume-by-interrupt-id dict from recorded ids to the replay's ids."""
    from langgraph.types import Command

    if (
        isinstance(value, Command)
        and isinstance(value.resume, dict)
        and id_map
        and all(k in id_map for k in value.resume)
    ):
        return Command(
            resume={id_map[k]: v for k, v in value.resume.items()},
            update=value.update,
            goto=value.goto,
            graph=value.graph,
        )
    return value


def _plan(tape: Tape, run_id: str, from_checkpoint: str | None) -> tuple[RunRecord, list[RunRecord], int]:
    """The target run, its chain and the index of the first run to re-execute.

    A run that crashed and was recovered is replayed through its last recovery, whose chain holds
    it: the id a user or API client was given replays the whole run (:mod:`graphtape.replay.lineage`).
    """
    target = recovered_line(tape.store, tape.run(run_id))[-1]
    chain = run_chain(tape, target)
    start_index = _checkpoint_segment(tape, chain, from_checkpoint) if from_checkpoint is not None else 0
    return target, chain, start_index


def _uses_async(runs: list[RunRecord]) -> bool:
    return any((r.meta or {}).get("api", "invoke") in ASYNC_APIS for r in runs)


def _core(
    tape: Tape,
    target: RunRecord,
    chain: list[RunRecord],
    start_index: int,
    graph: Any,
    *,
    mode: str,
    allow_live_effects: bool,
    overrides: dict[str, Any] | None,
    live_from: set[str] | None,
    thread_id: str | None,
    from_checkpoint: str | None,
    edit: dict[str, Any] | None,
    as_node: str | None,
    meta: dict[str, Any] | None,
    progress: Any,
    debugger: Any,
    new_run_id: str | None = None,
) -> Generator[Step, Any, ReplayResult]:
    """The replay itself, as a generator: it yields each run to execute and is sent its output.

    The sync and async entry points (:func:`replay`, :func:`areplay`) only
    differ in how they execute a :class:`Step`; everything else (which runs,
    with what input, how results are judged) lives here once.
    """
    # the tape is indexed once: each recorded run's events are read in one query (or kept from an
    # earlier replay of the same run, :func:`_recorded_runs`)
    recorded = _recorded_runs(tape, chain)
    recorded_rows = {r.run_id: recorded[r.run_id].rows for r in chain}
    # (the calls of the runs re-played: a run before ``from_checkpoint``'s is not, and its calls are
    # never the answer to a later run's)
    matcher = Matcher(
        [call for r in chain[start_index:] for call in recorded[r.run_id].calls],
        overrides=overrides,
        live_from=live_from,
        kinds=("effect",) if mode == "live" else None,
    )
    # A strict replay of unchanged code reproduces every task's writes; a fork
    # with an edit, an override or a debugger's injection changes them on purpose.
    state_check = None
    if mode == "strict" and edit is None and not overrides and not live_from and debugger is None:
        state_check = StateCheck.from_events(tape, {r.run_id: recorded_rows[r.run_id] for r in chain[start_index:]})
    new_thread = thread_id or f"replay-{new_run_id or clock.new_id()}"
    # runs of a graph recorded without a checkpointer: their state may hold values stored only as a placeholder
    opaque = any((r.meta or {}).get(NO_CHECKPOINTER_META) for r in chain)
    # (a thread named here is new: no checkpoint of it can be stored yet)
    saver = _saver(
        tape, graph, mode, debugger, new_run_id, fresh_thread=None if thread_id else new_thread, opaque=opaque
    )
    recorder = tape.record(graph, name=target.graph, checkpointer=saver)
    if not thread_id:
        # the first replayed run has no previous run on that thread: not looked up (a store read per replay)
        recorder.new_threads.add(new_thread)
    answerer = TapeAnswerer(matcher, mode, allow_live_effects=allow_live_effects, state_check=state_check)
    # What the recorded runs' events refer to is on the store (a stored event's blobs and chains are
    # kept with it): a served call's request and message chain, a task's writes met again, the
    # input, the versions and the output have the same addresses in the replay, and are not written
    # again (a strict replay's end write carried ~65 blobs and 20 chain nodes the store had).
    # Read from runs that exist as the replay began; not kept past this replay (garbage collection).
    if len(chain) == 1:
        answerer.on_store = (recorded[chain[0].run_id].blobs, recorded[chain[0].run_id].chains)
    else:
        answerer.on_store = (
            set().union(*(recorded[r.run_id].blobs for r in chain)),
            set().union(*(recorded[r.run_id].chains for r in chain)),
        )
    # Every call of a strict replay that ends (finished or interrupted) was served, and recorded once:
    # the answerer's sum of what it served is the sum of the call events, which are then not read back
    # (the debugger answers calls itself, and a replay that diverged or failed reads its events).
    served_totals = mode == "strict" and debugger is None
    # the debugger pauses at calls, tasks and checkpoints, and answers calls with what the user injects
    plan_meta = {"replay_mode": mode, **({NO_CHECKPOINTER_META: True} if opaque else {}), **(meta or {})}
    plan = ReplayPlan(answerer if debugger is None else debugger.answerer(answerer), mode, meta=plan_meta)
    output: Any = None
    status = "finished"
    divergence: dict[str, Any] | None = None
    error: str | None = None
    run_ids: list[str] = []
    replayed_rows: dict[str, list[EventRow]] = {}
    id_map: dict[str, str] = {}
    # where each run starts: the replay's copies of the recorded checkpoints (graphtape.replay.startpoint)
    starts = StartPoints(
        tape,
        lambda source, checkpoint: _copy_checkpoint(recorder.checkpointer, source, checkpoint, new_thread),
        [r.run_id for r in chain[start_index:]],
        run_ids,
    )
    for index, original in enumerate(chain):
        if index < start_index:
            continue
        value, rec_config, started = _recorded_input(
            tape, original, recorder.types, recorded_rows[original.run_id], recorded[original.run_id].inputs, opaque
        )
        if state_check is not None:
            state_check.resumed = _resumed_tasks(value, chain, index, recorded_rows)
        value = _translate_resume(value, id_map)
        config: dict[str, Any] = {"configurable": {"thread_id": new_thread}}
        if from_checkpoint is not None and index == start_index:
            _copy_checkpoint(recorder.checkpointer, original.thread_id, from_checkpoint, new_thread)
            value = None
            if edit is not None:
                from graphtape.debug.edit import apply_edit

                apply_edit(recorder, {"configurable": {"thread_id": new_thread}}, edit, as_node)
        else:
            # the recorded update_state calls before the run, then the checkpoint it was invoked with
            try:
                for update, result in starts.update_steps(
                    recorded_rows[original.run_id], recorder, new_thread, original.thread_id
                ):
                    starts.updated(result, (yield update))
                starts.start_config(rec_config, original.thread_id, config)
            except ReplayError:
                raise
            except Exception as exc:  # the replayed graph refused the update: a result, not a crash
                error = f"{type(exc).__name__}: {exc} (repeating the update_state calls before run {original.run_id})"
                status = "failed"
                break
        for key, v in (rec_config.get("configurable") or {}).items():
            if key not in ("thread_id", *_START_KEYS) and v != serde.REDACTED:
                config["configurable"][key] = v
        # the rest of what the run was invoked with that its nodes may read (config["tags"], ...)
        for key in _REPLAYED_CONFIG:
            if key in rec_config:
                config[key] = rec_config[key]
        if new_run_id is not None and index == len(chain) - 1:
            # the run that replays the target gets the id the caller chose (a server answers with it at once)
            config["run_id"] = uuid.UUID(new_run_id)
        recorder.plan = dataclasses.replace(plan, replay_of=original.run_id)
        if progress is not None:
            progress(index, len(chain), original)
        # the run's own arguments (version="v2", stream_mode, interrupt_before, ...) shape its output
        kwargs = {k: v for k, v in (started.kwargs or {}).items() if k not in _NOT_REPLAYED}
        if debugger is not None:
            kwargs["durability"] = "sync"  # the debugger shows every step's checkpoint
            debugger.thread_id = new_thread
        api = (original.meta or {}).get("api", "invoke")
        try:
            output = yield Step(
                recorder, api if api in ("invoke", "stream", *ASYNC_APIS) else "invoke", value, config, kwargs
            )
        except Divergence as div:
            divergence, error, status = div.report, str(div), "diverged"
        except Exception as exc:  # the replayed code failed: a result, not a crash
            session_div = _last_session_divergence(tape, recorder)
            if session_div is not None:
                divergence, error, status = session_div, session_div.get("message"), "diverged"
            else:
                error, status = f"{type(exc).__name__}: {exc}", "failed"
                # the recorded run failed the same way: a faithful step (a later run of the chain
                # retried it); only the chain's last run reports the failure
                reproduced = original.status == "failed" and _same_failure(original.error, one_line_error(exc), id_map)
                if reproduced and index < len(chain) - 1:
                    error = None
        run_ids.append(recorder.last_run_id or "")
        if status == "diverged" or error is not None:
            break
        # (the run's interrupts and end as the recorder wrote them: not read back, unless its totals are)
        ended = recorder.last_end_rows if served_totals and recorder.last_run_id == run_ids[-1] else None
        new_rows = replayed_rows[run_ids[-1]] = (
            ended if ended is not None else _replayed_rows(tape, run_ids[-1], served_totals)
        )
        replayed_id = run_ids[-1]
        id_map.update(
            _match_interrupts(
                recorded_rows[original.run_id],
                new_rows,
                lambda rid=replayed_id: tape.store.events(rid, [events.TaskStarted.KIND]),
            )
        )
        # the status the recorder gave the run it just ended (no read of the run row back)
        status = recorder.last_status or "finished"
        if index < len(chain) - 1 and _ended_otherwise(original, status):
            # (the chain's last run is judged by the caller, who compares its status)
            divergence = _status_divergence(original, run_ids[-1], status)
            error, status = divergence["message"], "diverged"
            break
    if served_totals and status in ("finished", "interrupted"):
        totals = answerer.served_totals().to_dict()
    else:  # the replay's call events, read (those of runs read without them, again)
        totals = _sum_stats(tape, run_ids, None if served_totals else replayed_rows)
    output_matches: bool | None = None
    if status in ("finished", "interrupted") and run_ids:
        last_rows = replayed_rows.get(run_ids[-1])
        output_matches = _outputs_match(
            tape,
            _output_ref(tape, target, recorded_rows.get(target.run_id)),
            _output_ref(tape, None if last_rows is not None else tape.store.get_run(run_ids[-1]), last_rows),
        )
    return ReplayResult(
        run_id=run_ids[-1] if run_ids else "",
        run_ids=run_ids,
        thread_id=new_thread,
        replay_of=target.run_id,
        mode=mode,
        status=status,
        output=output,
        unused=len(matcher.unused()) if status != "diverged" else 0,
        output_matches=output_matches,
        divergence=divergence,
        error=error,
        **totals,
    )


def _saver(
    tape: Tape,
    graph: Any,
    mode: str,
    debugger: Any,
    new_run_id: str | None,
    fresh_thread: str | None = None,
    *,
    opaque: bool = False,
) -> Any:
    """The saver a replay records with: the graph's own checkpointer, else graphtape's.

    Always one that keeps the replay's thread: a chain of runs replays on one
    thread, as recorded (a graph without a checkpointer runs each call on a
    thread of its own only when recorded for its user). A strict replay on
    graphtape's saver that holds its rows to its end has checkpoints that need
    no worker thread (:mod:`graphtape.replay.saver`); the debugger pauses at
    checkpoints and a replay followed live by the id chosen for it writes as it
    goes: both keep graphtape's saver. ``opaque``: the replayed runs' graph had
    no checkpointer, and a value it cannot store is a placeholder, as recorded.
    """
    own = own_checkpointer(graph)
    if own is not None:
        return own
    if mode != "strict" or debugger is not None or new_run_id is not None:
        from graphtape.runtime.saver import saver_for

        return saver_for(tape.store, opaque=opaque)
    from graphtape.replay.saver import ReplaySaver

    return ReplaySaver(tape.store, fresh_thread=fresh_thread, opaque=opaque)


def _start(
    tape: Tape, run_id: str, graph: Any, mode: str, edit: Any, from_checkpoint: str | None, **opts: Any
) -> tuple[list[RunRecord], Generator[Step, Any, ReplayResult]]:
    if mode not in MODES:
        raise ReplayError(f"unknown replay mode {mode!r}; use one of {', '.join(MODES)}")
    if edit is not None and from_checkpoint is None:
        raise ReplayError("a state edit needs a checkpoint to start from (from_checkpoint=...)")
    if hasattr(graph, "original"):  # a RecordedGraph: replay its graph
        graph = graph.original
    target, chain, start_index = _plan(tape, run_id, from_checkpoint)
    core = _core(tape, target, chain, start_index, graph, mode=mode, edit=edit, from_checkpoint=from_checkpoint, **opts)
    return chain[start_index:], core


def replay(
    tape: Tape,
    run_id: str,
    graph: Any,
    *,
    mode: str = "strict",
    allow_live_effects: bool = False,
    overrides: dict[str, Any] | None = None,
    live_from: set[str] | None = None,
    thread_id: str | None = None,
    from_checkpoint: str | None = None,
    edit: dict[str, Any] | None = None,
    as_node: str | None = None,
    meta: dict[str, Any] | None = None,
    progress: Any = None,
    debugger: Any = None,
    new_run_id: str | None = None,
) -> ReplayResult:
    """Replay ``run_id`` on ``graph``; see the module docstring.

    With ``from_checkpoint``, the replay starts from that checkpoint of the
    run's thread instead of from the first input: the checkpoint is copied
    into the new thread and execution continues from it; ``edit`` then
    changes the state there first (as node ``as_node``), which makes the
    replay a fork. ``mode="live"`` calls models and tools live and serves
    only unchanged effects.

    Runs recorded with an async API (``ainvoke``, ``astream``,
    ``astream_events``) are replayed with it, all of them in ONE event loop
    owned by this replay: a provider client the graph creates in the first
    run is still usable in the next. Inside a running event loop use
    :func:`areplay` (``await tape.areplay(...)``).
    """
    runs, core = _start(
        tape,
        run_id,
        graph,
        mode,
        edit,
        from_checkpoint,
        allow_live_effects=allow_live_effects,
        overrides=overrides,
        live_from=live_from,
        thread_id=thread_id,
        as_node=as_node,
        meta=meta,
        progress=progress,
        debugger=debugger,
        new_run_id=new_run_id,
    )
    if _uses_async(runs) and loop_running():
        core.close()
        raise ReplayError(
            "this run was recorded with an async API and an event loop is running in this thread "
            "(a notebook, a web handler, an async test): use `await tape.areplay(...)` "
            "(or afork/aoverride/ainvalidate_from)"
        )
    loop = ReplayLoop()
    try:
        return drive(core, lambda step: loop.run(step.arun()) if step.is_async else step.run())
    finally:
        loop.close()


async def areplay(
    tape: Tape,
    run_id: str,
    graph: Any,
    *,
    mode: str = "strict",
    allow_live_effects: bool = False,
    overrides: dict[str, Any] | None = None,
    live_from: set[str] | None = None,
    thread_id: str | None = None,
    from_checkpoint: str | None = None,
    edit: dict[str, Any] | None = None,
    as_node: str | None = None,
    meta: dict[str, Any] | None = None,
    progress: Any = None,
    new_run_id: str | None = None,
) -> ReplayResult:
    """:func:`replay` in the caller's event loop (notebooks, web handlers, async tests).

    Async-recorded runs are awaited in this loop; runs recorded with the
    sync API run in a worker thread (``asyncio.to_thread``) so that the loop
    is not blocked. Store reads and writes between runs are short and
    synchronous.
    """
    _runs, core = _start(
        tape,
        run_id,
        graph,
        mode,
        edit,
        from_checkpoint,
        allow_live_effects=allow_live_effects,
        overrides=overrides,
        live_from=live_from,
        thread_id=thread_id,
        as_node=as_node,
        meta=meta,
        progress=progress,
        debugger=None,
        new_run_id=new_run_id,
    )
    return await adrive(core)


def _checkpoint_segment(tape: Tape, chain: list[RunRecord], checkpoint_id: str) -> int:
    for index, run in enumerate(chain):
        for row in tape.store.events(run.run_id, [events.Checkpoint.KIND]):
            ev = events.Checkpoint.from_row(row)
            if ev.checkpoint_id == checkpoint_id:
                if ev.ns:
                    raise ReplayError(
                        f"checkpoint {checkpoint_id} belongs to subgraph namespace {ev.ns!r}; "
                        "replay from a checkpoint of the root graph"
                    )
                return index
    raise ReplayError(
        f"checkpoint {checkpoint_id} is not one of the checkpoints of run {chain[-1].run_id} or the runs "
        "before it on its thread; list them with `graphtape show RUN`"
    )


def _copy_checkpoint(saver: Any, thread_id: str, checkpoint_id: str, new_thread: str) -> None:
    """Copy one root checkpoint into ``new_thread``, without its pending writes.

    Pending writes are the results of tasks already run from that checkpoint;
    copying them would make LangGraph skip those tasks, and a replay from a
    checkpoint exists to run them again (as LangGraph's own time travel does).
    """
    source = saver.get_tuple(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
    )
    if source is None:
        raise ReplayError(
            f"checkpoint {checkpoint_id} is not in the graph's checkpointer (thread {thread_id}); "
            "replay from the run's input instead, or use the checkpointer the run was recorded with"
        )
    checkpoint = source.checkpoint
    # (a checkpoint of a tape written before context.RUN_CONF_KEY holds its run's id in its metadata)
    metadata = {k: v for k, v in (source.metadata or {}).items() if k != LEGACY_RUN_META_KEY}
    saver.put(
        {"configurable": {"thread_id": new_thread, "checkpoint_ns": ""}},
        checkpoint,
        {**metadata, "graphtape_copied_from": checkpoint_id},
        dict(checkpoint.get("channel_versions") or {}),
    )


def _replayed_rows(tape: Tape, run_id: str, without_calls: bool = False) -> list[EventRow]:
    kinds = _REPLAYED_END_KINDS if without_calls else _REPLAYED_KINDS
    return tape.store.events(run_id, list(kinds)) if run_id else []


def _sum_stats(tape: Tape, run_ids: list[str], read: dict[str, list[EventRow]] | None = None) -> dict[str, Any]:
    """The replay's totals, summed from the call events of its runs (graphtape.events.replay_stats).

    ``read``: the events of some of the runs, already read (a run that diverged or failed is not).
    """
    read = read or {}
    rows = [
        row
        for rid in run_ids
        if rid
        for row in (read[rid] if rid in read else _replayed_rows(tape, rid))
        if row.kind in events.CALL_EVENT_KINDS
    ]
    return events.replay_stats(rows).to_dict()


def _last_session_divergence(tape: Tape, recorder: Any) -> dict[str, Any] | None:
    if not recorder.last_run_id:
        return None
    rows = tape.store.events(recorder.last_run_id, [events.Divergence.KIND])
    return events.Divergence.from_row(rows[0]).to_data() if rows else None
