"""Crash recovery: finish the runs a dead process left behind, without repeating anything.

A run whose process died (SIGKILL, OOM, lost host) stays ``running`` on the
tape and its thread's lease expires. :func:`recover` finds such runs and
resumes each from its thread's last checkpoint as a new run (mode
``recover``, ``meta.recovers`` naming the crashed one):

* the node that was cut off runs again, but every LLM, tool and effect call
  it had **completed** (safe on the tape as each call returns with
  graphtape's own saver: written, or appended to the run's call journal,
  which the store reads in when the lease is found free) is served from the
  tape: the model is not asked
  again, the e-mail is not sent again;
* an effect with an idempotency key that had **started** but not reported
  back is in doubt: it is never run again blindly: its ``reconcile``
  function decides, or recovery stops with ``EffectInDoubt``;
* everything after the crash point runs live and is recorded.

A recovery that itself crashes is recovered in turn, serving the calls of
every run in the chain.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphtape import events, serde
from graphtape.errors import EffectInDoubt
from graphtape.record.answer import Decision, ReplayPlan
from graphtape.record.effect import NOT_DONE, reconcilers
from graphtape.recorder import NO_CHECKPOINTER_META, thread_saver
from graphtape.replay.answerer import TapeAnswerer
from graphtape.replay.matcher import Matcher
from graphtape.runtime.lease import lease_name
from graphtape.store.base import RunRecord, WriteBatch

if TYPE_CHECKING:
    from graphtape.record.session import Call, Session
    from graphtape.tape import Tape


class RecoveryAnswerer(TapeAnswerer):
    """Serves what the crashed runs completed; runs the rest live; never runs an in-doubt effect twice."""

    def __init__(self, matcher: Matcher, recovery_runs: list[str]):
        super().__init__(matcher, "recover", allow_live_effects=True)
        #: the crashed run and the runs it was itself recovering, whose effect intents are honoured
        self.recovery_runs = list(recovery_runs)

    def answer(self, session: Session, call: Call, request: dict[str, Any]) -> Decision:
        rec = self.matcher.take(call.site, call.fingerprint)
        if rec is None and call.site.kind == "effect" and call.summary.get("idempotency_key"):
            decided = self._in_doubt(session, call)
            if decided is not None:
                return decided
        return self.judge(session, call, request, rec)

    def _in_doubt(self, session: Session, call: Call) -> Decision | None:
        """An effect that started before a crash and never reported back: never run it twice."""
        key = call.summary["idempotency_key"]
        name = call.summary.get("name")
        started = any(
            ev.idempotency_key == key and ev.name == name
            for rid in self.recovery_runs
            for ev in map(events.EffectStarted.from_row, session.store.events(rid, [events.EffectStarted.KIND]))
        )
        if not started:
            return None
        reconcile = reconcilers.get(name) if name is not None else None
        if reconcile is None:
            raise EffectInDoubt(
                f"effect {name} with idempotency key {key!r} started before a crash and never finished; "
                "graphtape will not run it twice: check the outside world, then give the effect a "
                "reconcile= function (or re-run the thread by hand)"
            )
        result = reconcile(key)
        if result is NOT_DONE:
            return None
        return Decision.reconciled(result)


@dataclasses.dataclass
class Recovery:
    """What recovering one crashed run did."""

    crashed_run_id: str
    run_id: str | None
    thread_id: str
    status: str
    served: int = 0
    live: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def stopped_by_user(run: RunRecord) -> bool:
    """Whether a run was stopped by Ctrl-C (or cancelled) and not continued yet.

    Such a run is ``interrupted`` (it did not fail) with ``meta.stopped_by``;
    unlike a run paused at an ``interrupt()``, it waits for nobody's answer,
    so :func:`recover` continues it as it does a crashed run. Replays are not
    continued this way: running the replay again is how to finish one.
    """
    meta = run.meta or {}
    return (
        run.status == "interrupted"
        and bool(meta.get("stopped_by"))
        and not meta.get("recovered_by")
        and run.mode in ("record", "recover")
    )


def crashed_update(store: Any, run: RunRecord) -> dict[str, Any]:
    """The run row's update that closes ``run`` as ``crashed``, with the counts its session never wrote.

    A session writes its call counts and tokens when its run ends, which a
    killed process never reaches: summed here from the calls on the tape, by
    the session's own rule (``served_calls`` / ``live_calls`` count only in a
    run that answers calls from a tape, as a recovery does; a recording's
    calls are all live by definition, and it keeps both at 0).
    """
    rows = store.events(run.run_id, list(events.CALL_EVENT_KINDS))
    calls = [events.parse(row) for row in rows]
    counts = dict.fromkeys(events.CALL_KINDS, 0)
    for call in calls:
        counts[call.CALL_KIND] += 1
    update: dict[str, Any] = {
        "status": "crashed",
        "llm_calls": counts["llm"],
        "tool_calls": counts["tool"],
        "effect_calls": counts["effect"],
        "tokens": sum(int(call.tokens or 0) for call in calls),
    }
    if run.mode != "record":
        stats = events.replay_stats(calls)
        update["served_calls"], update["live_calls"] = stats.served, stats.live
    return update


def orphaned_runs(tape: Tape) -> list[RunRecord]:
    """Runs to finish: still ``running`` with nobody holding their thread (their process is gone),
    or stopped by Ctrl-C while they were the newest run of their thread."""
    out = []
    for run in tape.store.list_runs(status="running", limit=None, newest_first=False):
        if tape.store.lease_holder(lease_name(run.thread_id)) is None:
            out.append(run)
    for run in tape.store.list_runs(status="interrupted", limit=None, newest_first=False):
        if stopped_by_user(run) and tape.store.lease_holder(lease_name(run.thread_id)) is None:
            newest = tape.store.list_runs(thread_id=run.thread_id, limit=1)
            if newest and newest[0].run_id == run.run_id:
                out.append(run)
    out.sort(key=lambda r: r.started_at)
    return out


def held_runs(tape: Tape) -> list[tuple[RunRecord, str, float]]:
    """``(run, lease owner, lease expiry)`` of runs marked ``running`` whose thread's lease is held.

    Either a live process is running them, or their process died less than a
    lease time-to-live ago: :func:`recover` leaves them alone until the lease expires.
    """
    out = []
    for run in tape.store.list_runs(status="running", limit=None, newest_first=False):
        holder = tape.store.lease_holder(lease_name(run.thread_id))
        if holder is not None:
            out.append((run, holder[0], holder[1]))
    return out


def recovery_chain(tape: Tape, run: RunRecord) -> list[str]:
    """The crashed run and the runs it was itself recovering, newest first."""
    chain = [run.run_id]
    cur = run
    while (cur.meta or {}).get("recovers"):
        prev = tape.store.get_run(cur.meta["recovers"])
        if prev is None or prev.run_id in chain:
            break
        chain.append(prev.run_id)
        cur = prev
    return chain


def recover(
    tape: Tape,
    graph: Any | Callable[[RunRecord], Any],
    *,
    run_id: str | None = None,
    progress: Callable[[RunRecord], None] | None = None,
) -> list[Recovery]:
    """Recover every orphaned run (or just ``run_id``) with ``graph``.

    ``graph`` is the compiled graph, or a function from the crashed run to
    its graph (the CLI loads the graph named on the run).
    """
    runs = orphaned_runs(tape)
    if run_id is not None:
        target = tape.run(run_id)
        runs = [r for r in runs if r.run_id == target.run_id]
    results = []
    for run in runs:
        if progress is not None:
            progress(run)
        g = graph(run) if callable(graph) and not hasattr(graph, "invoke") else graph
        results.append(_recover_one(tape, run, g))
    return results


def _recover_one(tape: Tape, run: RunRecord, graph: Any) -> Recovery:
    store = tape.store
    chain = recovery_chain(tape, run)
    rows = store.events(run.run_id, [events.RunStarted.KIND])
    started = events.RunStarted.from_row(rows[0]) if rows else None
    config_ref = started.config if started is not None else None
    recorded_config = store.get_json(config_ref) if isinstance(config_ref, str) else {}
    config: dict[str, Any] = {"configurable": {"thread_id": run.thread_id}}
    for key, value in (recorded_config.get("configurable") or {}).items():
        if key not in ("thread_id", "checkpoint_id", "checkpoint_ns") and value != serde.REDACTED:
            config["configurable"][key] = value
    if "recursion_limit" in recorded_config:
        config["recursion_limit"] = recorded_config["recursion_limit"]

    # Continue from the last checkpoint; if the run wrote none (it died while
    # starting), give it its input again.
    wrote_checkpoint = bool(store.events(run.run_id, [events.Checkpoint.KIND]))
    run_input: Any = None
    if not wrote_checkpoint and started is not None and started.input is not None:
        from graphtape.typepolicy import TypePolicy

        # (a graph without a checkpointer may have been given a value stored only as its repr)
        run_input = serde.decode_value(
            store.get_json(started.input),
            store.get_json,
            TypePolicy.for_graph(graph, tape.types),
            opaque=bool((run.meta or {}).get(NO_CHECKPOINTER_META)),
        )

    # The crashed run is closed first, so that a recovery that crashes in turn
    # is the one picked up next time (and serves this run's calls too).
    if run.status == "running":  # a run stopped by Ctrl-C keeps ``interrupted``; ``recovered_by`` marks it done
        store.write(WriteBatch(run_updates=[(run.run_id, crashed_update(store, run))]))
    matcher = Matcher.from_store(store, list(reversed(chain)))
    # on the thread it crashed on, whatever the graph was compiled with (a run of a graph without a
    # checkpointer ran on a thread of its own, whose checkpoints may hold placeholders)
    no_checkpointer = bool((run.meta or {}).get(NO_CHECKPOINTER_META))
    recorder = tape.record(graph, name=run.graph, checkpointer=thread_saver(tape, graph, opaque=no_checkpointer))
    meta: dict[str, Any] = {"recovers": run.run_id, **({NO_CHECKPOINTER_META: True} if no_checkpointer else {})}
    recorder.plan = ReplayPlan(RecoveryAnswerer(matcher, chain), "recover", meta=meta)
    use_async = (run.meta or {}).get("api", "invoke") in ("ainvoke", "astream", "astream_events")
    try:
        if use_async:
            asyncio.run(recorder.ainvoke(run_input, config))
        else:
            recorder.invoke(run_input, config)
        error = None
    except Exception as exc:  # reported per run: one bad run must not stop the others
        error = f"{type(exc).__name__}: {exc}"
    new = store.get_run(recorder.last_run_id) if recorder.last_run_id else None
    if new is not None:
        meta = {**(run.meta or {}), "recovered_by": new.run_id}
        store.write(WriteBatch(run_updates=[(run.run_id, {"meta": meta})]))
    return Recovery(
        crashed_run_id=run.run_id,
        run_id=new.run_id if new else None,
        thread_id=run.thread_id,
        status=new.status if new else "failed",
        served=new.served_calls if new else 0,
        live=new.live_calls if new else 0,
        error=error,
    )
