"""Logic injection: fork with an edited state, override a recorded output, invalidate from a node.

All three are replays (``replay/engine.py``) in a new thread with a twist in
what the tape serves, so the original run is never modified:

* **fork**: start from any checkpoint, change the state there (validated
  against the state schema), continue in strict, flight or live mode;
* **override**: serve a different output for one recorded call; calls
  before it come from the tape, later ones follow the mode (in strict mode a
  later call whose request changed because of the override is a divergence:
  that is the point of strict);
* **invalidate from a node**: everything from the first execution of that
  node on runs live; everything before it is served.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, cast

from langchain_core.messages import AIMessage, BaseMessage

from graphtape import events, serde
from graphtape.errors import ReplayError, RunNotFound
from graphtape.replay.engine import ReplayResult, areplay, replay, run_chain

if TYPE_CHECKING:
    from graphtape.replay.matcher import RecordedCall
    from graphtape.tape import Tape


def find_checkpoint(tape: Tape, checkpoint_id: str, run_id: str | None = None) -> tuple[str, events.Checkpoint]:
    """``(run_id, checkpoint event)`` of a checkpoint (exact id or unique prefix of 8+ characters)."""
    runs = run_chain(tape, tape.run(run_id)) if run_id else tape.store.list_runs(limit=None)
    matches: dict[str, tuple[str, events.Checkpoint]] = {}
    for run in runs:
        for row in tape.store.events(run.run_id, [events.Checkpoint.KIND]):
            ev = events.Checkpoint.from_row(row)
            cid = ev.checkpoint_id or ""
            if cid == checkpoint_id:
                return run.run_id, ev
            if len(checkpoint_id) >= 8 and cid.startswith(checkpoint_id):
                matches.setdefault(cid, (run.run_id, ev))
    if len(matches) == 1:
        return next(iter(matches.values()))
    if len(matches) > 1:
        raise RunNotFound(f"checkpoint prefix {checkpoint_id!r} is ambiguous; give more characters")
    raise RunNotFound(f"no checkpoint {checkpoint_id!r} on the tape; list them with `graphtape history RUN`")


def fork(
    tape: Tape,
    checkpoint_id: str,
    graph: Any,
    *,
    values: dict[str, Any] | None = None,
    as_node: str | None = None,
    mode: str = "flight",
    allow_live_effects: bool = False,
    run_id: str | None = None,
    new_run_id: str | None = None,
    _runner: Any = replay,
) -> ReplayResult:
    owner, event = find_checkpoint(tape, checkpoint_id, run_id)
    if event.ns:
        raise ReplayError("fork from a checkpoint of the root graph (this one belongs to a subgraph)")
    if values is not None:
        from graphtape.debug.edit import check_edit

        # before the replay copies the checkpoint into a new thread: a rejected edit writes nothing
        check_edit(getattr(graph, "original", graph), values, as_node)
    return _runner(
        tape,
        owner,
        graph,
        mode=mode,
        allow_live_effects=allow_live_effects,
        from_checkpoint=event.checkpoint_id,
        edit=values,
        as_node=as_node,
        meta={"fork_of": event.checkpoint_id, **({"edit": serde.to_jsonable(values)} if values else {})},
        new_run_id=new_run_id,
    )


def find_call(tape: Tape, call_id: str, run_id: str | None = None) -> RecordedCall:
    runs = run_chain(tape, tape.run(run_id)) if run_id else tape.store.list_runs(limit=None)
    prefix = [c for r in runs for c in tape.calls(r.run_id) if c.call_id.startswith(call_id)]
    exact = [c for c in prefix if c.call_id == call_id]
    if exact:
        return exact[0]
    if len(prefix) == 1 and len(call_id) >= 6:
        return prefix[0]
    if len(prefix) > 1:
        raise RunNotFound(f"call id prefix {call_id!r} is ambiguous; give more characters")
    raise RunNotFound(
        f"no call {call_id!r} on the tape; `graphtape show RUN` prints each call with its id "
        "(#1a2b3c4d; any unique prefix of 6+ characters works)"
    )


def override_envelope(call: RecordedCall, output: Any) -> dict[str, Any]:
    """The override as the tape would have stored the call's result."""
    if call.kind == "llm":
        if isinstance(output, BaseMessage):
            msg = output
        elif isinstance(output, str):
            msg = AIMessage(content=output)
        elif isinstance(output, dict):
            msg = AIMessage(**output)
        else:
            raise ReplayError("an LLM override is a string (the answer's text) or a dict of AIMessage fields")
        return serde.encode_value([msg])
    return serde.encode_value(output)


