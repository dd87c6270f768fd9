"""The interception core: patches captured at install time and undone only when still ours, and the
answering protocol (a recorder follows the decisions of the answerer its ReplayPlan names)."""

from __future__ import annotations

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.tools import BaseTool

from graphtape import record
from graphtape.errors import EffectBlocked, PatchConflict
from graphtape.record import llm, tools
from graphtape.record.answer import LIVE, Answerer, Decision, ReplayPlan
from graphtape.record.intercept import Interceptor, Patch
from tests import graphs


class Base:
    def greet(self) -> str:
        return "base"


def _shout(original):
    def greet(self):
        return original(self).upper()

    return greet


def _exclaim(original):
    def greet(self):
        return original(self) + "!"

    return greet


def test_a_patch_captures_the_method_when_installed_and_restores_it():
    class Owner(Base):
        def greet(self) -> str:
            return "own"

    own = Owner.__dict__["greet"]
    Owner.greet = _exclaim(own)  # someone wrapped it before graphtape was installed
    earlier = Owner.__dict__["greet"]
    patch = Patch(Owner, "greet", _shout)
    patch.install()
    assert Owner().greet() == "OWN!"  # ours runs over the earlier wrapper, which still runs
    patch.install()  # idempotent
    assert Owner().greet() == "OWN!"
    patch.uninstall()
    assert Owner.__dict__["greet"] is earlier
    assert not patch.installed


def test_an_inherited_method_is_patched_on_the_owner_and_removed_again():
    class Child(Base):
        pass

    patch = Patch(Child, "greet", _shout)
    patch.install()
    assert Child().greet() == "BASE" and Base().greet() == "base"
    patch.uninstall()
    assert "greet" not in Child.__dict__ and Child().greet() == "base"


def test_uninstall_refuses_to_drop_a_wrapper_installed_after_ours():
    class Owner(Base):
        pass

    shout, exclaim = Patch(Owner, "greet", _shout), Patch(Owner, "greet", _exclaim)
    group = Interceptor("greeting", [shout])
    group.install()
    exclaim.install()  # another library wraps graphtape's wrapper
    assert Owner().greet() == "BASE!"
    with pytest.raises(
        PatchConflict, match=r"Owner.greet was replaced by .*after graphtape.*uninstall that wrapper first"
    ):
        group.uninstall()
    assert Owner().greet() == "BASE!" and shout.installed  # nothing was restored
    exclaim.uninstall()
    group.uninstall()
    assert "greet" not in Owner.__dict__ and not group.installed


def test_a_group_uninstalls_all_or_nothing():
    class Owner(Base):
        def other(self) -> str:
            return "other"

    group = Interceptor("two", [Patch(Owner, "greet", _shout), Patch(Owner, "other", _shout)])
    group.install()
    Owner.other = lambda self: "replaced"
    with pytest.raises(PatchConflict, match=r"Owner\.other"):
        group.uninstall()
    assert Owner().greet() == "BASE"  # the patch without a conflict stayed installed too


def test_graphtape_interceptions_uninstall_and_install_again(tape):
    record.install()
    wrapped = {name: BaseChatModel.__dict__[name] for name in ("_generate_with_cache", "stream", "batch")}
    assert llm.INTERCEPTOR.installed and tools.INTERCEPTOR.installed
    try:
        record.uninstall()
        for name, ours in wrapped.items():
            assert BaseChatModel.__dict__.get(name) is not ours
        assert "batch" not in BaseChatModel.__dict__  # inherited from Runnable: removed, not overwritten
        assert not llm.INTERCEPTOR.installed and not tools.INTERCEPTOR.installed
        assert getattr(BaseTool.run, "__wrapped__", None) is None
    finally:
        record.install()
    assert BaseChatModel.__dict__["_generate_with_cache"] is not wrapped["_generate_with_cache"]  # a new wrapper
    recorded = tape.record(graphs.build_linear(), name="linear")
    recorded.invoke({"topic": ""})
    kinds = [c.kind for c in tape.calls(recorded.last_run_id)]
    assert kinds.count("llm") == 2 and kinds.count("tool") == 1 and kinds.count("effect") == 2


def test_graphtape_does_not_drop_a_tool_wrapper_installed_after_it():
    record.install()
    ours = BaseTool.__dict__["run"]

    def later(self, *args, **kwargs):
        return ours(self, *args, **kwargs)

    BaseTool.run = later
    try:
        with pytest.raises(PatchConflict, match=r"BaseTool\.run"):
            record.uninstall()
        assert BaseTool.__dict__["run"] is later
        assert llm.INTERCEPTOR.installed  # the chat model patches were left alone too
    finally:
        BaseTool.run = ours


class Refusing(Answerer):
    """Answers every call live except tools, which it blocks."""

    replays = True

    def __init__(self):
        self.asked: list[str] = []

    def answer(self, session, call, request):
        self.asked.append(call.site.kind)
        if call.site.kind == "tool":
            return Decision.block(EffectBlocked("this answerer blocks tools"))
        return LIVE


def test_the_recorder_follows_the_answerer_of_its_plan(tape):
    answerer = Refusing()
    recorded = tape.record(graphs.build_linear(), name="linear")
    recorded.plan = ReplayPlan(answerer, "flight", meta={"why": "test"})
    with pytest.raises(EffectBlocked, match="blocks tools"):
        recorded.invoke({"topic": ""})
    assert answerer.asked == ["effect", "llm", "tool"]
    run = tape.run(recorded.last_run_id)
    assert run.mode == "flight" and run.meta["why"] == "test"
    assert [c.kind for c in tape.calls(run.run_id)] == ["effect", "llm"]  # the blocked tool is not recorded
