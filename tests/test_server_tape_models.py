"""The tape API's models name every key of the library objects they describe.

``server/studio/tape_models.py`` repeats the fields of ``RunRecord``,
``BranchRun``, ``Branch``, ``HistoryEntry``, ``Change`` and ``StateDiff`` on
purpose: the pydantic models are the OpenAPI contract the web UI codes
against (which fields are required, which are typed), and they stay open
(``extra="allow"``) so a key added to the library still reaches clients. The
price of the repetition is drift: a key the library adds would travel
undocumented. These tests make that drift fail, from real ``to_dict()`` output.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi")

from pydantic import BaseModel

from graphtape.debug.branches import Branch, BranchRun
from graphtape.debug.diff import diff_states
from graphtape.debug.history import HistoryEntry
from graphtape.server.studio import tape_models
from graphtape.store.base import RunRecord


def undocumented(model: type[BaseModel], produced: dict[str, Any]) -> set[str]:
    return set(produced) - set(model.model_fields)


def test_runs_and_branches_have_every_key_in_their_models():
    run = BranchRun(run_id="r", thread_id="t", status="finished", mode="record", started_at=1.0)
    branch = Branch(id="b", kind="main", thread_id="t", runs=[run])
    record = RunRecord(run_id="r", thread_id="t", graph="g")
    assert undocumented(tape_models.RunSummary, record.to_dict()) == set()
    assert undocumented(tape_models.BranchRun, run.to_dict()) == set()
    assert undocumented(tape_models.Branch, branch.to_dict()) == set()
    tape_models.Branch.model_validate(branch.to_dict())  # and the library's form is valid


def test_history_entries_and_diffs_have_every_key_in_their_models():
    entry = HistoryEntry("c", None, "t", "", 0, "input", None, "r", ("__start__",), ())
    assert undocumented(tape_models.HistoryEntry, entry.to_dict()) == set()
    assert set(tape_models.HistoryEntry.model_fields) >= set(HistoryEntry._fields)
    diff = diff_states({"n": 1, "xs": [1]}, {"n": 2, "xs": [1, 2], "new": True}, a_label="a", b_label="b")
    assert {c.op for c in diff.changes} == {"changed", "appended", "added"}
    assert undocumented(tape_models.StateDiff, diff.to_dict()) == set()
    for change in diff.to_dict()["changes"]:
        assert undocumented(tape_models.Change, change) == set()
    tape_models.StateDiff.model_validate(diff.to_dict())