def override(
    tape: Tape,
    run_id: str,
    call_id: str,
    output: Any,
    graph: Any,
    *,
    mode: str = "flight",
    allow_live_effects: bool = False,
    from_start: bool = False,
    new_run_id: str | None = None,
    _runner: Any = replay,
) -> ReplayResult:
    call = find_call(tape, call_id, run_id)
    checkpoint = None
    if not from_start and "/" not in call.node_path and call.step is not None:
        for ev in map(events.Checkpoint.from_row, tape.store.events(call.run_id, [events.Checkpoint.KIND])):
            if not ev.ns and ev.step == call.step - 1:
                checkpoint = ev.checkpoint_id
    return _runner(
        tape,
        call.run_id,
        graph,
        mode=mode,
        allow_live_effects=allow_live_effects,
        overrides={call.call_id: override_envelope(call, output)},
        from_checkpoint=checkpoint,
        meta={"override_of": call.call_id},
        new_run_id=new_run_id,
    )


def invalidate_from(
    tape: Tape,
    run_id: str,
    node: str,
    graph: Any,
    *,
    allow_live_effects: bool = False,
    new_run_id: str | None = None,
    _runner: Any = replay,
) -> ReplayResult:
    chain = run_chain(tape, tape.run(run_id))
    live: set[str] = set()
    found = False
    for run in chain:
        for row in tape.store.events(run.run_id, [events.TaskStarted.KIND, *events.CALL_EVENT_KINDS]):
            ev = events.parse(row)
            if not found and isinstance(ev, events.TaskStarted):
                path = ev.node_path or ""
                if path == node or path.split("/")[-1] == node:
                    found = True
            if found and isinstance(ev, events.CallEvent) and ev.call_id is not None:
                live.add(ev.call_id)
    if not found:
        raise ReplayError(f"node {node!r} never ran in run {chain[-1].run_id} or the runs before it on its thread")
    return _runner(
        tape,
        chain[-1].run_id,
        graph,
        mode="flight",
        allow_live_effects=allow_live_effects,
        live_from=live,
        meta={"invalidate_from": node},
        new_run_id=new_run_id,
    )


# -- in the caller's event loop: the same preparation, the replay awaited (engine.areplay) ----------


async def afork(tape: Tape, checkpoint_id: str, graph: Any, **kwargs: Any) -> ReplayResult:
    """:func:`fork` in the running event loop."""
    return await cast(Awaitable[ReplayResult], fork(tape, checkpoint_id, graph, _runner=areplay, **kwargs))


async def aoverride(tape: Tape, run_id: str, call_id: str, output: Any, graph: Any, **kwargs: Any) -> ReplayResult:
    """:func:`override` in the running event loop."""
    pending = override(tape, run_id, call_id, output, graph, _runner=areplay, **kwargs)
    return await cast(Awaitable[ReplayResult], pending)


async def ainvalidate_from(tape: Tape, run_id: str, node: str, graph: Any, **kwargs: Any) -> ReplayResult:
    """:func:`invalidate_from` in the running event loop."""
    pending = invalidate_from(tape, run_id, node, graph, _runner=areplay, **kwargs)
    return await cast(Awaitable[ReplayResult], pending)
