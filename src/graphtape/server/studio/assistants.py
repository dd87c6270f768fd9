"""The assistants: one per served graph, with an id derived from the graph's name.

The LangGraph API calls a configured graph an assistant. ``graphtape dev``
serves one assistant per graph in ``langgraph.json``; its id is a UUID5 of
the graph's name, so it is the same on every start and every machine, and the
graph's name itself is accepted wherever an assistant id is (as the reference
server does).
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field
from typing import Any

from graphtape.recorder import thread_saver
from graphtape.server.studio.schemas import graph_schemas


def _recorded(tape: Any, graph: Any, name: str) -> Any:
    """A served graph, recorded on durable threads: its own checkpointer, else graphtape's saver.

    A client's thread persists across its runs (a chat's turns, the answer to an interrupt), as
    on LangGraph's server, which gives a served graph compiled without a checkpointer its own.
    """
    return tape.record(graph, name=name, checkpointer=thread_saver(tape, graph))


__all__ = ["ASSISTANT_NAMESPACE", "AssistantEntry", "Assistants", "assistant_id_for"]

#: the UUID5 namespace of assistant ids (a fixed UUID, so ids never change)
ASSISTANT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/graphtape/graphtape/assistants")


def assistant_id_for(graph_name: str) -> str:
    """The assistant id of the graph called ``graph_name``."""
    return str(uuid.uuid5(ASSISTANT_NAMESPACE, graph_name))


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


@dataclass
class AssistantEntry:
    """A served graph, or an assistant made on one over HTTP: the graph, the recording wrapper runs
    go through, and (for a made one) its own id, name and the config and context its runs start from."""

    graph_id: str
    graph: Any
    recorded: Any
    created_at: str = field(default_factory=now_iso)
    #: None for the graph's own assistant (its id derives from the graph's name)
    custom_id: str | None = None
    name: str | None = None
    description: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    version: int = 1
    updated_at: str = field(default_factory=now_iso)
    #: why the graph's file failed to load again after an edit (``graphtape dev`` keeps the graph it had)
    load_error: str | None = None
    _schemas: dict[str, Any] | None = None

    @property
    def assistant_id(self) -> str:
        return self.custom_id or assistant_id_for(self.graph_id)

    def describe(self) -> dict[str, Any]:
        system = self.custom_id is None
        return {
            "assistant_id": self.assistant_id,
            "graph_id": self.graph_id,
            "name": self.name or self.graph_id,
            "description": self.description,
            "config": self.config,
            "context": self.context,
            "metadata": ({"created_by": "system"} if system else self.metadata)
            | ({"load_error": self.load_error} if self.load_error else {}),
            "version": self.version,
            "created_at": self.created_at,
            "updated_at": self.created_at if system else self.updated_at,
        }

    def structure(self, xray: bool | int = False) -> dict[str, Any]:
        """Nodes and edges (conditional ones flagged) as LangGraph's ``Graph.to_json()`` gives them."""
        return self.graph.get_graph(xray=xray).to_json()

    def schemas(self) -> dict[str, Any]:
        if self._schemas is None:
            self._schemas = {"graph_id": self.graph_id, **graph_schemas(self.graph)}
        return self._schemas

    def run_config(self, given: dict[str, Any] | None) -> dict[str, Any]:
        """A run's config on this assistant: the assistant's, with the run's on top (``configurable`` merged)."""
        given = dict(given or {})
        merged = {**self.config, **given}
        if isinstance(self.config.get("configurable"), dict) and isinstance(given.get("configurable"), dict):
            merged["configurable"] = {**self.config["configurable"], **given["configurable"]}
        return merged


class Assistants:
    """The served graphs' assistants and the ones made over HTTP, found by id (or graph name)."""

    def __init__(self, tape: Any, graphs: dict[str, Any], store: Any = None):
        self.tape = tape
        #: the LangGraph store given to every served graph compiled without one of its own (``/store``'s)
        self.store = store
        self.entries: dict[str, AssistantEntry] = {}
        for name, graph in graphs.items():
            graph = self._with_store(graph)
            self.entries[name] = AssistantEntry(name, graph, _recorded(tape, graph, name))
        self.custom: dict[str, AssistantEntry] = {}

    def find(self, assistant_id_or_graph: str) -> AssistantEntry | None:
        if assistant_id_or_graph in self.entries:
            return self.entries[assistant_id_or_graph]
        if assistant_id_or_graph in self.custom:
            return self.custom[assistant_id_or_graph]
        for entry in self.entries.values():
            if entry.assistant_id == assistant_id_or_graph:
                return entry
        return None

    def all(self) -> list[AssistantEntry]:
        return [*self.entries.values(), *self.custom.values()]

    def create(self, base: AssistantEntry, assistant_id: str, fields: dict[str, Any]) -> AssistantEntry:
        entry = AssistantEntry(base.graph_id, base.graph, base.recorded, custom_id=assistant_id, **fields)
        self.custom[assistant_id] = entry
        return entry

    def swap(self, graph_id: str, graph: Any | None, *, error: str | None = None) -> AssistantEntry:
        """Serve ``graph`` as ``graph_id`` from now on (``graphtape dev``'s reload), or, with ``graph=None``,
        keep the graph and note ``error`` (why its edited file did not load) in the assistant's metadata.

        Call it on the server's event loop. Runs already started hold the graph they started with and
        finish on it; runs started after this call use the new one. A graph not served yet is added.
        Assistants made over HTTP on the graph follow it, keeping their own config and context.
        """
        entry = self.entries.get(graph_id)
        if graph is None:
            if entry is None:
                raise KeyError(f"no graph {graph_id!r} is served")
            for e in self._on(graph_id):
                e.load_error = error
            return entry
        graph = self._with_store(graph)
        recorded = _recorded(self.tape, graph, graph_id)
        if entry is None:
            entry = self.entries[graph_id] = AssistantEntry(graph_id, graph, recorded)
            return entry
        for e in self._on(graph_id):
            # called on the server's event loop, so no request sees half a swap; a run reads ``recorded``
            # once, when it starts
            e.graph, e.recorded, e._schemas, e.load_error = graph, recorded, None, None
        return entry

    def _with_store(self, graph: Any) -> Any:
        if self.store is None:
            return graph
        from graphtape.store.kv import attach_store

        return attach_store(graph, self.store)

    def _on(self, graph_id: str) -> list[AssistantEntry]:
        return [e for e in self.all() if e.graph_id == graph_id]
