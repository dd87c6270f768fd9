"""A strict replay that is running is seen as running, not as orphaned.

A run that is ``running`` with nobody holding its thread's lease is taken for a
run whose process died: ``graphtape recover`` closes it as crashed and runs it
again (live calls for everything it had not written, and a strict replay
holds its calls to its end), ``graphtape stats`` counts it, the Studio's
event stream ends it. A strict replay on the thread it named for itself could
skip its lease (nobody else can know that thread while it runs), which was
measured at ~2.7% of benchmark 2's replay; it keeps it, because the lease is
how every other process tells a live run from a dead one.
"""

from __future__ import annotations

from typing import Any

from graphtape.runtime.lease import lease_name
from graphtape.runtime.recovery import held_runs
from tests import graphs


def test_a_strict_replay_holds_its_thread_while_it_runs(tape):
    seen: list[dict[str, Any]] = []
    replaying = [False]

    def probe(n: int) -> None:
        if not replaying[0] or n != 1:
            return
        (running,) = tape.store.list_runs(status="running", limit=None)
        seen.append(
            {
                "mode": running.mode,
                "orphaned": [r.run_id for r in tape.orphaned_runs()],
                "held": [r.run_id for r, _, _ in held_runs(tape)],
                "holder": tape.store.lease_holder(lease_name(running.thread_id)),
                "run_id": running.run_id,
            }
        )

    graph = graphs.counter_line(3, probe=probe)
    rec = tape.record(graph, name="line")
    rec.invoke({"n": 0})
    replaying[0] = True
    result = tape.replay(rec.last_run_id, graph)
    assert result.status == "finished", result.error
    assert len(seen) == 1
    (during,) = seen
    assert during["run_id"] == result.run_id and during["mode"] == "strict"
    assert during["orphaned"] == []
    assert during["held"] == [result.run_id]
    assert during["holder"] is not None
    # and given back with its end
    assert tape.store.lease_holder(lease_name(result.thread_id)) is None
    assert tape.orphaned_runs() == []
