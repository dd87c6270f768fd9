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

from graphtape import events

if TYPE_CHECKING:
    from graphtape.tape import Tape

REASONS = {
    "before_start": "made before the checkpoint the replay started from (those steps were not run again)",
    "replaced": "asked differently now (changed request, override or invalidation), so answered live instead",
    "not_asked": "never asked by the current code (it took another path)",
}


def _site(call: events.CallEvent) -> tuple[Any, ...]:
    # a key left out of the event (null) reads as the site's default
    return (
        call.KIND,
        call.node_path,
        "" if call.branch is None else call.branch,
        0 if call.ordinal is None else call.ordinal,
    )


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
        for row in tape.store.events(rid, [*events.CALL_EVENT_KINDS, events.Checkpoint.KIND]):
            ev = events.parse(row)
            if isinstance(ev, events.Checkpoint):
                if i == 0 and not ev.ns:
                    started_from_input |= ev.source == "input"
                    if isinstance(ev.step, int):
                        first_steps.append(ev.step)
                continue
            if ev.served_from:
                served.add(ev.served_from)
            if ev.source == "live":
                live_sites.add(_site(ev))
    first = tape.store.get_run(result.run_ids[0])
    first_original = first.replay_of if first is not None else None
    # the last step that was not run again: the starting checkpoint's
    start_step = None if started_from_input or not first_steps else min(first_steps) - 1
    counts: dict[str, int] = {}
    before = first_original is not None  # runs of the thread before the first one replayed were not run again
    for run in run_chain(tape, tape.run(result.replay_of)):
        if run.run_id == first_original:
            before = False
        for row in tape.store.events(run.run_id, list(events.CALL_EVENT_KINDS)):
            call = events.parse(row)
            if call.call_id in served:
                continue
            if _site(call) in live_sites:
                reason = "replaced"
            elif before or (
                run.run_id == first_original
                and start_step is not None
                and isinstance(call.step, int)
                and call.step <= start_step
            ):
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
    counts = dict.fromkeys(events.CALL_KINDS, 0)
    tokens = 0
    for row in tape.store.events(run.run_id, list(events.CALL_EVENT_KINDS)):
        call = events.parse(row)
        counts[call.CALL_KIND] += 1
        tokens += int(call.tokens or 0)
    if not any(counts.values()):
        return run
    return dataclasses.replace(
        run,
        llm_calls=counts["llm"],
        tool_calls=counts["tool"],
        effect_calls=counts["effect"],
        tokens=run.tokens or tokens,
    )
