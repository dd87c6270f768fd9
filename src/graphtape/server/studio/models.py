"""The request and response bodies of the Studio API, as pydantic models (the OpenAPI document is built from them).

Field names and shapes follow the LangGraph API that ``langgraph-sdk``
speaks. Requests ignore fields this server does not act on yet (``webhook``,
``after_seconds``, ...) rather than refusing them, so existing clients work;
responses allow extra keys for the same reason.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from graphtape.server.studio.bounds import MAX_POSITION

__all__ = [
    "Assistant",
    "AssistantCreate",
    "AssistantPatch",
    "AssistantSearch",
    "Checkpoint",
    "CommandBody",
    "ErrorBody",
    "GraphSchemas",
    "GraphStructure",
    "HistoryRequest",
    "Run",
    "RunCreate",
    "RunsCancel",
    "SelectedThread",
    "ServerInfo",
    "StateAtCheckpoint",
    "Thread",
    "ThreadCount",
    "ThreadCreate",
    "ThreadPatch",
    "ThreadSearch",
    "ThreadState",
    "ThreadStateUpdate",
    "UpdateStateResponse",
]

RunStatus = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
StreamMode = Literal[
    "values", "updates", "messages", "messages-tuple", "custom", "debug", "tasks", "checkpoints", "events"
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Response(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    """Every error: what went wrong and what to do about it."""

    error: str = Field(description="the message, saying what to fix")
    detail: str = Field(description="the same message, where LangGraph clients look for it")
    status: int


class ServerInfo(_Response):
    version: str
    flags: dict[str, bool] = {}
    graphtape: dict[str, Any] = {}


class Assistant(_Response):
    assistant_id: str
    graph_id: str
    name: str
    description: str | None = None
    config: dict[str, Any] = {}
    context: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    version: int = 1
    created_at: str
    updated_at: str


class AssistantCreate(_Request):
    graph_id: str = Field(description="the name of a served graph")
    assistant_id: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"
    name: str | None = None
    description: str | None = None


class AssistantPatch(_Request):
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = Field(None, description="merged into the assistant's metadata")
    name: str | None = None
    description: str | None = None


class AssistantSearch(_Request):
    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(10, ge=0, le=1000)
    offset: int = Field(0, ge=0, le=MAX_POSITION)


class GraphStructure(_Response):
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]


class GraphSchemas(_Response):
    graph_id: str
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    state_schema: dict[str, Any] | None = None
    context_schema: dict[str, Any] | None = None
    config_schema: dict[str, Any] | None = None


class Thread(_Response):
    thread_id: str
    created_at: str
    updated_at: str
    state_updated_at: str | None = Field(None, description="when the thread's latest checkpoint was written")
    metadata: dict[str, Any] = {}
    status: ThreadStatus = "idle"
    config: dict[str, Any] = {}
    values: Any = Field(None, description="the values of the thread's latest checkpoint")
    interrupts: dict[str, Any] = Field({}, description="the pending interrupts by task id: [{id, value}]")
    error: dict[str, Any] | None = Field(None, description="{error, message} of the last run, when it failed")


class SelectedThread(_Response):
    """A thread as ``POST /threads/search`` answers it: every field of a thread, or those ``select`` names."""

    thread_id: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    state_updated_at: str | None = None
    metadata: dict[str, Any] | None = None
    status: ThreadStatus | None = None
    config: dict[str, Any] | None = None
    values: Any = None
    interrupts: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


#: the fields ``POST /threads/search`` can ``select`` (LangGraph's, ``context`` as the SDK names it, ``error``)
ThreadField = Literal[
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "config",
    "context",
    "status",
    "values",
    "interrupts",
    "error",
]


#: what ``POST /threads/search`` sorts by (LangGraph's ``sort_by``)
ThreadSortBy = Literal["thread_id", "status", "created_at", "updated_at", "state_updated_at"]


class ThreadCreate(_Request):
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] = "raise"
    graph_id: str | None = None


class ThreadPatch(_Request):
    metadata: dict[str, Any] = Field(default_factory=dict, description="merged into the thread's metadata")


class ThreadCount(_Request):
    metadata: dict[str, Any] | None = None
    status: ThreadStatus | None = None


class ThreadSearch(_Request):
    metadata: dict[str, Any] | None = None
    status: ThreadStatus | None = None
    ids: list[str] | None = None
    limit: int = Field(10, ge=0, le=1000)
    offset: int = Field(0, ge=0, le=MAX_POSITION)
    sort_by: ThreadSortBy | None = Field(None, description="the field to sort by (updated_at when not given)")
    sort_order: Literal["asc", "desc"] | None = Field(None, description="desc (newest, or last, first) when not given")
    select: list[ThreadField] | None = Field(None, description="the fields to answer (all when not given)")


class Checkpoint(_Response):
    thread_id: str
    checkpoint_ns: str = ""
    checkpoint_id: str | None = None
    checkpoint_map: dict[str, Any] | None = None


class ThreadState(_Response):
    values: Any
    next: list[str]
    checkpoint: Checkpoint | None
    metadata: dict[str, Any] | None
    created_at: str | None
    parent_checkpoint: Checkpoint | None
    tasks: list[dict[str, Any]]
    interrupts: list[dict[str, Any]] = []


class StateAtCheckpoint(_Request):
    checkpoint: dict[str, Any]
    subgraphs: bool = False


class ThreadStateUpdate(_Request):
    values: dict[str, Any] | list[Any] | None = None
    as_node: str | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None


class UpdateStateResponse(_Response):
    checkpoint: Checkpoint


class HistoryRequest(_Request):
    limit: int = Field(10, ge=1, le=1000)
    before: dict[str, Any] | str | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None


class CommandBody(_Request):
    resume: Any = None
    update: dict[str, Any] | list[Any] | None = None
    goto: Any = None


class RunCreate(_Request):
    """A run to start on a thread (the body of ``runs.create``/``stream``/``wait``)."""

    assistant_id: str = Field(description="an assistant id from /assistants/search, or a graph name")
    input: Any = None
    command: CommandBody | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    interrupt_before: list[str] | Literal["*"] | None = None
    interrupt_after: list[str] | Literal["*"] | None = None
    stream_mode: list[StreamMode] | StreamMode = "values"
    stream_subgraphs: bool = False
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] = "reject"
    if_not_exists: Literal["create", "reject"] = "reject"
    on_completion: Literal["delete", "keep"] = Field(
        "delete", description="stateless runs: drop the temporary thread from the API when done, or keep it"
    )


class RunsCancel(_Request):
    """Which runs to cancel: a thread's (all, or the listed ids), or every run with a status."""

    thread_id: str | None = None
    run_ids: list[str] | None = None
    status: Literal["pending", "running", "all"] | None = None


class Run(_Response):
    run_id: str
    thread_id: str
    assistant_id: str
    created_at: str
    updated_at: str
    status: RunStatus
    metadata: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    multitask_strategy: str = "reject"
