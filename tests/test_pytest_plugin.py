"""The pytest plugin's cassettes, driven through pytester in every mode.

Each test writes a tiny app (a one-node agent on a seeded fake model) and a
test of it, then runs pytest on them in-process. The live-call guard
(``graphtape.testing.live_call_counts``) tells whether a run called the
model or was served from the tape.
"""

from __future__ import annotations

import difflib
import re
import sys

import pytest

import graphtape.testing.cassette  # noqa: F401  (kept imported: pytester drops modules an inner run imports)
from graphtape.testing import live_call_counts, reset_live_calls

pytest_plugins = ["pytester"]

APP = """
from langgraph.graph import END, START, MessagesState, StateGraph

from graphtape.testing import SeededChatModel

PROMPT = {prompt!r}
TEMPERATURE = {temperature!r}


def build():
    model = SeededChatModel(seed=7, temperature=TEMPERATURE)

    def agent(state):
        return {{"messages": [model.invoke([("system", PROMPT)] + state["messages"])]}}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    return g.compile()
"""

TEST = """
import pytest

import agent_app


@pytest.mark.graphtape{marker}
def test_refund():
    out = agent_app.build().invoke({{"messages": [("human", "refund order A-1001")]}}, {config})
    assert out["messages"][-1].content
"""

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
PROMPT = "You are a refund agent. Refund orders under 100 EUR."
TAPE = "tapes/test_agent/test_refund.jsonl"


#: Written beside the inner tests: the modules of graphtape, LangGraph and langchain the inner run had loaded.
CONFTEST = """
import sys
from pathlib import Path

def pytest_unconfigure(config):
    names = sorted(m for m in sys.modules if m.startswith(("graphtape", "langgraph", "langchain")))
    (Path(str(config.rootpath)) / "modules.txt").write_text("\\n".join(names))
"""


@pytest.fixture(scope="module")
def warm_imports(tmp_path_factory):
    """Load, in this process, every module a cassette run loads, before pytester takes its snapshot.

    An in-process pytester run removes from ``sys.modules`` whatever it imported; a graphtape
    module imported for the first time inside it would be imported again later as a second copy
    (another session ContextVar, other patches), and later tests would record nothing.
    ``run`` checks that the inner runs imported nothing new.
    """
    import asyncio

    from graphtape.errors import Divergence
    from graphtape.testing.cassette import Cassette
    from graphtape.testing.tapefiles import check_file  # noqa: F401

    ns: dict = {}
    exec(compile(APP.format(prompt=PROMPT, temperature=0.7), "<warm>", "exec"), ns)
    path = tmp_path_factory.mktemp("warm") / "warm.jsonl"
    for mode in ("once", "none", "new_episodes"):
        cassette = Cassette(path, mode)
        try:
            with cassette.autorecording():
                graph = ns["build"]()
                graph.invoke({"messages": [("human", "warm")]})
                asyncio.run(graph.ainvoke({"messages": [("human", "warm")]}))
                list(graph.stream({"messages": [("human", "warm")]}))
                if mode == "none":
                    with pytest.raises(Divergence):
                        graph.invoke({"messages": [("human", "not on the tape")]})
            cassette.save()
        finally:
            cassette.close()


