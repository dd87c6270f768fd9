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

from graphtape.server.studio.schemas import graph_schemas

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
    """A served graph: its name, the compiled graph and the recording wrapper runs go through."""

    graph_id: str
    graph: Any
    recorded: Any
    created_at: str = field(default_factory=now_iso)
    _schemas: dict[str, Any] | None = None

    @property
    def assistant_id(self) -> str:
        return assistant_id_for(self.graph_id)

    def describe(self) -> dict[str, Any]:
        return {
            "assistant_id": self.assistant_id,
            "graph_id": self.graph_id,
            "name": self.graph_id,
            "description": None,
            "config": {},
            "context": {},
            "metadata": {"created_by": "system"},
            "version": 1,
            "created_at": self.created_at,
            "updated_at": self.created_at,
        }

    def structure(self, xray: bool | int = False) -> dict[str, Any]:
        """Nodes and edges (conditional ones flagged) as LangGraph's ``Graph.to_json()`` gives them."""
        return self.graph.get_graph(xray=xray).to_json()

    def schemas(self) -> dict[str, Any]:
        if self._schemas is None:
            self._schemas = {"graph_id": self.graph_id, **graph_schemas(self.graph)}
        return self._schemas


class Assistants:
    """The served graphs, found by assistant id or graph name."""

    def __init__(self, tape: Any, graphs: dict[str, Any]):
        self.entries: dict[str, AssistantEntry] = {}
        for name, graph in graphs.items():
            self.entries[name] = AssistantEntry(name, graph, tape.record(graph, name=name))

    def find(self, assistant_id_or_graph: str) -> AssistantEntry | None:
        if assistant_id_or_graph in self.entries:
            return self.entries[assistant_id_or_graph]
        for entry in self.entries.values():
            if entry.assistant_id == assistant_id_or_graph:
                return entry
        return None

    def all(self) -> list[AssistantEntry]:
        return list(self.entries.values())
