"""The graphs to serve: a ``langgraph.json`` (the LangGraph CLI's format) and ``--graph NAME=SPEC`` options.

Only what ``graphtape dev`` acts on is read from the file: ``graphs`` (names
mapped to ``./path/to/file.py:attr`` or ``package.module:attr``, file paths
relative to the file's folder) and ``env`` (a ``.env`` file's path or a
mapping; variables already set in the environment win, so a shell can
override the file). Other keys (``dependencies``, ``python_version``, ...)
describe a container build and are ignored.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphtape.errors import GraphLoadError

__all__ = ["Project", "is_loopback", "parse_env_file", "parse_graph_option", "read_project", "token_for"]


@dataclass
class Project:
    """Graph names to load specs, and environment variables to set, from one ``langgraph.json``."""

    graphs: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    root: Path = field(default_factory=Path.cwd)

    def apply_env(self) -> None:
        for key, value in self.env.items():
            os.environ.setdefault(key, value)

    def load_graphs(self) -> dict[str, Any]:
        """The compiled graphs, by name (a failure names the graph and the spec)."""
        from graphtape.loading import load_graph

        root = str(self.root)
        if root not in sys.path:
            sys.path.insert(0, root)
        graphs = {}
        for name, spec in self.graphs.items():
            try:
                graphs[name] = load_graph(spec)
            except GraphLoadError as exc:
                raise GraphLoadError(f"graph {name!r}: {exc}") from exc
        return graphs


def _resolve(spec: str, root: Path) -> str:
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise GraphLoadError(f"graph spec {spec!r} must be 'path/to/file.py:attr' or 'module:attr'")
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        if not path.is_absolute():
            path = (root / path).resolve()
        return f"{path}:{attr}"
    return spec


def parse_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines (``export`` prefixes, comments and quotes allowed) of a ``.env`` file."""
    env = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def read_project(path: Path) -> Project:
    """The project described by a ``langgraph.json`` (errors say what to fix in it)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GraphLoadError(f"no {path}; write one with a 'graphs' mapping or pass --graph NAME=PATH:ATTR") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GraphLoadError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("graphs"), dict) or not data["graphs"]:
        raise GraphLoadError(f"{path} needs a 'graphs' object mapping names to 'path.py:attr' or 'module:attr'")
    root = path.resolve().parent
    graphs = {}
    for name, spec in data["graphs"].items():
        if isinstance(spec, dict):  # the long form: {"path": "...", "description": ...}
            spec = spec.get("path")
        if not isinstance(spec, str):
            raise GraphLoadError(f"{path}: graph {name!r} must be a 'path.py:attr' or 'module:attr' string")
        graphs[str(name)] = _resolve(spec, root)
    env: dict[str, str] = {}
    given = data.get("env")
    if isinstance(given, str):
        env_path = (root / given).resolve()
        if not env_path.is_file():
            raise GraphLoadError(f"{path}: env file {given!r} not found at {env_path}")
        env = parse_env_file(env_path)
    elif isinstance(given, dict):
        env = {str(k): str(v) for k, v in given.items()}
    elif given is not None:
        raise GraphLoadError(f"{path}: 'env' must be a .env file's path or an object of variables")
    return Project(graphs, env, root)


def parse_graph_option(text: str, root: Path) -> tuple[str, str]:
    """``NAME=PATH:ATTR`` (or ``NAME=module:attr``) as (name, spec)."""
    name, sep, spec = text.partition("=")
    if not sep or not name.strip() or not spec.strip():
        raise GraphLoadError(f"--graph {text!r} must be NAME=PATH.py:ATTR or NAME=module:ATTR")
    return name.strip(), _resolve(spec.strip(), root)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_for(host: str, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """(the bearer token serving on ``host`` needs, where it came from): none on loopback,
    ``GRAPHTAPE_TOKEN`` when set, else a random one that is printed."""
    if is_loopback(host):
        return None, "none"
    given = environ.get("GRAPHTAPE_TOKEN")
    if given:
        return given, "GRAPHTAPE_TOKEN"
    return secrets.token_urlsafe(24), "generated"
