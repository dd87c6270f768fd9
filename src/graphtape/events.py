"""The tape's event types: one frozen, versioned class per event kind.

A run's log is a sequence of events (``EventRow``: run id, seq, kind, time,
JSON ``data``). This module is the one place that says what each kind holds:
its stable kind name, its typed fields, which fields are payload addresses
(blobs) or message chains (what garbage collection and export follow), and
its JSON form, which is exactly the dict stored since the format began, so
stored tapes, golden tapes and export files stay byte-identical.

Writers build an event and store its JSON form::

    session.emit(events.Checkpoint(checkpoint_id=..., parent_id=..., ns="", step=1, source="loop"))
    # -> EventRow(run_id, seq, "checkpoint", ts, event.to_data())

Readers parse a stored row and use attributes, never string keys::

    for row in store.events(run_id, events.CALL_EVENT_KINDS):
        call = events.parse(row)          # an LlmCall, ToolCall or EffectCall
        if call.served: ...

Reading tolerates other versions of a tape: a key this code does not know
is kept aside in ``extra`` (and written back by ``to_data``), a missing key
reads as ``None``, and a kind this code does not know parses as
:class:`UnknownEvent`. A field that is ``None`` is either written as ``null``
(``always``) or left out (``optional``), exactly as the kind always did.

Frozen dataclasses with slots, not pydantic: events are built on the
recording hot path (one per call, task and checkpoint), and validation would
cost more than the dict they replace. The event reference in
``docs/tape-format.md`` is generated from these classes
(``python -m graphtape.docgen``) and a test fails when it drifts.

A new kind: a frozen slotted dataclass deriving from :class:`Event`, decorated
with ``_event``, with its ``KIND`` and fields annotated with :class:`Key`; then
regenerate the docs. A changed JSON form is a new ``VERSION``, and
``from_data`` must still read the old one.

Longer than most modules on purpose: it is the tape's schema, one declaration
per kind, and reads best whole (the machinery above the declarations is about
a hundred lines).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from typing import Self  # typing.Self is Python 3.11+

    from graphtape.store.base import EventRow

__all__ = [
    "CALL_EVENT_KINDS",
    "CALL_KINDS",
    "KINDS",
    "TASK_KINDS",
    "CallEvent",
    "Checkpoint",
    "Divergence",
    "EffectCall",
    "EffectStarted",
    "Event",
    "Interrupt",
    "Key",
    "Label",
    "LlmCall",
    "ReplayStats",
    "Resume",
    "RunFailed",
    "RunFinished",
    "RunStarted",
    "StateUpdate",
    "TaskFailed",
    "TaskFinished",
    "TaskInterrupted",
    "TaskStarted",
    "ToolCall",
    "UnknownEvent",
    "call_event_kind",
    "event_class",
    "from_data",
    "parse",
    "refs",
    "render_doc",
    "replay_stats",
]

#: The kinds of call graphtape intercepts, as a call site names them.
CALL_KINDS: tuple[str, ...] = ("llm", "tool", "effect")
#: The event kind of each call kind, in the same order.
CALL_EVENT_KINDS: tuple[str, ...] = tuple(f"{k}_call" for k in CALL_KINDS)


def call_event_kind(call_kind: str) -> str:
    """``"llm"`` -> ``"llm_call"``; the event kind a call of that kind is stored as."""
    if call_kind not in CALL_KINDS:
        raise ValueError(f"unknown call kind {call_kind!r}; expected one of {', '.join(CALL_KINDS)}")
    return f"{call_kind}_call"


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """What an event field is, as its annotation says: ``x: Annotated[str | None, Key("...")] = None``.

    ``always``: written even when ``None`` (as ``null``); otherwise a ``None`` field is left
    out of the JSON form. ``ref``: ``"blob"`` or ``"chain"`` when the field holds a content
    address the event keeps alive; ``"value"`` for a blob holding an encoded value (a typed
    envelope, which may name classes: what an import checks). Every field defaults to
    ``None``: a key missing from a stored event reads as ``None``.
    """

    doc: str
    always: bool = False
    ref: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """Base of every event type. ``extra`` holds keys of a stored event this version does not know."""

    #: the stable kind name stored in ``EventRow.kind``
    KIND: ClassVar[str] = ""
    #: version of this kind's JSON form (a change must keep reading older ones)
    VERSION: ClassVar[int] = 1
    #: (name, type, Key) of each field, in the order the writers always used
    KEYS: ClassVar[tuple[tuple[str, Any, Key], ...]] = ()
    #: (name, always) of each JSON key, in that order
    LAYOUT: ClassVar[tuple[tuple[str, bool], ...]] = ()
    #: the field names, in that order (the positional order of ``__init__``), and as a set
    NAMES: ClassVar[tuple[str, ...]] = ()
    NAME_SET: ClassVar[frozenset[str]] = frozenset()
    #: fields holding a blob address / a chain head / the address of an encoded value (blobs too)
    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ()
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ()
    CHAIN_FIELDS: ClassVar[tuple[str, ...]] = ()

    #: keys of a stored event this version does not know, written back as they were
    extra: Mapping[str, Any] | None = dataclasses.field(default=None, kw_only=True, repr=False)

    def to_data(self) -> dict[str, Any]:
        """The JSON body stored for this event (the same dict graphtape always stored)."""
        out: dict[str, Any] = {}
        for name, always in self.LAYOUT:
            value = getattr(self, name)
            if always or value is not None:
                out[name] = value
        if self.extra:
            for key, value in self.extra.items():
                out.setdefault(key, value)
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Self:
        """Read a stored body: unknown keys go to ``extra``, missing ones are ``None``."""
        get = data.get
        values = [get(name) for name in cls.NAMES]
        if data.keys() <= cls.NAME_SET:  # the usual case: nothing unknown
            return cls(*values)
        extra = types.MappingProxyType({k: v for k, v in data.items() if k not in cls.NAME_SET})
        return cls(*values, extra=extra)

    @classmethod
    def from_row(cls, row: EventRow) -> Self:
        """Read a stored row of this kind (see :func:`parse` for a row of any kind)."""
        if cls.KIND and row.kind != cls.KIND:
            raise ValueError(f"event {row.seq} of run {row.run_id} is a {row.kind!r} event, not {cls.KIND!r}")
        return cls.from_data(row.data)

    def refs(self, blobs: set[str], chains: set[str]) -> None:
        """Add the blob and chain addresses this event refers to."""
        for name in self.BLOB_FIELDS:
            value = getattr(self, name)
            if isinstance(value, str):
                blobs.add(value)
        for name in self.CHAIN_FIELDS:
            value = getattr(self, name)
            if isinstance(value, str):
                chains.add(value)


_E = TypeVar("_E", bound=Event)
_BY_KIND: dict[str, type[Event]] = {}


def _event(cls: type[_E]) -> type[_E]:
    """Record the JSON layout of an event dataclass from its ``Key`` annotations, compile it, register its kind."""
    hints = typing.get_type_hints(cls, include_extras=True)
    keys: list[tuple[str, Any, Key]] = []
    for f in dataclasses.fields(cls):
        if f.name == "extra":
            continue
        hint = hints[f.name]
        key = next(m for m in hint.__metadata__ if isinstance(m, Key))
        keys.append((f.name, typing.get_args(hint)[0], key))
    cls.KEYS = tuple(keys)
    cls.LAYOUT = tuple((name, key.always) for name, _, key in keys)
    cls.NAMES = tuple(name for name, _, _ in keys)
    cls.NAME_SET = frozenset(cls.NAMES)
    cls.BLOB_FIELDS = tuple(name for name, _, key in keys if key.ref in ("blob", "value"))
    cls.VALUE_FIELDS = tuple(name for name, _, key in keys if key.ref == "value")
    cls.CHAIN_FIELDS = tuple(name for name, _, key in keys if key.ref == "chain")
    _compile(cls)
    if cls.KIND:
        _BY_KIND[cls.KIND] = cls
    return cls


def _compile(cls: type[Event]) -> None:
    """Give ``cls`` a straight-line ``__init__`` and ``to_data``, as ``dataclasses`` itself does.

    Events are built on the recording hot path. A frozen dataclass's own ``__init__`` goes
    through ``object.__setattr__`` per field and the generic ``Event.to_data`` through
    ``getattr`` per field: together about three times the cost of the dict literal they
    replace. Setting the slots through their descriptors and writing each key inline brings
    both back to the dict's cost; the semantics are the generic ones (a test compares them).
    Rejected: a non-frozen class (cheaper still, but an event read from a tape could be edited
    in place by a reader) and pydantic (validation costs more than the whole dict).
    """
    names = [f.name for f in dataclasses.fields(cls)]
    scope: dict[str, Any] = {f"_set_{n}": getattr(cls, n).__set__ for n in names}
    params = ", ".join(f"{n}=None" for n in names if n != "extra")
    init = [f"def __init__(self, {params}, *, extra=None):"]
    init += [f"    _set_{n}(self, {n})" for n in names]
    body = ["def to_data(self):", "    out = {}"]
    for name, always in cls.LAYOUT:
        if always:
            body.append(f"    out[{name!r}] = self.{name}")
        else:
            body += [f"    v = self.{name}", "    if v is not None:", f"        out[{name!r}] = v"]
    body += [
        "    if self.extra:",
        "        for k, v in self.extra.items():",
        "            out.setdefault(k, v)",
        "    return out",
    ]
    exec("\n".join(init) + "\n\n" + "\n".join(body), scope)
    for fn in ("__init__", "to_data"):
        scope[fn].__qualname__ = f"{cls.__qualname__}.{fn}"
        scope[fn].__doc__ = getattr(Event, fn).__doc__
        setattr(cls, fn, scope[fn])


# -- the run ---------------------------------------------------------------------------


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class RunStarted(Event):
    """The run began. Run, thread, mode and replay link are on the run row; config and versions
    repeat from run to run, so they are stored by address."""

    KIND = "run_started"
    input: Annotated[str | None, Key("the run's input, encoded (typed envelope)", always=True, ref="value")] = None
    config: Annotated[
        str | None, Key("the run's config without callbacks and per-run ids (redacted)", always=True, ref="blob")
    ] = None
    versions: Annotated[
        str | None, Key("versions of python, langgraph, langchain and graphtape", always=True, ref="blob")
    ] = None
    kwargs: Annotated[
        dict[str, Any] | None,
        Key(
            "the call's JSON-able arguments (version, stream_mode, ...), replayed as recorded; "
            "left out when there are none"
        ),
    ] = None


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class Resume(Event):
    """The run was started with ``Command(resume=...)``: a human's answer to an interrupt."""

    KIND = "resume"
    value: Annotated[str | None, Key("the resume value, encoded", always=True, ref="value")] = None


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class Interrupt(Event):
    """The run stopped at an ``interrupt()`` waiting for an answer (one event per pending interrupt)."""

    KIND = "interrupt"
    interrupt_id: Annotated[str | None, Key("LangGraph's interrupt id", always=True)] = None
    value: Annotated[Any, Key("the value passed to interrupt(), as JSON", always=True)] = None


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class RunFinished(Event):
    """The run ended without an error (finished, interrupted or diverged)."""

    KIND = "run_finished"
    status: Annotated[str | None, Key("the run's final status", always=True)] = None
    output: Annotated[str | None, Key("a view of the final state (messages by address)", ref="blob")] = None


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class RunFailed(Event):
    """The run raised."""

    KIND = "run_failed"
    error: Annotated[dict[str, Any] | None, Key("the recorded error {type, message, detail}", always=True)] = None


