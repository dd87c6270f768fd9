"""A run's timeline, built from its tape events: super-steps, the node tasks of each, the calls of each task.

What a browser draws as a Gantt chart of the run. A task is a root-level node
task (``task_started`` whose namespace has no ``|``); calls made inside a
subgraph belong to the root task that ran the subgraph (their ``node_path``
says where exactly). A step's ``checkpoint_id`` is the root checkpoint the step
wrote. A strict replay that stopped at a call shows that call with source
``diverged`` in the task that made it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphtape import events
from graphtape.server.studio.tape_views import call_summary, error_text

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = ["run_timeline"]


def _root_task(ns: str | None) -> str:
    return (ns or "").split("|", 1)[0]


def run_timeline(tape: Tape, run_id: str) -> dict[str, Any]:
    """The timeline of a run (id or unique prefix); see the module docstring."""
    run = tape.run(run_id)
    tasks: dict[str, dict[str, Any]] = {}
    step_of_task: dict[str, int | None] = {}
    checkpoints: dict[int | None, str] = {}
    loose: list[dict[str, Any]] = []
    for row in tape.store.events(run.run_id):
        ev = events.parse(row)
        if isinstance(ev, events.TaskStarted):
            ns = ev.task or ""
            if "|" in ns:
                continue  # a subgraph's task: its calls go to the root task
            node_path = str(ev.node_path or "?")
            tasks[ns] = {
                "task_id": ns.rpartition(":")[2] or ns,
                "node": node_path.split("/")[-1],
                "node_path": node_path,
                "started_at": row.ts,
                "ended_at": None,
                "status": "running",
                "error": None,
                "calls": [],
            }
            step_of_task[ns] = ev.step
        elif isinstance(ev, (events.TaskFinished, events.TaskFailed, events.TaskInterrupted)):
            task = tasks.get(ev.task or "")
            if task is None:
                continue
            task["ended_at"] = row.ts
            if isinstance(ev, events.TaskFailed):
                task["status"], task["error"] = "failed", error_text(ev.error)
            elif isinstance(ev, events.TaskInterrupted):
                task["status"] = "interrupted"
            else:
                task["status"] = "finished"
        elif isinstance(ev, events.CallEvent):
            owner = tasks.get(_root_task(ev.task))
            (owner["calls"] if owner is not None else loose).append(call_summary(run, row))
        elif isinstance(ev, events.Checkpoint) and not ev.ns and ev.checkpoint_id:
            checkpoints[ev.step] = ev.checkpoint_id
        elif isinstance(ev, events.Divergence) and ev.kind in events.CALL_KINDS:
            owner = next((t for t in reversed(tasks.values()) if t["node_path"] == ev.node_path), None)
            diverged = {
                "call_id": ev.recorded_call_id,
                "kind": ev.kind,
                "name": ev.name,
                "node_path": ev.node_path,
                "started_at": row.ts,
                "ended_at": row.ts,
                "duration": 0.0,
                "source": "diverged",
                "tokens": None,
                "cost": None,
                "error": f"Divergence: {ev.reason or ev.message}",
            }
            (owner["calls"] if owner is not None else loose).append(diverged)
    by_step: dict[int | None, list[dict[str, Any]]] = {}
    for ns, task in tasks.items():
        by_step.setdefault(step_of_task[ns], []).append(task)
    numbered = sorted({s for s in [*by_step, *checkpoints] if s is not None})
    steps = [{"step": s, "checkpoint_id": checkpoints.get(s), "tasks": by_step.get(s, [])} for s in numbered]
    stray = by_step.get(None, [])
    if stray or loose:
        calls_only = (
            [{"task_id": "", "node": "", "node_path": "", "status": "finished", "calls": loose}] if loose else []
        )
        steps.append({"step": None, "checkpoint_id": None, "tasks": stray + calls_only})
    return {"run_id": run.run_id, "started_at": run.started_at, "ended_at": run.ended_at, "steps": steps}