@pytest.fixture
def app(warm_imports, pytester, monkeypatch):
    """Write the app and its test; returns a function that (re)writes them."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # the app is rewritten within the same second
    monkeypatch.delenv("CI", raising=False)

    def write(prompt: str = PROMPT, temperature: float = 0.7, marker: str = "", config: str = "None") -> None:
        pytester.makepyfile(agent_app=APP.format(prompt=prompt, temperature=temperature))
        pytester.makepyfile(test_agent=TEST.format(marker=marker, config=config))

    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    write()
    return write


def run(pytester, *args: str):
    """Run the written test; the result and how many live model calls it made."""
    reset_live_calls()
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    loaded = (pytester.path / "modules.txt").read_text().split()
    fresh = sorted(set(loaded) - set(sys.modules))
    assert not fresh, f"the inner run imported {fresh}: pytester drops them; load them in warm_imports"
    return result, sum(live_call_counts().values())


def same_bytes(a: bytes, b: bytes) -> bool:
    """Whether two tapes are byte-identical; prints the differing lines for the failure report."""
    if a != b:
        print("\n".join(difflib.unified_diff(a.decode().splitlines(), b.decode().splitlines(), lineterm="", n=0)))
    return a == b


def test_once_records_a_missing_tape_then_replays_it_offline(pytester, app):
    from langgraph.pregel import Pregel

    methods = {name: Pregel.__dict__[name] for name in ("invoke", "ainvoke", "stream", "astream")}
    result, live = run(pytester)
    assert {name: Pregel.__dict__[name] for name in methods} == methods  # autorecording undone after the test
    result.assert_outcomes(passed=1)
    assert live == 1
    tape = pytester.path / TAPE
    assert tape.is_file()
    first = tape.read_bytes()
    assert b'"normalized":true' in first.splitlines()[0]

    result, live = run(pytester)
    result.assert_outcomes(passed=1)
    assert live == 0  # served from the tape
    assert tape.read_bytes() == first  # a replay writes nothing


def test_none_mode_fails_with_the_diff_when_the_prompt_changed(pytester, app):
    run(pytester)[0].assert_outcomes(passed=1)
    app(prompt="You are a refund agent. Refund every order.")
    result, live = run(pytester, "--graphtape-mode=none")
    result.assert_outcomes(failed=1)
    assert live == 0  # nothing reached the model
    out = result.stdout.str()
    assert f"the test no longer matches its tape {TAPE}" in out
    assert f"-[system] {PROMPT}" in out
    assert "+[system] You are a refund agent. Refund every order." in out
    assert "Traceback" not in out


def test_ci_defaults_to_none_a_missing_tape_fails(pytester, app, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result, live = run(pytester)
    result.assert_outcomes(errors=1)
    assert live == 0
    assert "no tape at" in result.stdout.str()
    assert not (pytester.path / TAPE).exists()


def test_ci_defaults_to_none_a_changed_prompt_fails(pytester, app, monkeypatch):
    run(pytester)[0].assert_outcomes(passed=1)
    app(prompt="Be generous.")
    monkeypatch.setenv("CI", "true")
    result, live = run(pytester)
    result.assert_outcomes(failed=1)
    assert live == 0
    assert "+[system] Be generous." in result.stdout.str()


def test_once_with_a_tape_is_strict_too(pytester, app):
    run(pytester)[0].assert_outcomes(passed=1)
    app(prompt="Be generous.")
    result, live = run(pytester)
    result.assert_outcomes(failed=1)
    assert live == 0


def test_new_episodes_records_what_changed_and_rewrites_the_tape(pytester, app):
    run(pytester)[0].assert_outcomes(passed=1)
    tape = pytester.path / TAPE
    before = tape.read_text(encoding="utf-8")
    app(prompt="Be generous.")
    result, live = run(pytester, "--graphtape-mode=new_episodes")
    result.assert_outcomes(passed=1)
    assert live == 1
    after = tape.read_text(encoding="utf-8")
    assert after != before and "Be generous." in after and PROMPT not in after
    result, live = run(pytester, "--graphtape-mode=none")  # CI now passes offline
    result.assert_outcomes(passed=1)
    assert live == 0


def test_new_episodes_without_changes_leaves_the_tape_alone(pytester, app):
    run(pytester)[0].assert_outcomes(passed=1)
    tape = pytester.path / TAPE
    before = tape.read_bytes()
    result, live = run(pytester, "--graphtape-mode=new_episodes")
    result.assert_outcomes(passed=1)
    assert live == 0
    assert tape.read_bytes() == before


def test_all_rerecords_and_an_unchanged_recording_is_byte_identical(pytester, app):
    run(pytester)[0].assert_outcomes(passed=1)
    tape = pytester.path / TAPE
    first = tape.read_bytes()
    tape.unlink()
    run(pytester)[0].assert_outcomes(passed=1)  # recorded afresh: new run, thread, checkpoint and message ids
    assert same_bytes(first, tape.read_bytes())
    result, live = run(pytester, "--graphtape-mode=all")
    result.assert_outcomes(passed=1)
    assert live == 1  # re-recorded live
    assert same_bytes(first, tape.read_bytes())


def test_marker_mode_overrides_the_command_line(pytester, app):
    app(marker='(mode="all")')
    run(pytester)[0].assert_outcomes(passed=1)
    result, live = run(pytester, "--graphtape-mode=none")
    result.assert_outcomes(passed=1)
    assert live == 1


def test_ini_setting_chooses_the_mode(pytester, app):
    pytester.makeini(INI + "graphtape_mode = none\n")
    result, _ = run(pytester)
    result.assert_outcomes(errors=1)
    assert "no tape at" in result.stdout.str()


def test_bad_ini_mode_is_a_usage_error(pytester, app):
    pytester.makeini(INI + "graphtape_mode = sometimes\n")
    result, _ = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "not a cassette mode" in result.stderr.str()


def test_ignored_parameter_values_are_not_matched(pytester, app):
    app(marker='(ignore_params=["temperature"])')
    run(pytester)[0].assert_outcomes(passed=1)
    app(temperature=0.1, marker='(ignore_params=["temperature"])')
    result, live = run(pytester, "--graphtape-mode=none")
    result.assert_outcomes(passed=1)
    assert live == 0


def test_a_changed_parameter_diverges_unless_ignored(pytester, app):
    run(pytester)[0].assert_outcomes(passed=1)
    app(temperature=0.1)
    result, _ = run(pytester, "--graphtape-mode=none")
    result.assert_outcomes(failed=1)
    assert '+    "temperature": 0.1' in result.stdout.str()


def test_redacted_keys_never_reach_the_tape(pytester, app):
    app(
        marker='(redact=["customer_email"])',
        config='{"configurable": {"customer_email": "ann@example.com", "api_token": "sk-123"}}',
    )
    run(pytester)[0].assert_outcomes(passed=1)
    text = (pytester.path / TAPE).read_text(encoding="utf-8")
    assert "ann@example.com" not in text and "sk-123" not in text
    assert "customer_email" in text


def test_a_failing_test_keeps_no_recording(pytester, app):
    pytester.makepyfile(test_agent=TEST.format(marker="", config="None") + "\n    assert False\n")
    result, live = run(pytester)
    result.assert_outcomes(failed=1)
    assert live == 1
    assert not (pytester.path / TAPE).exists()


def test_fixture_without_marker_records_only_what_it_is_given(pytester, app):
    pytester.makepyfile(
        test_agent="""