# -- tasks and checkpoints -------------------------------------------------------------


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class TaskStarted(Event):
    """A node (task) started in a step."""

    KIND = "task_started"
    node_path: Annotated[str | None, Key("the node, with its subgraph path (sub/inner)", always=True)] = None
    step: Annotated[int | None, Key("the step the task runs in", always=True)] = None
    task: Annotated[str | None, Key("the task's checkpoint namespace (node:id|...; '' at the root)", always=True)] = (
        None
    )


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class TaskFinished(Event):
    """A task returned; its writes are stored by address."""

    KIND = "task_finished"
    task: Annotated[str | None, Key("the task's checkpoint namespace", always=True)] = None
    duration: Annotated[float | None, Key("seconds, without time paused in the debugger", always=True)] = None
    writes: Annotated[
        Any, Key("a view of what the task returned (an address once flushed)", always=True, ref="blob")
    ] = None


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class TaskFailed(Event):
    """A task raised."""

    KIND = "task_failed"
    task: Annotated[str | None, Key("the task's checkpoint namespace", always=True)] = None
    duration: Annotated[float | None, Key("seconds", always=True)] = None
    error: Annotated[dict[str, Any] | None, Key("the recorded error", always=True)] = None


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class TaskInterrupted(Event):
    """A task stopped at an interrupt (or a Command bubbled through it); it runs again on resume."""

    KIND = "task_interrupted"
    task: Annotated[str | None, Key("the task's checkpoint namespace", always=True)] = None
    duration: Annotated[float | None, Key("seconds", always=True)] = None


