"""Two fixes: the message memo sees a message's extra fields, and ``graphtape.record.uninstall()`` removes
the strict replay's patch on LangGraph's executor too."""

from __future__ import annotations

from langchain_core.messages import HumanMessage
from langgraph.pregel._executor import BackgroundExecutor

from graphtape import record, serde
from graphtape.record import writer as writer_mod
from graphtape.replay import saver as replay_saver
from tests.test_replaycost_saver import _threads_of, build


def _fresh_hash(msg: HumanMessage) -> str:
    return writer_mod.MessageForm(serde.message_for_request(msg)).h


def test_a_message_whose_extra_fields_changed_gets_its_new_form(monkeypatch) -> None:
    monkeypatch.setattr(writer_mod, "_FORMS", {})
    first = writer_mod.message_form(HumanMessage("x", id="q1", foo=1))
    assert b'"foo":1' in first.data  # the stored form holds the extra field
    changed = HumanMessage("x", id="q1", foo=2)  # the same id and fields, another extra value
    form = writer_mod.message_form(changed)
    assert form is not first and form.h == _fresh_hash(changed)
    # the writer's loop over a request's messages makes the same test
    monkeypatch.setattr(writer_mod, "_FORMS", {})
    writer = writer_mod.TapeWriter(None, "r")  # type: ignore[arg-type]
    assert writer.forms([HumanMessage("x", id="q1", foo=1)])[0].h == first.h
    assert writer.forms([changed])[0].h == form.h
    # an extra field removed, or set in place on the same object, is seen too
    plain = HumanMessage("x", id="q1")
    assert writer_mod.message_form(plain).h == _fresh_hash(plain)
    plain.foo = 3  # type: ignore[attr-defined]
    assert writer_mod.message_form(plain).h == _fresh_hash(plain)
    # and an equal message is still answered from the memo
    assert writer_mod.message_form(HumanMessage("x", id="q1", foo=3)) is writer_mod.message_form(plain)


def test_an_id_less_message_given_an_extra_field_is_read_again() -> None:
    writer = writer_mod.TapeWriter(None, "r")  # type: ignore[arg-type]
    msg = HumanMessage("y", bar=1)
    first = writer.message_blob(msg, store=False)[1]
    msg.bar = 2  # type: ignore[attr-defined]
    assert writer.message_blob(msg, store=False)[1] != first
    assert writer.message_blob(msg, store=False)[1] == _fresh_hash(msg)


def test_uninstall_removes_the_replay_patch_on_langgraphs_executor(tape, monkeypatch) -> None:
    graph = build()
    rec = tape.record(graph)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})
    assert tape.replay(rec.last_run_id, graph, mode="strict").status == "finished"
    assert getattr(BackgroundExecutor.__dict__["submit"], "__graphtape_inline__", False)
    assert replay_saver.PATCH.current is not None
    original = replay_saver.PATCH.current.patches[0].original
    try:
        record.uninstall()
        assert not getattr(BackgroundExecutor.__dict__["submit"], "__graphtape_inline__", False)
        assert BackgroundExecutor.__dict__["submit"] is original
        assert replay_saver.PATCH.current is None
        record.uninstall()  # nothing left to remove: a no-op
    finally:
        record.install()
    # the next strict replay installs it again and saves in line, as before
    seen = _threads_of(monkeypatch, replay_saver.ReplaySaver)
    result = tape.replay(rec.last_run_id, graph, mode="strict")
    assert result.status == "finished" and result.output_matches
    assert getattr(BackgroundExecutor.__dict__["submit"], "__graphtape_inline__", False)
    assert seen and all(on_main for _, on_main in seen)