import agent_app


def test_refund(graphtape_cassette):
    agent = graphtape_cassette.record(agent_app.build())
    out = agent.invoke({"messages": [("human", "refund order A-1001")]})
    assert out["messages"][-1].content
    agent_app.build().invoke({"messages": [("human", "not recorded")]})
"""
    )
    result, live = run(pytester)
    result.assert_outcomes(passed=1)
    assert live == 2
    text = (pytester.path / TAPE).read_text(encoding="utf-8")
    assert "refund order A-1001" in text and "not recorded" not in text
    result, live = run(pytester, "--graphtape-mode=none")
    result.assert_outcomes(passed=1)
    assert live == 1  # the graph it was not given ran live


def test_class_tests_and_async_graphs(pytester, app):
    pytester.makepyfile(
        test_agent="""
import asyncio

import pytest

import agent_app


class TestAgent:
    @pytest.mark.graphtape
    def test_async(self):
        out = asyncio.run(agent_app.build().ainvoke({"messages": [("human", "hello")]}))
        assert out["messages"][-1].content

    @pytest.mark.graphtape
    def test_stream(self):
        chunks = list(agent_app.build().stream({"messages": [("human", "hello")]}))
        assert chunks
"""
    )
    result, live = run(pytester)
    result.assert_outcomes(passed=2)
    assert live == 2
    assert (pytester.path / "tapes/test_agent/TestAgent.test_async.jsonl").is_file()
    assert (pytester.path / "tapes/test_agent/TestAgent.test_stream.jsonl").is_file()
    result, live = run(pytester, "--graphtape-mode=none")
    result.assert_outcomes(passed=2)
    assert live == 0


def test_unknown_marker_keyword_fails_the_test(pytester, app):
    app(marker='(record_mode="none")')
    result, _ = run(pytester)
    result.assert_outcomes(errors=1)
    assert "takes only keywords" in result.stdout.str()


def test_marker_is_registered(pytester):
    pytester.makeini(INI)
    result = pytester.runpytest("--markers")
    assert "@pytest.mark.graphtape(" in result.stdout.str()


def test_none_mode_fails_when_a_node_writes_a_different_state(pytester, app):
    pytester.makepyfile(
        agent_app=APP.format(prompt=PROMPT, temperature=0.7).replace(
            'return {"messages": [model.invoke(',
            'import random\n        return {"messages": [("ai", str(random.random())), model.invoke(',
        )
    )
    run(pytester)[0].assert_outcomes(passed=1)
    result, live = run(pytester, "--graphtape-mode=none")
    result.assert_outcomes(failed=1)
    assert live == 0  # every call was served; the state still differs
    out = result.stdout.str()
    assert "wrote a different state (messages)" in out and "@graphtape.effect" in out


# -- normalisation keeps tapes replayable ------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["linear.jsonl", "fanout.jsonl", "agent.jsonl", "functional.jsonl", "review_thread.jsonl"]
)
def test_normalised_golden_tapes_still_replay_strictly(name, graphtape_replay, tmp_path):
    from graphtape.testing.normalize import normalize_export
    from tests import graphs
    from tests.test_golden import REPLAYABLE, TAPES

    original = (TAPES / name).read_text(encoding="utf-8")
    text = normalize_export(original)
    assert text != original and normalize_export(text) == text  # changed once, then stable
    ids = re.findall(r'"(?:checkpoint_id|run_id|call_id)":"([^"]+)"', text)
    assert ids and all(i.startswith("00000000-0000-4000-8000-") for i in ids)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with graphs.forbid():
        results = graphtape_replay(path, REPLAYABLE[name]())
    assert results
    for result in results:
        assert (result.status, result.live, result.unused, result.output_matches) == ("finished", 0, 0, True)


def test_a_damaged_tape_given_by_path_fails_the_test_naming_it(pytester, app):
    app(marker='(path="shared/refund.jsonl")')
    (pytester.path / "shared").mkdir()
    (pytester.path / "shared" / "refund.jsonl").write_text('{"not": "a tape"}\n', encoding="utf-8")
    result, live = run(pytester)
    result.assert_outcomes(errors=1)
    assert live == 0
    assert "refund.jsonl is not a graphtape tape" in result.stdout.str()
    assert not (pytester.path / TAPE).exists()