#: Event kinds of a task's life.
TASK_KINDS: tuple[str, ...] = ("task_started", "task_finished", "task_failed", "task_interrupted")


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint(Event):
    """LangGraph saved a checkpoint during the run (the link from a run to its checkpoints)."""

    KIND = "checkpoint"
    checkpoint_id: Annotated[str | None, Key("the checkpoint's id", always=True)] = None
    parent_id: Annotated[str | None, Key("the checkpoint the step started from", always=True)] = None
    ns: Annotated[str | None, Key("its checkpoint namespace ('' at the root)", always=True)] = None
    step: Annotated[int | None, Key("LangGraph's step number", always=True)] = None
    source: Annotated[str | None, Key("input, loop, update or fork", always=True)] = None


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class StateUpdate(Event):
    """The state was changed by ``update_state`` (or ``bulk_update_state``, their async forms) before
    the run, outside any run: one event per update, in the order LangGraph applied them, on the next
    run of the thread. A replay repeats them on its thread before re-running the run."""

    KIND = "state_update"
    api: Annotated[
        str | None, Key("the method called: update_state, aupdate_state, bulk_update_state, ...", always=True)
    ] = None
    call: Annotated[int | None, Key("the number of that call among those before the run (0 first)", always=True)] = None
    superstep: Annotated[int | None, Key("the superstep of the update within its call (0 first)", always=True)] = None
    checkpoint_id: Annotated[
        str | None, Key("the checkpoint the call was given (null: the thread's latest)", always=True)
    ] = None
    ns: Annotated[str | None, Key("the call's checkpoint namespace, when not the root graph's")] = None
    checkpoint_map: Annotated[
        dict[str, Any] | None, Key("the call's checkpoint_map (namespace -> checkpoint id), when given")
    ] = None
    values: Annotated[str | None, Key("the update's values, encoded", always=True, ref="value")] = None
    as_node: Annotated[
        str | None, Key("the node the update is applied as (null: LangGraph infers it)", always=True)
    ] = None
    task_id: Annotated[str | None, Key("the task the update is applied as, when given")] = None
    result: Annotated[str | None, Key("the checkpoint the call returned (the call's last one)", always=True)] = None


