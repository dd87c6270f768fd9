"""Request and response models of the tape API (``/graphtape/...``): what the OpenAPI document describes.

The shapes are the contract the web UI codes against (see docs/server-api.md).
Values recorded on the tape (inputs, outputs, states, requests) are free JSON
(``Any``); everything graphtape itself produces is typed. Models of graphtape's
own ``to_dict()`` forms allow extra keys, so a field added to the library later
reaches clients without a server change.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ActionStarted",
    "Branch",
    "BranchRun",
    "BreakpointSpec",
    "BreakpointsBody",
    "CallDetail",
    "CallList",
    "CallSummary",
    "Change",
    "CheckpointState",
    "DebugCreate",
    "DebugPause",
    "DebugSession",
    "EventItem",
    "EventPage",
    "ForkBody",
    "History",
    "HistoryCall",
    "HistoryEntry",
    "ImportResult",
    "InvalidateBody",
    "LabelBody",
    "OverrideBody",
    "PendingInterrupt",
    "ReplayBody",
    "RunDetail",
    "RunList",
    "RunSummary",
    "Savings",
    "StateDiff",
    "Timeline",
    "TimelineStep",
    "TimelineTask",
    "UseBody",
]

_OPEN = ConfigDict(extra="allow")
_CLOSED = ConfigDict(extra="forbid")


class RunSummary(BaseModel):
    """A recorded run (``RunRecord.to_dict()``) with its latest label and its duration."""

    model_config = _OPEN
    run_id: str
    thread_id: str
    graph: str
    status: str
    started_at: float
    ended_at: float | None = None
    parent_run_id: str | None = None
    replay_of: str | None = None
    mode: str
    llm_calls: int = 0
    tool_calls: int = 0
    effect_calls: int = 0
    served_calls: int = 0
    live_calls: int = 0
    tokens: int = 0
    error: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None
    duration: float | None = None


class RunList(BaseModel):
    runs: list[RunSummary]
    #: how many runs match, counted up to 10,000 (``total_exact`` is false when more match)
    total: int
    total_exact: bool = True
    #: the ``cursor`` of the next page (the runs after this page's last), null on the last page
    next: str | None = None


class Savings(BaseModel):
    served: int
    live: int
    tokens_saved: int
    cost_saved: float
    time_saved: float


class PendingInterrupt(BaseModel):
    id: str | None
    value: Any = None
    node: str | None = None


class RunDetail(BaseModel):
    run: RunSummary
    input: Any = None
    output: Any = None
    children: list[RunSummary]
    savings: Savings | None = None
    interrupts: list[PendingInterrupt]
    divergence: dict[str, Any] | None = None


CallSource = Literal["tape", "live", "override", "diverged", "recorded"]


class CallPreview(BaseModel):
    """What a timeline row says about a call: clipped lines, never the whole request or answer."""

    #: the tool's or effect's name and arguments, or the model and the last message it was sent
    request: str | None = None
    #: the first line of the answer (a model's text or the tools it asked for, a tool's result)
    answer: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


class CallSummary(BaseModel):
    call_id: str | None
    kind: Literal["llm", "tool", "effect"]
    name: str | None = None
    node_path: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    duration: float | None = None
    source: CallSource
    tokens: int | None = None
    cost: float | None = None
    #: the recorded error as one line (``Class: message``)
    error: str | None = None
    #: in a timeline, for the run's first 1,000 calls
    preview: CallPreview | None = None


class CallList(BaseModel):
    calls: list[CallSummary]


class CallDetail(BaseModel):
    call: CallSummary
    request: Any = None
    response: Any = None
    usage: dict[str, Any] | None = None
    latency: float | None = None
    recorded_in: str


class TimelineTask(BaseModel):
    task_id: str
    node: str
    node_path: str
    started_at: float | None = None
    ended_at: float | None = None
    status: Literal["finished", "failed", "interrupted", "running"]
    error: str | None = None
    calls: list[CallSummary]
    #: the tasks of the subgraph this task ran
    subtasks: list[TimelineTask] = Field(default_factory=list)


class TimelineStep(BaseModel):
    step: int | None
    checkpoint_id: str | None = None
    #: what wrote the step's checkpoint: input (step -1), loop (a super-step; step 0 applied the input), update, fork
    source: str | None = None
    tasks: list[TimelineTask]


class Timeline(BaseModel):
    run_id: str
    started_at: float
    ended_at: float | None = None
    steps: list[TimelineStep]


class EventItem(BaseModel):
    seq: int
    kind: str
    ts: float
    data: dict[str, Any]


class EventPage(BaseModel):
    events: list[EventItem]
    done: bool


class LabelBody(BaseModel):
    model_config = _CLOSED
    label: str | None = None
    note: str | None = None


class ImportResult(BaseModel):
    run_ids: list[str]


class CheckpointState(BaseModel):
    checkpoint_id: str
    thread_id: str
    values: Any = None
    next: list[str]
    metadata: dict[str, Any]
    parent_id: str | None = None
    step: int | None = None


class HistoryCall(BaseModel):
    model_config = _OPEN
    kind: str
    name: str | None = None
    source: str | None = None
    call_id: str | None = None
    node_path: str | None = None


class HistoryEntry(BaseModel):
    """One checkpoint of a history (``HistoryEntry.to_dict()``)."""

    model_config = _OPEN
    checkpoint_id: str
    parent_id: str | None = None
    thread_id: str
    ns: str = ""
    step: int | None = None
    source: str | None = None
    created_at: str | None = None
    run_id: str | None = None
    writers: list[str]
    calls: list[HistoryCall]
    next: list[str] | None = None
    within: str | None = None
    copied_from: str | None = None


class BranchRun(BaseModel):
    model_config = _OPEN
    run_id: str
    thread_id: str
    status: str
    mode: str
    started_at: float
    ended_at: float | None = None
    parent_run_id: str | None = None
    replay_of: str | None = None
    label: str | None = None
    note: str | None = None
    labeled_at: float | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class Branch(BaseModel):
    """A line of runs that continue one another, and the branches that leave it (``Branch.to_dict()``)."""

    model_config = _OPEN
    id: str
    kind: str
    thread_id: str
    label: str | None = None
    note: str | None = None
    from_run: str | None = None
    from_checkpoint: str | None = None
    via: list[str] = Field(default_factory=list)
    runs: list[BranchRun]
    children: list[Branch]


class History(BaseModel):
    """``History.to_dict()``: the checkpoints of a run or thread, oldest first, and the branches around it."""

    model_config = _OPEN
    target: str
    kind: Literal["run", "thread"]
    thread_id: str
    run_id: str | None = None
    namespaces: bool
    source: str
    entries: list[HistoryEntry]
    branches: list[Branch]


class Change(BaseModel):
    model_config = _OPEN
    op: Literal["added", "removed", "changed", "appended"]
    path: str
    pointer: str
    old: Any = None
    new: Any = None
    at: int | None = None
    count: int | None = None


class StateDiff(BaseModel):
    """``StateDiff.to_dict()``: per-channel changes and RFC 6902 operations from ``a`` to ``b``."""

    model_config = _OPEN
    a: str | None = None
    b: str | None = None
    equal: bool
    changes: list[Change]
    patch: list[dict[str, Any]]


class ReplayBody(BaseModel):
    model_config = _CLOSED
    mode: Literal["strict", "flight"] = "strict"
    from_checkpoint: str | None = None
    allow_live_effects: bool = False


class ForkBody(BaseModel):
    model_config = _CLOSED
    values: dict[str, Any] | None = None
    as_node: str | None = None
    mode: Literal["flight", "strict"] = "flight"
    allow_live_effects: bool = False


class OverrideBody(BaseModel):
    model_config = _CLOSED
    output: Any
    mode: Literal["flight", "strict"] = "flight"
    from_start: bool = False


class InvalidateBody(BaseModel):
    model_config = _CLOSED
    node: str = Field(min_length=1)
    allow_live_effects: bool = False


class ActionStarted(BaseModel):
    """A background action's new run: follow it at ``/graphtape/runs/{run_id}/stream``."""

    model_config = _OPEN
    run_id: str
    thread_id: str | None = None
    status: str = "running"


class BreakpointSpec(BaseModel):
    model_config = _CLOSED
    type: Literal["before", "after", "call"]
    node: str | None = None
    kind: Literal["llm", "tool", "effect"] | None = None
    name: str | None = None


class DebugCreate(BaseModel):
    model_config = _CLOSED
    run_id: str = Field(min_length=1)
    mode: Literal["strict", "flight"] = "strict"
    breakpoints: list[BreakpointSpec] = Field(default_factory=list)


class BreakpointsBody(BaseModel):
    model_config = _CLOSED
    breakpoints: list[BreakpointSpec]


class UseBody(BaseModel):
    model_config = _CLOSED
    output: Any


class DebugPause(BaseModel):
    kind: Literal["before", "after", "call", "checkpoint", "end"]
    node: str | None = None
    node_path: str | None = None
    step: int | None = None
    call: CallSummary | None = None
    request: Any = None
    recorded_output: Any = None
    state: Any = None
    description: str


class DebugSession(BaseModel):
    session_id: str
    run_id: str | None = None
    status: Literal["paused", "running", "finished", "stopped", "failed"]
    pause: DebugPause | None = None
    breakpoints: list[BreakpointSpec]
    result: dict[str, Any] | None = None
