"""The typed events: their JSON form is exactly what the tape stores, old tapes still read, docs match."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
import uuid
from pathlib import Path
from typing import Any

import pytest

from graphtape import docgen, events
from tests import graphs
from tests.graphs import forbid

TAPES = Path(__file__).parent / "tapes"
DOCS = Path(__file__).parent.parent / "docs" / "tape-format.md"

#: a value of each field's type, so that every field of every kind is exercised
_SAMPLES: dict[Any, Any] = {
    str: "s",
    int: 3,
    float: 0.25,
    bool: True,
    dict: {"type": "a:B", "message": "m"},
    list: ["x"],
}


def _sample(cls: type[events.Event]) -> events.Event:
    kwargs: dict[str, Any] = {}
    for name, hint, _key in cls.KEYS:
        union = isinstance(hint, types.UnionType)
        args = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
        kwargs[name] = _SAMPLES.get(typing.get_origin(args[0]) or args[0], {"any": [1, None]})
    return cls(**kwargs)


@pytest.mark.parametrize("kind", events.KINDS)
def test_every_kind_round_trips_through_its_json_form(kind):
    cls = events.event_class(kind)
    assert cls is not None and cls.KIND == kind and cls.VERSION >= 1
    full = _sample(cls)
    data = full.to_data()
    assert json.loads(json.dumps(data)) == data
    assert events.from_data(kind, data) == full
    assert cls.from_data(data).to_data() == data
    # the compiled to_data says what the generic one says
    assert events.Event.to_data(full) == data
    # an empty event writes its "always" fields as null and leaves the others out
    empty = cls()
    assert empty.to_data() == {name: None for name, always in cls.LAYOUT if always}
    assert events.Event.to_data(empty) == empty.to_data()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(full, cls.LAYOUT[0][0], "changed")


def test_call_kinds_and_their_event_kinds():
    assert events.CALL_KINDS == ("llm", "tool", "effect")
    assert events.CALL_EVENT_KINDS == ("llm_call", "tool_call", "effect_call")
    for kind, event_kind in zip(events.CALL_KINDS, events.CALL_EVENT_KINDS):
        assert events.call_event_kind(kind) == event_kind
        cls = events.event_class(event_kind)
        assert cls is not None and issubclass(cls, events.CallEvent) and cls.CALL_KIND == kind
    with pytest.raises(ValueError, match="unknown call kind 'llm_call'"):
        events.call_event_kind("llm_call")


def test_references_are_the_fields_garbage_collection_follows():
    refs = {k: (events.event_class(k).BLOB_FIELDS, events.event_class(k).CHAIN_FIELDS) for k in events.KINDS}
    assert {k: v for k, v in refs.items() if v != ((), ())} == {
        "run_started": (("input", "config", "versions"), ()),
        "resume": (("value",), ()),
        "run_finished": (("output",), ()),
        "task_finished": (("writes",), ()),
        "llm_call": (("request", "response"), ("messages",)),
        "tool_call": (("request", "response"), ("messages",)),
        "effect_call": (("request", "response"), ("messages",)),
        "state_update": (("values",), ()),
    }
    values = {k: events.event_class(k).VALUE_FIELDS for k in events.KINDS if events.event_class(k).VALUE_FIELDS}
    assert values == {
        "run_started": ("input",),
        "resume": ("value",),
        "llm_call": ("response",),
        "tool_call": ("response",),
        "effect_call": ("response",),
        "state_update": ("values",),
    }
    blobs: set[str] = set()
    chains: set[str] = set()
    data = {"request": "r", "response": "p", "messages": "m", "name": "not-an-address", "error": {"x": "y"}}
    events.refs("tool_call", data, blobs, chains)
    assert (blobs, chains) == ({"r", "p"}, {"m"})
    typed_blobs: set[str] = set()
    typed_chains: set[str] = set()
    events.from_data("tool_call", data).refs(typed_blobs, typed_chains)
    assert (typed_blobs, typed_chains) == (blobs, chains)
    # an interrupt's value is data, even when it is a string; an unknown kind refers to nothing
    events.refs("interrupt", {"interrupt_id": "i", "value": "looks-like-an-address"}, blobs, chains)
    events.refs("from_the_future", {"value": "v"}, blobs, chains)
    assert (blobs, chains) == ({"r", "p"}, {"m"})


def test_an_older_or_newer_tape_still_reads():
    # a key this version does not know is kept and written back; a missing one reads as None
    call = events.from_data("llm_call", {"call_id": "c", "source": "tape", "shiny": [1, 2]})
    assert call.call_id == "c" and call.tokens is None and call.served
    assert call.extra == {"shiny": [1, 2]}
    assert call.to_data() == {"call_id": "c", "source": "tape", "shiny": [1, 2]}
    # a missing "always" key is written back as null (the tape never lacked it)
    assert events.from_data("checkpoint", {"checkpoint_id": "x"}).checkpoint_id == "x"
    # a known key always wins over an extra of the same name
    assert events.Label(label="a", extra={"label": "b", "n": 1}).to_data() == {"label": "a", "note": None, "n": 1}
    unknown = events.from_data("from_the_future", {"a": 1})
    assert isinstance(unknown, events.UnknownEvent)
    assert unknown.kind == "from_the_future" and unknown.to_data() == {"a": 1}
    row = _Row("r", 0, "resume", 0.0, {"value": "h"})
    assert events.parse(row) == events.Resume(value="h") == events.Resume.from_row(row)
    with pytest.raises(ValueError, match="is a 'resume' event, not 'label'"):
        events.Label.from_row(row)


@dataclasses.dataclass(frozen=True)
class _Row:
    run_id: str
    seq: int
    kind: str
    ts: float
    data: dict


def _check_rows(rows) -> set[str]:
    kinds = set()
    for row in rows:
        ev = events.parse(row)
        assert not isinstance(ev, events.UnknownEvent), row.kind
        assert type(ev).KIND == row.kind
        assert ev.extra is None, (row.kind, ev.extra)  # every stored key is a known field
        assert ev.to_data() == row.data, row.kind
        kinds.add(row.kind)
    return kinds


def test_every_event_of_recorded_runs_parses_and_reserialises_identically(tape, monkeypatch):
    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    rec.invoke({"topic": ""}, {"configurable": {"thread_id": "lin"}})
    linear = rec.last_run_id
    tape.label(linear, "good", "a note")
    tape.record(graphs.build_fanout(), name="fan", checkpointer=tape.saver).invoke(
        {"topic": "x"}, {"configurable": {"thread_id": "fan"}}
    )
    review = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "rev"}}
    review.invoke({}, cfg)
    from langgraph.types import Command

    pending = review.get_state(cfg).interrupts
    review.invoke(Command(resume={i.id: "yes" for i in pending}), cfg)
    # a failing node
    from langgraph.graph import END, START, StateGraph

    def boom(s):
        raise ValueError("kaboom")

    b = StateGraph(graphs.Linear)
    b.add_node("boom", boom)
    b.add_edge(START, "boom")
    b.add_edge("boom", END)
    with pytest.raises(ValueError):
        tape.record(b.compile(), checkpointer=tape.saver).invoke({"topic": ""}, {"run_id": uuid.uuid4()})
    # a replay that serves, and one that diverges
    with forbid():
        served = tape.replay(linear, graphs.build_linear())
    monkeypatch.setitem(graphs.PROMPTS, "write", "Write a haiku about")
    with forbid():
        diverged = tape.replay(linear, graphs.build_linear())
    assert diverged.status == "diverged"

    rows = [row for run in tape.runs(limit=100) for row in tape.events(run.run_id)]
    kinds = _check_rows(rows)
    assert kinds >= {
        "run_started",
        "run_finished",
        "run_failed",
        "task_started",
        "task_finished",
        "task_failed",
        "task_interrupted",
        "checkpoint",
        "llm_call",
        "tool_call",
        "effect_call",
        "effect_started",
        "interrupt",
        "resume",
        "divergence",
        "label",
    }

    # the one sum of replay statistics says what the replay reported
    stats = events.replay_stats(tape.events(served.run_id, list(events.CALL_EVENT_KINDS)))
    assert (stats.served, stats.live) == (served.served, served.live) == (5, 0)
    assert stats.to_dict()["changed_code"] == []
    assert stats.tokens_saved > 0 and stats.time_saved > 0


def test_every_event_of_the_golden_tapes_parses_and_reserialises_identically():
    rows = []
    for path in sorted(TAPES.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            if obj.get("type") == "event":
                rows.append(_Row(obj["run_id"], obj["seq"], obj["kind"], obj["ts"], obj["data"]))
    assert len(_check_rows(rows)) >= 10


def test_replay_stats_counts_served_and_live_calls():
    stats = events.replay_stats(
        [
            events.LlmCall(source="tape", tokens=10, cost=0.5, recorded_latency=1.5),
            events.ToolCall(source="override", name="search", code_changed=True),
            events.EffectCall(source="live", tokens=3, cost=0.25),
            events.Checkpoint(checkpoint_id="not a call"),
        ]
    )
    assert stats.to_dict() == {
        "served": 2,
        "live": 1,
        "tokens_saved": 10,
        "cost_saved": 0.5,
        "time_saved": 1.5,
        "live_tokens": 3,
        "live_cost": 0.25,
        "changed_code": ["search"],
    }


def test_the_event_reference_in_the_docs_is_generated_from_the_types():
    text = DOCS.read_text(encoding="utf-8")
    assert events.render_doc() in text, "docs/tape-format.md is stale: run `python -m graphtape.docgen`"
    assert events.update_doc(text) == text
    for kind in events.KINDS:
        assert f"`{kind}`" in events.render_doc()


def test_the_doc_command_rewrites_only_its_section(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nbefore\n", encoding="utf-8")
    out: list[str] = []
    assert docgen.main([str(page)], out.append) == 0
    first = page.read_text(encoding="utf-8")
    assert first.startswith("# Title\n\nbefore\n\n" + events.DOC_BEGIN) and first.endswith(events.DOC_END + "\n")
    page.write_text(first.replace("| `label` | str |", "| `label` | int |") + "after\n", encoding="utf-8")
    docgen.main([str(page)], out.append)
    assert page.read_text(encoding="utf-8") == first + "after\n"
    docgen.main([str(page)], out.append)
    assert [line.split(":")[0] for line in out] == ["updated", "updated", "unchanged"]
