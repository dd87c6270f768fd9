"""A LangGraph ``StateSnapshot`` as the LangGraph API sends it (``GET /threads/{id}/state``, history)."""

from __future__ import annotations

from typing import Any

from graphtape.server.studio.wire import to_wire

__all__ = ["checkpoint_of", "empty_state", "state_body"]


def checkpoint_of(config: Any) -> dict[str, Any] | None:
    """The ``checkpoint`` object (thread id, namespace, checkpoint id) of a checkpoint's config."""
    if not config:
        return None
    conf = config.get("configurable") or {}
    if "thread_id" not in conf:
        return None
    return {
        "thread_id": str(conf["thread_id"]),
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "checkpoint_id": conf.get("checkpoint_id"),
        "checkpoint_map": to_wire(conf.get("checkpoint_map")),
    }


def _task(task: Any) -> dict[str, Any]:
    return {
        "id": task.id,
        "name": task.name,
        "path": to_wire(getattr(task, "path", ())),
        "error": None if task.error is None else f"{type(task.error).__name__}: {task.error}",
        "interrupts": to_wire(list(task.interrupts)),
        "checkpoint": checkpoint_of(task.state) if isinstance(task.state, dict) else None,
        "state": state_body(task.state) if task.state is not None and not isinstance(task.state, dict) else None,
        "result": to_wire(getattr(task, "result", None)),
    }


def state_body(snap: Any) -> dict[str, Any]:
    """The JSON body of one state (``values``, ``next``, ``tasks``, ``checkpoint``, ``interrupts``...)."""
    return {
        "values": to_wire(snap.values),
        "next": list(snap.next),
        "checkpoint": checkpoint_of(snap.config),
        "metadata": to_wire(snap.metadata),
        "created_at": snap.created_at,
        "parent_checkpoint": checkpoint_of(snap.parent_config),
        "tasks": [_task(t) for t in snap.tasks],
        "interrupts": to_wire(list(getattr(snap, "interrupts", ()))),
    }


def empty_state(thread_id: str) -> dict[str, Any]:
    """The state of a thread no run has written to yet."""
    return {
        "values": {},
        "next": [],
        "checkpoint": None,
        "metadata": None,
        "created_at": None,
        "parent_checkpoint": None,
        "tasks": [],
        "interrupts": [],
    }
