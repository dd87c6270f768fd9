"""Loading a compiled LangGraph graph from a ``module:attr`` or ``path/to/file.py:attr`` spec.

Used by the CLI (``graphtape run`` / ``graphtape replay``) and usable from
code. ``attr`` may be dotted (``agents:support.graph``) and may name a
compiled graph or a callable taking no arguments that returns one (a
factory such as ``def build(): ... return builder.compile()``).

* ``module:attr`` imports ``module`` with the working directory on
  ``sys.path`` (as ``python -m`` would), so a project's own modules load
  without installing them.
* ``path/to/file.py:attr`` executes the file as a module named after its
  stem, with its directory on ``sys.path`` (as ``python path/to/file.py``
  would), so it can import its siblings. A file inside a package (its folder
  has an ``__init__.py``) gets its dotted name (``examples.doc_pipeline``)
  with the package's parent on ``sys.path``: names derived from modules,
  such as a bare ``@graphtape.effect``'s, are then the same whether the
  graph was loaded by path or imported. The file is executed afresh on
  every call, so an edited file is always what is loaded; it is registered
  in ``sys.modules`` under its stem so that values of classes it defines
  (pydantic models, dataclasses) recorded on a tape can be restored.

Every failure is a :class:`~graphtape.errors.GraphLoadError` with a one-line
message naming the spec and what to do.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from graphtape.errors import GraphLoadError

__all__ = ["is_compiled_graph", "load_graph"]


def is_compiled_graph(obj: Any) -> bool:
    """Whether ``obj`` is a compiled LangGraph graph (a ``Pregel``)."""
    try:
        from langgraph.pregel import Pregel
    except ImportError:  # pragma: no cover - langgraph is a dependency
        return False
    return isinstance(obj, Pregel)


def _split(spec: str) -> tuple[str, str]:
    spec = spec.strip()
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr or any(not part.isidentifier() for part in attr.split(".")):
        raise GraphLoadError(
            f"graph spec {spec!r} is not of the form module:attr or path/to/file.py:attr "
            "(e.g. myapp.agent:graph or agent.py:graph)"
        )
    return target, attr


def _looks_like_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _describe_exc(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _prepend_path(entry: str) -> None:
    if entry not in sys.path:
        sys.path.insert(0, entry)


def _load_file(target: str, spec: str) -> ModuleType:
    path = Path(target).expanduser()
    if not path.exists():
        raise GraphLoadError(f"graph file {str(path)!r} not found (from {spec!r})")
    if not path.is_file():
        raise GraphLoadError(f"{str(path)!r} is not a file (from {spec!r}); give path/to/file.py:attr")
    path = path.resolve()
    name = (
        path.stem
        if path.stem.isidentifier()
        else "_graphtape_graph_" + "".join(c if c.isalnum() else "_" for c in path.stem)
    )
    root = path.parent
    if path.stem.isidentifier():
        parts = [path.stem]
        while (root / "__init__.py").exists() and root.name.isidentifier():
            parts.insert(0, root.name)
            root = root.parent
        if len(parts) > 1:
            _prepend_path(str(root))
            try:
                importlib.import_module(".".join(parts[:-1]))
                name = ".".join(parts)
            except Exception:  # the package does not import: load the file on its own
                root = path.parent
    existing = sys.modules.get(name)
    if existing is not None and _module_file(existing) != path:
        # another module already has this name (``json.py``, or a second ``agent.py``): never clobber it
        name = "_graphtape_graph_" + name
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise GraphLoadError(f"cannot load {str(path)!r} as a Python module (from {spec!r})")
    module = importlib.util.module_from_spec(module_spec)
    _prepend_path(str(path.parent))
    if root != path.parent:
        _prepend_path(str(root))
    previous = sys.modules.get(name)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        if previous is not None:
            sys.modules[name] = previous
        else:
            sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise GraphLoadError(f"importing {path.name} raised {_describe_exc(exc)} (from {spec!r})") from exc
    return module


def _module_file(module: ModuleType) -> Path | None:
    file = getattr(module, "__file__", None)
    try:
        return Path(file).resolve() if file else None
    except OSError:  # pragma: no cover
        return None


def _import_module(target: str, spec: str) -> ModuleType:
    if not all(part.isidentifier() for part in target.split(".")):
        raise GraphLoadError(
            f"{target!r} is neither a module name nor a .py file (from {spec!r}); "
            "give module:attr or path/to/file.py:attr"
        )
    _prepend_path(os.getcwd())
    importlib.invalidate_caches()
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (target == missing or target.startswith(missing + ".")):
            raise GraphLoadError(
                f"no module named {missing!r} (from {spec!r}); run from the project directory, "
                "install the package, or give path/to/file.py:attr"
            ) from exc
        raise GraphLoadError(f"importing {target} raised {_describe_exc(exc)} (from {spec!r})") from exc
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise GraphLoadError(f"importing {target} raised {_describe_exc(exc)} (from {spec!r})") from exc


def _graph_names(module: ModuleType) -> list[str]:
    return sorted(k for k, v in vars(module).items() if not k.startswith("_") and is_compiled_graph(v))


def _resolve_attr(module: ModuleType, attr: str, spec: str) -> Any:
    obj: Any = module
    for i, part in enumerate(attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = module.__name__ if i == 0 else ".".join(attr.split(".")[:i])
            hint = ""
            if i == 0:
                found = _graph_names(module)
                hint = f"; compiled graphs in it: {', '.join(found)}" if found else "; it defines no compiled graph"
            raise GraphLoadError(f"{where!r} has no attribute {part!r} (from {spec!r}){hint}") from None
        except Exception as exc:
            raise GraphLoadError(f"reading {part!r} raised {_describe_exc(exc)} (from {spec!r})") from exc
    return obj


def _not_a_graph(obj: Any, spec: str) -> GraphLoadError:
    kind = type(obj).__name__
    if hasattr(obj, "compile") and hasattr(obj, "add_node"):
        return GraphLoadError(
            f"{spec!r} is an uncompiled {kind}; point at builder.compile() (or a function returning it)"
        )
    return GraphLoadError(
        f"{spec!r} is a {kind}, not a compiled LangGraph graph; point at the result of "
        "StateGraph(...).compile() or a zero-argument function returning it"
    )


def _takes_no_args(fn: Any) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in sig.parameters.values()
    )


def load_graph(spec: str) -> Any:
    """The compiled graph named by ``spec`` (``module:attr`` or ``path/to/file.py:attr``).

    Raises :class:`~graphtape.errors.GraphLoadError` with a one-line message
    when the file or module is missing, importing it fails, the attribute
    does not exist, or it is not (and does not return) a compiled graph.
    """
    target, attr = _split(spec)
    module = _load_file(target, spec) if _looks_like_path(target) else _import_module(target, spec)
    obj = _resolve_attr(module, attr, spec)
    if is_compiled_graph(obj):
        return obj
    if callable(obj) and not isinstance(obj, type) and _takes_no_args(obj):
        try:
            made = obj()
        except Exception as exc:
            raise GraphLoadError(f"calling {attr}() raised {_describe_exc(exc)} (from {spec!r})") from exc
        if is_compiled_graph(made):
            return made
        raise GraphLoadError(
            f"{attr}() returned a {type(made).__name__}, not a compiled LangGraph graph (from {spec!r})"
        )
    raise _not_a_graph(obj, spec)