# -- calls -----------------------------------------------------------------------------


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class CallEvent(Event):
    """An LLM, tool or effect call, recorded live or served from a tape.

    Every field is left out of the JSON form when ``None``.
    """

    #: the call kind (one of ``CALL_KINDS``)
    CALL_KIND: ClassVar[str] = ""

    call_id: Annotated[str | None, Key("the call's id (served_from and overrides name it)")] = None
    node_path: Annotated[str | None, Key("the node that made the call, with its subgraph path")] = None
    branch: Annotated[Any, Key("the task path of the call (which branch of a fan-out)")] = None
    step: Annotated[int | None, Key("the step of the call's task")] = None
    task: Annotated[str | None, Key("the checkpoint namespace of the call's task")] = None
    ordinal: Annotated[int | None, Key("the call's number among its node's calls of the kind")] = None
    fingerprint: Annotated[str | None, Key("hash of the canonical request (what replay matches on)")] = None
    request: Annotated[str | None, Key("the request, encoded", ref="blob")] = None
    messages: Annotated[str | None, Key("a chat request's messages, as a chain head", ref="chain")] = None
    response: Annotated[str | None, Key("the result, encoded (absent when the call raised)", ref="value")] = None
    error: Annotated[dict[str, Any] | None, Key("the recorded error when the call raised")] = None
    tokens: Annotated[int | None, Key("total tokens (absent when zero)")] = None
    cost: Annotated[float | None, Key("cost in dollars from the price table (absent when zero)")] = None
    latency: Annotated[float | None, Key("seconds (0 when served)")] = None
    source: Annotated[str | None, Key("live, tape (served), override, or another answer's name")] = None
    served_from: Annotated[str | None, Key("the recorded call that served it")] = None
    recorded_latency: Annotated[float | None, Key("the serving call's recorded latency")] = None
    model: Annotated[str | None, Key("the model's name (llm)")] = None
    name: Annotated[str | None, Key("the tool's or effect's name")] = None
    code: Annotated[str | None, Key("fingerprint of the tool's or effect's code")] = None
    idempotency_key: Annotated[str | None, Key("an effect's idempotency key")] = None
    code_changed: Annotated[bool | None, Key("the code changed since the recording (true, else absent)")] = None

    @property
    def served(self) -> bool:
        """Answered without running: from the tape or an override."""
        return self.source in ("tape", "override")

    @property
    def title(self) -> str | None:
        """What a listing calls the call: the tool's or effect's name, or the model."""
        return self.name or self.model


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class LlmCall(CallEvent):
    __doc__ = CallEvent.__doc__
    KIND = "llm_call"
    CALL_KIND = "llm"


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall(CallEvent):
    __doc__ = CallEvent.__doc__
    KIND = "tool_call"
    CALL_KIND = "tool"


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class EffectCall(CallEvent):
    __doc__ = CallEvent.__doc__
    KIND = "effect_call"
    CALL_KIND = "effect"


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class EffectStarted(Event):
    """Written durably before an effect with an idempotency key runs: recovery never runs it twice."""

    KIND = "effect_started"
    call_id: Annotated[str | None, Key("the effect call's id", always=True)] = None
    name: Annotated[str | None, Key("the effect's name", always=True)] = None
    idempotency_key: Annotated[str | None, Key("its idempotency key", always=True)] = None
    fingerprint: Annotated[str | None, Key("its request fingerprint", always=True)] = None


