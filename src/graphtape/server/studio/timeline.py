"""A run's timeline, built from its tape events: super-steps, the node tasks of each, the calls of each task.

What a browser draws as a Gantt chart of the run. A step's tasks are the
root-level node tasks (``task_started`` whose namespace has no ``|``); a
subgraph's tasks are the ``subtasks`` of the task that ran the subgraph (nested
as deep as the subgraphs are), and a call belongs to the task that made it
(its ``node_path`` says where, ``analyze/summarize``). A step's
``checkpoint_id`` is the root checkpoint the step wrote and its ``source`` what
wrote it (``input``: the run's input, step -1; ``loop``: a super-step, step 0
being the input applied to the state; ``update`` or ``fork``). The first
:data:`~graphtape.server.studio.call_previews.PREVIEW_LIMIT` calls carry a
``preview`` (what was asked, what came back, the tokens each way). A strict
replay that stopped at a call shows that call with source ``diverged`` in the
task that made it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphtape import events
from graphtape.server.studio.call_previews import PREVIEW_LIMIT, call_preview
from graphtape.server.studio.tape_views import call_summary, error_text

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = ["run_timeline"]


def _owner(tasks: dict[str, dict[str, Any]], ns: str | None) -> dict[str, Any] | None:
    """The deepest task whose namespace holds ``ns`` (a call's task, or the subgraph task around it)."""
    parts = (ns or "").split("|")
    while parts:
        task = tasks.get("|".join(parts))
        if task is not None:
            return task
        parts.pop()
    return None


def run_timeline(tape: Tape, run_id: str) -> dict[str, Any]:
    """The timeline of a run (id or unique prefix); see the module docstring."""
    run = tape.run(run_id)
    tasks: dict[str, dict[str, Any]] = {}
    step_of_task: dict[str, int | None] = {}
    checkpoints: dict[int | None, tuple[str, str | None]] = {}
    previews = 0
    loose: list[dict[str, Any]] = []
    loose_tasks: list[dict[str, Any]] = []
    for row in tape.store.events(run.run_id):
        ev = events.parse(row)
        if isinstance(ev, events.TaskStarted):
            ns = ev.task or ""
            node_path = str(ev.node_path or "?")
            task: dict[str, Any] = {
                "task_id": ns.rpartition(":")[2] or ns,
                "node": node_path.split("/")[-1],
                "node_path": node_path,
                "started_at": row.ts,
                "ended_at": None,
                "status": "running",
                "error": None,
                "calls": [],
                "subtasks": [],
            }
            tasks[ns] = task
            if "|" in ns:  # a subgraph's task: nested under the task that ran its subgraph
                parent = _owner(tasks, ns.rpartition("|")[0])
                (parent["subtasks"] if parent is not None else loose_tasks).append(task)
            else:
                step_of_task[ns] = ev.step
        elif isinstance(ev, (events.TaskFinished, events.TaskFailed, events.TaskInterrupted)):
            ended = tasks.get(ev.task or "")
            if ended is None:
                continue
            ended["ended_at"] = row.ts
            if isinstance(ev, events.TaskFailed):
                ended["status"], ended["error"] = "failed", error_text(ev.error)
            elif isinstance(ev, events.TaskInterrupted):
                ended["status"] = "interrupted"
            else:
                ended["status"] = "finished"
        elif isinstance(ev, events.CallEvent):
            owner = _owner(tasks, ev.task)
            summary = call_summary(run, row)
            if previews < PREVIEW_LIMIT:
                summary["preview"] = call_preview(tape, row)
                previews += 1
            (owner["calls"] if owner is not None else loose).append(summary)
        elif isinstance(ev, events.Checkpoint) and not ev.ns and ev.checkpoint_id:
            checkpoints[ev.step] = (ev.checkpoint_id, ev.source)
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
        if "|" in ns:
            continue  # nested in its parent task
        by_step.setdefault(step_of_task[ns], []).append(task)
    numbered = sorted({s for s in [*by_step, *checkpoints] if s is not None})
    steps = [
        {
            "step": s,
            "checkpoint_id": checkpoints[s][0] if s in checkpoints else None,
            "source": checkpoints[s][1] if s in checkpoints else None,
            "tasks": by_step.get(s, []),
        }
        for s in numbered
    ]
    stray = by_step.get(None, []) + loose_tasks
    if stray or loose:
        calls_only = (
            [{"task_id": "", "node": "", "node_path": "", "status": "finished", "calls": loose, "subtasks": []}]
            if loose
            else []
        )
        steps.append({"step": None, "checkpoint_id": None, "source": None, "tasks": stray + calls_only})
    return {"run_id": run.run_id, "started_at": run.started_at, "ended_at": run.ended_at, "steps": steps}
