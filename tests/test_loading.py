"""Graph specs: a file inside a package loads under its dotted name."""

from __future__ import annotations

import sys

from graphtape.loading import load_graph

AGENT = """
from typing import TypedDict
from langgraph.graph import END, START, StateGraph
import graphtape

class S(TypedDict, total=False):
    x: int

@graphtape.effect
def now() -> int:
    return 1

def step(s):
    return {"x": now()}

b = StateGraph(S)
b.add_node("step", step)
b.add_edge(START, "step")
b.add_edge("step", END)
graph = b.compile()
"""


def test_file_in_a_package_gets_its_dotted_name(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "agent.py").write_text(AGENT)
    by_path = load_graph(f"{pkg / 'agent.py'}:graph")
    module = sys.modules["mypkg.agent"]
    assert module.graph is by_path
    # the effect is named the same way whether the graph was loaded by path or imported
    assert module.now.__graphtape_effect__ == "mypkg.agent.now"
    by_module = load_graph("mypkg.agent:graph")
    assert by_module is not None


def test_a_lone_file_keeps_its_stem(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    (tmp_path / "solo_agent.py").write_text(AGENT)
    load_graph(f"{tmp_path / 'solo_agent.py'}:graph")
    assert sys.modules["solo_agent"].now.__graphtape_effect__ == "solo_agent.now"
