"""Which recorded runs stand for one run a user started: a crashed run and the recoveries that finished it.

A run whose process died is closed as ``crashed`` and finished by a new run
(mode ``recover``, ``meta.recovers``) that the crashed run names in
``meta.recovered_by``; a recovery that crashes in turn is recovered the same
way. The user (or the API client) knows only the first id, so replaying,
exporting or showing that id must take the whole line: the crashed run alone
made only the calls before the crash, and a strict replay of it would reach
a call it never recorded.
"""

from __future__ import annotations

from typing import Any

from graphtape.store.base import RunRecord

__all__ = ["recovered_line"]


def recovered_line(store: Any, run: RunRecord) -> list[RunRecord]:
    """``run`` followed by the recoveries that finished it (``meta.recovered_by``), oldest first.

    Just ``[run]`` for a run that was never recovered. A link to a run that
    is not on the store (pruned) or back to a run already in the line ends it.
    """
    line = [run]
    seen = {run.run_id}
    while True:
        nxt_id = (line[-1].meta or {}).get("recovered_by")
        if not nxt_id or nxt_id in seen:
            return line
        nxt = store.get_run(nxt_id)
        if nxt is None:
            return line
        line.append(nxt)
        seen.add(nxt.run_id)
