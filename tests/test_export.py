"""Export / import: lossless, byte-identical on re-export, refuses bad files whole."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.types import Command

import graphtape
from tests import graphs
from tests.graphs import forbid


def test_round_trip_is_byte_identical_and_replayable(tape, tmp_path):
    rec = tape.record(graphs.build_agent(), name="agent")
    from langchain_core.messages import HumanMessage

    rec.invoke({"messages": [HumanMessage("find cats")]})
    run_id = rec.last_run_id
    first = tmp_path / "a.jsonl"
    tape.export_run(run_id, first)

    other = graphtape.connect(f"sqlite:///{tmp_path}/other.db")
    try:
        assert other.import_file(first) == [run_id]
        second = tmp_path / "b.jsonl"
        other.export_run(run_id, second)
        assert first.read_bytes() == second.read_bytes()
        with forbid():
            result = other.replay(run_id, graphs.build_agent())
        assert result.status == "finished" and result.live == 0 and result.output_matches
    finally:
        other.close()


def test_thread_export_carries_the_whole_conversation(tape, tmp_path):
    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "conv"}}
    rec.invoke({}, cfg)
    rec.invoke(Command(resume={i.id: "fine" for i in rec.get_state(cfg).interrupts}), cfg)
    rec.invoke(Command(resume="yes"), cfg)
    last = rec.last_run_id
    path = tmp_path / "thread.jsonl"
    tape.export_thread("conv", path)
    other = graphtape.connect(f"sqlite:///{tmp_path}/other.db")
    try:
        assert len(other.import_file(path)) == 3
        with forbid():
            result = other.replay(last, graphs.build_review())
        assert result.status == "finished", result.error
    finally:
        other.close()


def test_import_refuses_foreign_damaged_and_duplicate_files(tape, tmp_path):
    rec = tape.record(graphs.build_linear())
    rec.invoke({"topic": ""})
    good = tmp_path / "good.jsonl"
    tape.export_run(rec.last_run_id, good)

    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"hello": "world"}\n')
    with pytest.raises(graphtape.TapeFormatError, match="not a graphtape tape"):
        tape.import_file(foreign)

    with pytest.raises(graphtape.TapeFormatError, match="no such file"):
        tape.import_file(tmp_path / "missing.jsonl")

    lines = good.read_text().splitlines()
    damaged = tmp_path / "damaged.jsonl"
    blob_line = next(i for i, line in enumerate(lines) if '"type":"blob"' in line)
    lines[blob_line] = lines[blob_line].replace('"text":"', '"text":"X', 1)
    damaged.write_text("\n".join(lines) + "\n")
    other = graphtape.connect(f"sqlite:///{tmp_path}/other.db")
    try:
        with pytest.raises(graphtape.TapeFormatError, match="does not match its content"):
            other.import_file(damaged)
        assert other.runs() == []  # nothing half-imported

        newer = tmp_path / "newer.jsonl"
        newer.write_text(good.read_text().replace('"version":1', '"version":99', 1))
        with pytest.raises(graphtape.TapeFormatError, match="upgrade graphtape"):
            other.import_file(newer)

        other.import_file(good)
        with pytest.raises(graphtape.StoreError, match="already in"):
            other.import_file(good)
        assert len(other.runs()) == 1
    finally:
        other.close()


def test_async_recorded_run_exports_and_replays(tape, tmp_path):
    rec = tape.record(graphs.build_async())
    asyncio.run(rec.ainvoke({"topic": "x"}))
    path = tmp_path / "async.jsonl"
    tape.export_run(rec.last_run_id, path)
    other = graphtape.connect(f"sqlite:///{tmp_path}/o.db")
    try:
        other.import_file(path)
        with forbid():
            assert other.replay(rec.last_run_id, graphs.build_async()).live == 0
    finally:
        other.close()
