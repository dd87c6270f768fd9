"""``graphtape dev``: reading ``langgraph.json`` and ``--graph``, its errors, and the server it starts for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

import httpx

from graphtape.cli import main
from graphtape.cli.base import http_address
from graphtape.errors import GraphLoadError
from graphtape.server.studio.project import is_loopback, parse_graph_option, read_project, token_for
from tests.live_server import free_port, interrupt

ROOT = Path(__file__).resolve().parents[1]


def test_langgraph_json_graphs_resolve_beside_the_file_and_env_file_is_read(tmp_path):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / ".env").write_text("# keys\nexport A_KEY='one'\nB_KEY=two=2\n\n", encoding="utf-8")
    config = tmp_path / "proj" / "langgraph.json"
    config.write_text(
        json.dumps(
            {"graphs": {"a": "./agent.py:graph", "b": "pkg.mod:build", "c": {"path": "x/y.py:g"}}, "env": ".env"}
        ),
        encoding="utf-8",
    )
    project = read_project(config)
    assert project.graphs == {
        "a": f"{tmp_path / 'proj' / 'agent.py'}:graph",
        "b": "pkg.mod:build",
        "c": f"{tmp_path / 'proj' / 'x' / 'y.py'}:g",
    }
    assert project.env == {"A_KEY": "one", "B_KEY": "two=2"}


def test_env_mapping_does_not_override_the_shell(tmp_path, monkeypatch):
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"a": "m:g"}, "env": {"GT_DEV_X": "file", "GT_DEV_Y": "file"}}))
    monkeypatch.setenv("GT_DEV_X", "shell")
    monkeypatch.delenv("GT_DEV_Y", raising=False)
    read_project(config).apply_env()
    assert (os.environ["GT_DEV_X"], os.environ["GT_DEV_Y"]) == ("shell", "file")
    monkeypatch.delenv("GT_DEV_Y")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, ["no ", "--graph"]),
        ("{nope", ["cannot read"]),
        (json.dumps({"graphs": {}}), ["'graphs' object"]),
        (json.dumps({"graphs": {"a": 3}}), ["graph 'a'"]),
        (json.dumps({"graphs": {"a": "nocolon"}}), ["module:attr"]),
        (json.dumps({"graphs": {"a": "m:g"}, "env": "missing.env"}), ["env file"]),
        (json.dumps({"graphs": {"a": "m:g"}, "env": 3}), ["'env'"]),
    ],
)
def test_bad_langgraph_json_says_what_to_fix(tmp_path, content, words):
    config = tmp_path / "langgraph.json"
    if content is not None:
        config.write_text(content, encoding="utf-8")
    with pytest.raises(GraphLoadError) as exc:
        read_project(config)
    for word in words:
        assert word in str(exc.value)


def test_graph_option_and_loopback(tmp_path):
    assert parse_graph_option("doc=tests/studio_graphs.py:build_doc", tmp_path) == (
        "doc",
        f"{tmp_path / 'tests' / 'studio_graphs.py'}:build_doc",
    )
    with pytest.raises(GraphLoadError, match="NAME="):
        parse_graph_option("tests/studio_graphs.py:build_doc", tmp_path)
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.4", "::", "example.com"))


def test_a_token_beyond_loopback_only():
    assert token_for("127.0.0.1", {"GRAPHTAPE_TOKEN": "t"}) == (None, "none")
    assert token_for("0.0.0.0", {"GRAPHTAPE_TOKEN": "t"}) == ("t", "GRAPHTAPE_TOKEN")
    first, source = token_for("0.0.0.0", {})
    second, _ = token_for("10.1.2.3", {})
    assert source == "generated" and first and second and first != second and len(first) >= 24


def test_dev_without_a_config_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["dev", "--no-browser"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no langgraph.json") and err.count("\n") == 1


def test_dev_refuses_a_port_outside_1_to_65535_and_brackets_an_ipv6_host(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["dev", "--no-browser", "--graph", "x=nowhere.py:graph", "--port", "0"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == "error: --port must be between 1 and 65535, not 0\n"
    assert http_address("::1", 2024) == "http://[::1]:2024"
    assert http_address("127.0.0.1", 2024) == "http://127.0.0.1:2024"


@pytest.mark.parametrize("command", ["dev", "serve"])
def test_dev_and_serve_without_the_server_extra_say_how_to_install_it(command, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn fails as if not installed
    with pytest.raises(SystemExit) as exc:
        main([command, "--graph", "x=nowhere.py:graph"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == f"error: graphtape {command} needs uvicorn: pip install 'graphtape[server]'\n"


def test_dev_with_a_graph_that_does_not_load_is_a_one_line_error(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["dev", "--no-browser", "--graph", f"x={tmp_path}/missing.py:graph", "--port", "1"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("error: graph 'x':")


def test_dev_serves_the_examples_langgraph_json(tmp_path):
    port = free_port()
    cmd = [
        sys.executable,
        "-c",
        "from graphtape.cli import main; main()",
        "--url",
        f"sqlite:///{tmp_path}/dev.db",
        "dev",
    ]
    cmd += ["--config", str(ROOT / "examples" / "langgraph.json"), "--port", str(port), "--no-browser"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in first and "doc_pipeline" in first, first + (
            proc.stderr.read() if proc.poll() is not None else ""
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                found = httpx.post(f"http://127.0.0.1:{port}/assistants/search", json={}, timeout=5).json()
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "graphtape dev did not answer"
                time.sleep(0.05)
        assert {a["graph_id"] for a in found} == {"doc_pipeline", "refund_agent", "research_assistant"}
    finally:
        interrupt(proc)
