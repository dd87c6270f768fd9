"""The graphs to serve: a ``langgraph.json`` (the LangGraph CLI's format) and ``--graph NAME=SPEC`` options.

Only what ``graphtape dev`` acts on is read from the file: ``graphs`` (names
mapped to ``./path/to/file.py:attr`` or ``package.module:attr``, file paths
relative to the file's folder) and ``env`` (a ``.env`` file's path or a
mapping; variables already set in the environment win, so a shell can
override the file). Other keys (``dependencies``, ``python_version``, ...)
describe a container build and are ignored.
"""

from __future__ import annotations

import importlib.util
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
        return {name: self.load_graph(name) for name in self.graphs}

    def load_graph(self, name: str, *, fresh: bool = False) -> Any:
        """The compiled graph ``name``; ``fresh``: executed again from its file even when its module
        was imported before (a file spec always is), leaving the old module as it was on failure."""
        from graphtape.loading import load_graph

        root = str(self.root)
        if root not in sys.path:
            sys.path.insert(0, root)
        spec = self.graphs[name]
        module = None if _is_path_spec(spec) else spec.rpartition(":")[0]
        previous = sys.modules.pop(module, None) if fresh and module else None
        try:
            return load_graph(spec)
        except GraphLoadError as exc:
            if previous is not None:
                sys.modules[module or ""] = previous
            raise GraphLoadError(f"graph {name!r}: {exc}") from exc

    def graph_file(self, name: str) -> Path | None:
        """The file graph ``name`` is defined in (a module spec's once it is imported, or found)."""
        spec = self.graphs[name]
        target = spec.rpartition(":")[0]
        if _is_path_spec(spec):
            return Path(target)
        module = sys.modules.get(target)
        file = getattr(module, "__file__", None)
        if file is None:
            try:
                found = importlib.util.find_spec(target)
            except (ImportError, ValueError):
                return None
            file = found.origin if found is not None else None
        return Path(file).resolve() if file and file.endswith(".py") else None


def _is_path_spec(spec: str) -> bool:
    target = spec.rpartition(":")[0]
    return target.endswith(".py") or "/" in target or "\\" in target


def _resolve(spec: str, root: Path) -> str:
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise GraphLoadError(f"graph spec {spec!r} must be 'path/to/file.py:attr' or 'module:attr'")
    if _is_path_spec(spec):
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
