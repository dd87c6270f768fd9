"""Why recorded calls went unused in a replay, so that a count of them does not read like an error.

A replay consumes the recorded calls of the whole thread up to the target
run; some are never served, for reasons that are all expected:

* ``before_start``: the replay started from a checkpoint (``--from-checkpoint``,
  a fork, an override), and the steps before it were not run again;
* ``replaced``: the same call site asked something else (a changed prompt,
  an override's consequence, an invalidated node) and was answered live;
* ``not_asked``: the current code never made the call (it took another path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphtape.tape import Tape

CALL_KINDS = ["llm_call", "tool_call", "effect_call"]

REASONS = {
    "before_start": "made before the checkpoint the replay started from (those steps were not run again)",
    "replaced": "asked differently now (changed request, override or invalidation), so answered live instead",
    "not_asked": "never asked by the current code (it took another path)",
}


def _site(kind: str, d: dict[str, Any]) -> tuple[Any, ...]:
    return (kind, d.get("node_path"), d.get("branch", ""), d.get("ordinal", 0))


def unused_reasons(tape: Tape, result: Any) -> dict[str, int]:
    """``{reason: count}`` of the recorded calls a replay did not serve (see the module docstring)."""
    from graphtape.replay.engine import run_chain

    if not getattr(result, "unused", 0) or not result.run_ids or not result.run_ids[0]:
        return {}
    served: set[str] = set()
    live_sites: set[tuple[Any, ...]] = set()
    first_steps: list[int] = []
    started_from_input = False
    for i, rid in enumerate(result.run_ids):
        for ev in tape.store.events(rid, [*CALL_KINDS, "checkpoint"]):
            d = ev.data
            if ev.kind == "checkpoint":
                if i == 0 and not d.get("ns"):
                    started_from_input |= d.get("source") == "input"
                    if isinstance(d.get("step"), int):
                        first_steps.append(d["step"])
                continue
            if d.get("served_from"):
                served.add(d["served_from"])
            if d.get("source") == "live":
                live_sites.add(_site(ev.kind, d))
    first = tape.store.get_run(result.run_ids[0])
    first_original = first.replay_of if first is not None else None
    # the last step that was not run again: the starting checkpoint's
    start_step = None if started_from_input or not first_steps else min(first_steps) - 1
    counts: dict[str, int] = {}
    before = first_original is not None  # runs of the thread before the first one replayed were not run again
    for run in run_chain(tape, tape.run(result.replay_of)):
        if run.run_id == first_original:
            before = False
        for ev in tape.store.events(run.run_id, CALL_KINDS):
            d = ev.data
            if d.get("call_id") in served:
                continue
            if _site(ev.kind, d) in live_sites:
                reason = "replaced"
            elif before or (run.run_id == first_original and start_step is not None
                            and isinstance(d.get("step"), int) and d["step"] <= start_step):
                reason = "before_start"
            else:
                reason = "not_asked"
            counts[reason] = counts.get(reason, 0) + 1
    return counts


def counted_calls(tape: Tape, run: Any) -> Any:
    """``run`` with its call counts and tokens counted from its call events when its row has none.

    A run's row gets its counters when the run ends; a run whose process died
    (``running`` with a dead lease, or ``crashed`` once recovered) never got
    them, although its completed calls are on the tape (and are what a
    recovery serves). Rows that have counters are returned unchanged.
    """
    import dataclasses

    if run.status not in ("running", "crashed") or run.llm_calls or run.tool_calls or run.effect_calls:
        return run
    counts = {"llm_call": 0, "tool_call": 0, "effect_call": 0}
    tokens = 0
    for ev in tape.store.events(run.run_id, CALL_KINDS):
        counts[ev.kind] += 1
        tokens += int(ev.data.get("tokens") or 0)
    if not any(counts.values()):
        return run
    return dataclasses.replace(run, llm_calls=counts["llm_call"], tool_calls=counts["tool_call"],
                               effect_calls=counts["effect_call"], tokens=run.tokens or tokens)