# -- replay and history ----------------------------------------------------------------


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class Divergence(Event):
    """A replay stopped: a call's request (or a node's state) differs from the recording."""

    KIND = "divergence"
    message: Annotated[str | None, Key("the report's one-line message", always=True)] = None
    run_id: Annotated[str | None, Key("the run being replayed", always=True)] = None
    replay_run_id: Annotated[str | None, Key("the replaying run", always=True)] = None
    kind: Annotated[str | None, Key("the call kind, or 'state' for a state divergence", always=True)] = None
    name: Annotated[str | None, Key("the tool, effect or model (the node for a state divergence)", always=True)] = None
    node: Annotated[str | None, Key("the node's name", always=True)] = None
    node_path: Annotated[str | None, Key("the node with its subgraph path", always=True)] = None
    step: Annotated[int | None, Key("the step", always=True)] = None
    ordinal: Annotated[int | None, Key("the call's number in its node (null for state)", always=True)] = None
    reason: Annotated[str | None, Key("why it diverged", always=True)] = None
    channels: Annotated[list[str] | None, Key("the state channels written differently (state only)")] = None
    recorded_call_id: Annotated[str | None, Key("the recorded call expected there", always=True)] = None
    recorded_step: Annotated[int | None, Key("the step of that recorded call", always=True)] = None
    diff: Annotated[str | None, Key("a unified diff, recorded against current", always=True)] = None
    hint: Annotated[str | None, Key("what to do about it (state only)")] = None


@_event
@dataclasses.dataclass(frozen=True, slots=True)
class Label(Event):
    """A label and note attached to a run after the fact (the latest one wins; null clears)."""

    KIND = "label"
    label: Annotated[str | None, Key("the label", always=True)] = None
    note: Annotated[str | None, Key("a note", always=True)] = None


@dataclasses.dataclass(frozen=True, slots=True)
class UnknownEvent(Event):
    """An event of a kind this version does not know (a newer tape): kept, never interpreted."""

    kind: str = ""
    data: Mapping[str, Any] | None = None

    def to_data(self) -> dict[str, Any]:
        return dict(self.data or {})


#: Every kind this version knows, in the order of the reference.
KINDS: tuple[str, ...] = tuple(_BY_KIND)


def event_class(kind: str) -> type[Event] | None:
    """The class of an event kind, or ``None`` for a kind this version does not know."""
    return _BY_KIND.get(kind)


def from_data(kind: str, data: Mapping[str, Any]) -> Event:
    """The typed event of a stored ``(kind, data)``; an unknown kind gives :class:`UnknownEvent`."""
    cls = _BY_KIND.get(kind)
    if cls is None:
        return UnknownEvent(kind=kind, data=types.MappingProxyType(dict(data)))
    return cls.from_data(data)


def parse(row: EventRow) -> Any:
    """The typed event of a stored row (``Any`` so readers can use the attributes of the kind they
    asked the store for; check with ``isinstance`` when the kinds are mixed)."""
    return from_data(row.kind, row.data)


def refs(kind: str, data: Mapping[str, Any], blobs: set[str], chains: set[str]) -> None:
    """Add the blob and chain addresses a stored event refers to, without parsing it (garbage
    collection reads every event of a store). Only these fields are followed: other strings in an
    event (an interrupt's value, a config key) are data, not addresses."""
    cls = _BY_KIND.get(kind)
    if cls is None:
        return
    for name in cls.BLOB_FIELDS:
        value = data.get(name)
        if isinstance(value, str):
            blobs.add(value)
    for name in cls.CHAIN_FIELDS:
        value = data.get(name)
        if isinstance(value, str):
            chains.add(value)


