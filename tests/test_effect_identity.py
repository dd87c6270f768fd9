"""An effect's name does not depend on how the program was started."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import types
from typing import TypedDict

from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape.record.codeprint import effect_module
from tests import graphs
from tests.graphs import forbid

APP = textwrap.dedent("""
    import random
    import sys
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    import graphtape


    @graphtape.effect
    def now() -> float:
        return random.random()


    class S(TypedDict, total=False):
        t: float


    def stamp(s):
        return {"t": now()}


    b = StateGraph(S)
    b.add_node(stamp)
    b.add_edge(START, "stamp")
    b.add_edge("stamp", END)
    graph = b.compile()

    if __name__ == "__main__":
        with graphtape.connect(sys.argv[1]) as tape:
            recorded = tape.record(graph, name="app")
            recorded.invoke({})
            print(recorded.last_run_id)
""")

REPLAY = textwrap.dedent("""
    import sys

    import graphtape
    from graphtape.loading import load_graph

    with graphtape.connect(sys.argv[1]) as tape:
        result = tape.replay(sys.argv[2], load_graph("app.py:graph"))
        print(result.status, result.live, result.output_matches)
""")


def run(cwd, *args) -> str:
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_recorded_by_python_app_py_replays_from_app_py_graph(tmp_path):
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    url = f"sqlite:///{tmp_path}/tape.db"
    run_id = run(tmp_path, "app.py", url).splitlines()[-1]
    with graphtape.connect(url) as tape:
        [call] = tape.events(run_id, ["effect_call"])
        assert call.data["name"] == "app.now"
    assert run(tmp_path, "-c", REPLAY, url, run_id).splitlines()[-1] == "finished 0 True"


def test_main_module_names(tmp_path, monkeypatch):
    def fn():
        pass

    fn.__module__ = "__main__"
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    main = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    main.__file__ = str(tmp_path / "pkg" / "app.py")  # python pkg/app.py: named as loading.py names it
    assert effect_module(fn) == "pkg.app"
    main.__file__ = str(tmp_path / "my-app.py")
    assert effect_module(fn) == "my_app"
    main.__spec__ = types.SimpleNamespace(name="pkg.app")  # python -m pkg.app
    assert effect_module(fn) == "pkg.app"
    del main.__file__
    main.__spec__ = None  # a notebook, python -c
    assert effect_module(fn) == "__main__"


# -- tapes recorded before names were stable --------------------------------------------------------


def now() -> float:
    graphs.live("effect", "now")
    return random.random()


class S(TypedDict, total=False):
    t: float


def build(effect):
    b = StateGraph(S)
    b.add_node("stamp", lambda s: {"t": effect()})
    b.add_edge(START, "stamp")
    b.add_edge("stamp", END)
    return b.compile()


def test_an_old_main_name_on_the_tape_matches_the_same_qualname(tape):
    as_older_graphtape_named_it = graphtape.effect(name="__main__.now")(now)
    rec = tape.record(build(as_older_graphtape_named_it))
    out = rec.invoke({})
    current = graphtape.effect(now)
    assert current.__graphtape_effect__ == f"{__name__}.now"
    with forbid():
        result = tape.replay(rec.last_run_id, build(current))
    assert result.status == "finished", result.error
    assert result.live == 0 and result.output == out


def test_an_old_name_of_another_function_does_not_match(tape):
    def later() -> float:
        graphs.live("effect", "later")
        return random.random()

    rec = tape.record(build(graphtape.effect(name="__main__.now")(now)))
    rec.invoke({})
    with forbid():
        result = tape.replay(rec.last_run_id, build(graphtape.effect(later)))
    assert result.status == "diverged"
