"""``graphtape.debug.diff``: structural state diffs, messages by content, JSON Patch."""

from __future__ import annotations

import json

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.load import dumpd
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from graphtape.debug.diff import diff_states, json_view, message_view


def ops(diff):
    return [(c.op, c.path) for c in diff.changes]


def test_added_removed_changed_keys():
    d = diff_states({"a": 1, "b": "x", "gone": True}, {"a": 2, "b": "x", "new": [1]})
    assert ops(d) == [("removed", "gone"), ("changed", "a"), ("added", "new")]
    changed = d.changes[1]
    assert (changed.old, changed.new) == (1, 2)
    assert changed["op"] == "changed" and changed["path"] == "a"
    text = d.render()
    assert "- gone: true" in text
    assert "+ new: [1]" in text
    assert "~ a: 1 → 2" in text


def test_nested_paths_and_pointer():
    a = {"plan": {"steps": ["a", "b", "c"], "owner": "me"}, "odd key": {"x": 1}}
    b = {"plan": {"steps": ["a", "B", "c"], "owner": "me"}, "odd key": {"x": 2}}
    d = diff_states(a, b)
    assert ops(d) == [("changed", "plan.steps[1]"), ("changed", '["odd key"].x')]
    assert d.changes[0].pointer == "/plan/steps/1"
    assert d.changes[1].to_dict()["pointer"] == "/odd key/x"


def test_list_growing_at_its_end_is_one_append():
    d = diff_states({"log": [1, 2]}, {"log": [1, 2, 3, 4]})
    assert ops(d) == [("appended", "log")]
    change = d.changes[0]
    assert change.new == [3, 4] and change.at == 2
    assert change.to_dict()["count"] == 2
    assert d.render().splitlines() == ["+ log: appended 2 item(s)", "    3", "    4"]


def test_list_edits_in_the_middle_are_matched_item_by_item():
    d = diff_states({"xs": ["a", "b", "c", "d"]}, {"xs": ["a", "c", "d"]})
    assert ops(d) == [("removed", "xs[1]")]
    d = diff_states({"xs": ["a", "c"]}, {"xs": ["a", "b", "c"]})
    assert ops(d) == [("added", "xs[1]")]
    d = diff_states({"xs": [1, 2, 3]}, {"xs": [1, 2]})
    assert ops(d) == [("removed", "xs[2]")]


def test_messages_compared_by_content_ids_ignored():
    a = {"messages": [HumanMessage("hi", id="1"), AIMessage("hello", id="run-1")]}
    b = {"messages": [HumanMessage("hi", id="2"), AIMessage("hello", id="run-2", response_metadata={"latency": 3})]}
    d = diff_states(a, b)
    assert not d and d.equal and len(d) == 0
    assert d.render() == "no differences"
    assert d.json_patch() == []


def test_serialised_messages_compare_with_objects():
    live = [HumanMessage("hi", id="a"), AIMessage("yo", id="b")]
    stored = [dumpd(HumanMessage("hi", id="x")), dumpd(AIMessage("yo", id="y"))]
    assert not diff_states({"messages": live}, {"messages": stored})
    assert message_view(stored[1]) == {"role": "ai", "content": "yo"}
    assert message_view({"role": "ai", "content": "not a message"}) is None


def test_appended_messages_are_shown_by_role_and_content():
    a = {"messages": [HumanMessage("what is 2+2?", id="1")]}
    b = {
        "messages": [
            HumanMessage("what is 2+2?", id="other"),
            AIMessage("", id="x", tool_calls=[{"name": "calc", "args": {"q": "2+2"}, "id": "call_1"}]),
            ToolMessage("4", tool_call_id="call_1", name="calc", id="t"),
            AIMessage("It is 4.", id="y"),
        ]
    }
    d = diff_states(a, b)
    assert ops(d) == [("appended", "messages")]
    lines = d.render().splitlines()
    assert lines[0] == "+ messages: appended 3 item(s)"
    assert lines[1] == '    [ai] → calc({"q": "2+2"})'
    assert lines[2] == "    [tool calc] 4"
    assert lines[3] == "    [ai] It is 4."


def test_a_rewritten_message_is_one_change():
    a = {"messages": [HumanMessage("hi", id="1"), AIMessage("draft one", id="2")]}
    b = {"messages": [HumanMessage("hi", id="1"), AIMessage("draft two", id="2")]}
    d = diff_states(a, b)
    assert ops(d) == [("changed", "messages[1].content")]
    assert '~ messages[1].content: "draft one" → "draft two"' in d.render()


def test_tool_call_ids_are_ignored_but_arguments_are_not():
    a = AIMessage("", tool_calls=[{"name": "s", "args": {"q": 1}, "id": "call_a"}])
    b = AIMessage("", tool_calls=[{"name": "s", "args": {"q": 1}, "id": "call_b"}])
    c = AIMessage("", tool_calls=[{"name": "s", "args": {"q": 2}, "id": "call_a"}])
    assert not diff_states({"m": [a]}, {"m": [b]})
    assert ops(diff_states({"m": [a]}, {"m": [c]})) == [("changed", "m[0].tool_calls[0].args.q")]


def test_multiline_text_is_shown_as_a_line_diff():
    d = diff_states({"doc": "one\ntwo\nthree"}, {"doc": "one\n2\nthree"})
    lines = d.render().splitlines()
    assert lines[0] == "~ doc:"
    assert "    -two" in lines and "    +2" in lines


def test_render_clips_long_values_only_when_asked():
    long = "x" * 300
    d = diff_states({}, {"k": long})
    assert long in d.render()
    assert len(d.render(width=40).splitlines()[0]) <= 45


def test_json_patch_applies_to_the_views():
    a = {"messages": [HumanMessage("hi", id="1")], "n": 1, "gone": {"x": [1, 2]}, "xs": ["a", "b", "c"]}
    b = {
        "messages": [HumanMessage("hi", id="9"), AIMessage("yo", id="7")],
        "n": 2,
        "xs": ["a", "c"],
        "new": {"deep": [None, True]},
    }
    d = diff_states(a, b)
    patch = d.json_patch()
    assert jsonpatch.apply_patch(d.a_view, patch) == d.b_view
    assert d.b_view["messages"] == [{"role": "human", "content": "hi"}, {"role": "ai", "content": "yo"}]
    json.dumps(d.to_dict())  # JSON all the way down
    assert d.to_dict()["patch"] == patch


def test_views_of_other_values():
    import dataclasses
    import datetime

    @dataclasses.dataclass
    class Point:
        x: int
        y: int

    view = json_view({"p": Point(1, 2), "t": (1, 2), "when": datetime.date(2024, 1, 2)})
    assert view == {"p": {"x": 1, "y": 2}, "t": [1, 2], "when": "2024-01-02"}
    assert ops(diff_states({"p": Point(1, 2)}, {"p": Point(1, 3)})) == [("changed", "p.y")]
    assert ops(diff_states({"k": [1]}, {"k": {"a": 1}})) == [("changed", "k")]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
)
def test_patch_always_turns_a_into_b_and_equal_states_have_no_changes(a, b):
    d = diff_states(a, b)
    assert jsonpatch.apply_patch(d.a_view, d.json_patch()) == d.b_view
    assert bool(d) == (json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True))
    assert not diff_states(a, json.loads(json.dumps(a)))
