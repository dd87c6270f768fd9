"""``update_state`` calls made on a recorded graph between runs, kept for the thread's next run.

LangGraph's time travel and forks change a thread's state outside any run:
``update_state(config, values, as_node=...)`` (and ``bulk_update_state``,
``aupdate_state``, ``abulk_update_state``) writes an ``update`` checkpoint,
and the next run continues from it, or from the checkpoint the call
returned. A replay must make the same updates on its own thread before it
re-runs that run, in order, as LangGraph applied them (the values go through
the graph's reducers again, ``as_node`` decides the next tasks again).

A call is not a run, and the tape's events belong to runs: the recorded graph
keeps each call here (:class:`UpdateCall`) until the thread's next run starts,
which stores them as ``state_update`` events (:func:`emit`). Calls with no
run after them are never needed by a replay, and are not stored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from graphtape import events

if TYPE_CHECKING:
    from graphtape.record.session import Session

#: the methods recorded, by name (the async ones are replayed with their async form)
APIS = ("update_state", "aupdate_state", "bulk_update_state", "abulk_update_state")


@dataclasses.dataclass(frozen=True)
class UpdateCall:
    """One call: the checkpoint it was given, its supersteps of ``(values, as_node, task_id)``, and the
    checkpoint it returned."""

    api: str
    checkpoint_id: str | None
    ns: str
    checkpoint_map: dict[str, Any] | None
    supersteps: list[list[tuple[Any, str | None, str | None]]]
    result: str | None

    @classmethod
    def of(cls, api: str, config: dict[str, Any], supersteps: Sequence[Sequence[Any]], out: Any) -> UpdateCall:
        conf = config.get("configurable") or {}
        returned = (out.get("configurable") or {}) if isinstance(out, dict) else {}
        return cls(
            api=api,
            checkpoint_id=conf.get("checkpoint_id"),
            ns=str(conf.get("checkpoint_ns") or ""),
            checkpoint_map=dict(conf["checkpoint_map"]) if isinstance(conf.get("checkpoint_map"), dict) else None,
            supersteps=[[_update(u) for u in superstep] for superstep in supersteps],
            result=returned.get("checkpoint_id"),
        )


def _update(update: Any) -> tuple[Any, str | None, str | None]:
    """A ``StateUpdate`` (or a plain ``(values, as_node[, task_id])`` tuple, which LangGraph also takes)."""
    values, as_node, *rest = tuple(update)
    return values, as_node, rest[0] if rest else None


def emit(session: Session, calls: Sequence[UpdateCall]) -> None:
    """Store ``calls`` as the ``state_update`` events of the run ``session`` starts."""
    for number, call in enumerate(calls):
        for index, superstep in enumerate(call.supersteps):
            for values, as_node, task_id in superstep:
                session.emit(
                    events.StateUpdate(
                        api=call.api,
                        call=number,
                        superstep=index,
                        checkpoint_id=call.checkpoint_id,
                        ns=call.ns or None,
                        checkpoint_map=call.checkpoint_map,
                        values=session.put_json(session.encode(values)),
                        as_node=as_node,
                        task_id=task_id,
                        result=call.result,
                    )
                )