# -- replay statistics -----------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class ReplayStats:
    """What a replay saved and spent, summed from its call events (the one place that sums them)."""

    served: int = 0
    live: int = 0
    tokens_saved: int = 0
    cost_saved: float = 0.0
    time_saved: float = 0.0
    live_tokens: int = 0
    live_cost: float = 0.0
    #: names of tools and effects whose code changed since the recording
    changed_code: set[str] = dataclasses.field(default_factory=set)

    def add(self, call: CallEvent) -> None:
        """Count one call: served (from the tape or an override) or live."""
        if call.code_changed:
            self.changed_code.add(str(call.name or "?"))
        if call.served:
            self.served += 1
            if call.source == "tape":
                self.tokens_saved += int(call.tokens or 0)
                self.cost_saved += float(call.cost or 0.0)
                self.time_saved += float(call.recorded_latency or 0.0)
        else:
            self.live += 1
            self.live_tokens += int(call.tokens or 0)
            self.live_cost += float(call.cost or 0.0)

    def to_dict(self) -> dict[str, Any]:
        """The totals as ``ReplayResult`` reports them (``changed_code`` sorted)."""
        return {
            "served": self.served,
            "live": self.live,
            "tokens_saved": self.tokens_saved,
            "cost_saved": self.cost_saved,
            "time_saved": self.time_saved,
            "live_tokens": self.live_tokens,
            "live_cost": self.live_cost,
            "changed_code": sorted(self.changed_code),
        }


def replay_stats(calls: Iterable[Event | EventRow]) -> ReplayStats:
    """Sum the call events among ``calls`` (typed, or stored rows) into :class:`ReplayStats`."""
    stats = ReplayStats()
    for call in calls:
        event = call if isinstance(call, Event) else parse(call)
        if isinstance(event, CallEvent):
            stats.add(event)
    return stats


# -- the reference in docs/tape-format.md ----------------------------------------------

DOC_BEGIN = "<!-- events:begin (generated by `python -m graphtape.docgen`; do not edit) -->"
DOC_END = "<!-- events:end -->"


def _type_name(hint: Any) -> str:
    text = hint.__name__ if isinstance(hint, type) else repr(hint)
    text = text.replace("typing.", "").replace(" | None", "")
    return text.replace("dict[str, Any]", "object").replace("Mapping[str, Any]", "object").replace("Any", "JSON")


def render_doc() -> str:
    """The event reference as markdown, between its markers."""
    lines = [
        DOC_BEGIN,
        "",
        "## Events",
        "",
        "Each stored event has a kind and a JSON body. *always* fields are written even when null; "
        "*optional* ones are left out when null. *blob* and *chain* fields hold content addresses "
        "(kept alive by garbage collection, copied by export); a *value* is a blob holding an encoded value "
        "(a typed envelope, checked by import). A reader keeps keys it does not know "
        "and reads a missing key as null. The kinds of call: " + ", ".join(f"`{k}`" for k in CALL_KINDS) + ".",
        "",
    ]
    for kind in KINDS:
        cls = _BY_KIND[kind]
        if issubclass(cls, CallEvent):
            if kind != CALL_EVENT_KINDS[0]:
                continue  # the call kinds share one layout: one table
            title = " / ".join(f"`{k}`" for k in CALL_EVENT_KINDS)
        else:
            title = f"`{kind}`"
        doc = " ".join((cls.__doc__ or "").split()).replace("``", "`")
        lines += [
            f"### {title} (version {cls.VERSION})",
            "",
            doc,
            "",
            "| field | type | written | refers to | meaning |",
            "|---|---|---|---|---|",
        ]
        for name, hint, key in cls.KEYS:
            lines.append(
                f"| `{name}` | {_type_name(hint)} | {'always' if key.always else 'optional'} | "
                f"{key.ref or ''} | {key.doc.replace('|', chr(92) + '|')} |"
            )
        lines.append("")
    lines.append(DOC_END)
    return "\n".join(lines)


def update_doc(text: str) -> str:
    """``text`` (a markdown page) with its generated section replaced, or appended when missing."""
    begin, end = text.find(DOC_BEGIN), text.find(DOC_END)
    if begin < 0 or end < begin:
        return text.rstrip("\n") + "\n\n" + render_doc() + "\n"
    return text[:begin] + render_doc() + text[end + len(DOC_END) :]
