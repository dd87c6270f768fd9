"""Which classes a tape may bring back to life: the allow-list of value types.

A tape is data. Exported tapes are attached to bug reports and shared, so
whatever ``module:Class`` a value envelope or a recorded error names is
untrusted. Decoding therefore never imports a module and never calls
anything the tape names unless it is an *allowed class of the kind the
envelope claims* (a pydantic model for ``pydantic``, an ``Enum`` for
``enum``, a dataclass for ``dataclass``, an ``Exception`` for a recorded
error). A class is allowed when it is

* registered explicitly: :func:`register_types`, or for one tape
  ``connect(types=[...])``;
* declared by the graph being recorded or replayed: its state, input,
  output and context schemas and the annotations of its node functions,
  walked recursively, and the classes defined in the modules of its node
  functions and tools (see :meth:`TypePolicy.for_graph`), or by an
  ``@graphtape.effect`` (its annotations and its module, see
  :func:`declare_effect`);
* from a small trusted set of packages (:data:`TRUSTED_PACKAGES`: Python's
  builtin exceptions, langchain, LangGraph, pydantic, graphtape, the
  provider SDKs and their langchain integrations, httpx); for recorded errors, also the exception classes
  of the standard library (``json.JSONDecodeError``,
  ``subprocess.CalledProcessError``): an exception is rebuilt without
  running code of its own (see ``record/errors_codec.py``).

Names are resolved through ``sys.modules`` and the modules' and classes'
``__dict__`` only: a module that is not imported yet is never imported
(its classes decode as plain data), and no module ``__getattr__`` or
descriptor runs. The resolved object must be a class *defined* under the
recorded name (``cls.__module__``/``__qualname__``), so a name that reaches
``os.system`` or a re-exported ``subprocess.Popen`` through a module's
globals is not a class of that name and is refused.

Rejected alternatives: importing by name (what pickle does: a tape could
run any callable), and an opt-in "trust this tape" switch (a shared tape
must be safe to open without reading it first).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import sys
import threading
import typing
from collections.abc import Iterable
from typing import Any

#: Top-level packages whose classes are trusted (resolved only if already imported).
TRUSTED_PACKAGES = frozenset(
    {
        "builtins",
        "langchain_core",
        "langchain",
        "langgraph",
        "pydantic",
        "pydantic_core",
        "graphtape",
        "openai",
        "anthropic",
        "httpx",
        "httpx2",
        "langchain_openai",
        "langchain_anthropic",
    }
)


#: Modules that hold no data classes at all: an exported tape naming anything in
#: them is refused on import (see :func:`clearly_not_data`).
HOSTILE_MODULES = frozenset(
    {
        "os",
        "posix",
        "nt",
        "subprocess",
        "sys",
        "shutil",
        "importlib",
        "runpy",
        "code",
        "codeop",
        "pickle",
        "marshal",
        "ctypes",
        "pty",
        "socket",
        "multiprocessing",
        "webbrowser",
        "pathlib",
        "io",
        "builtins",
        "operator",
        "functools",
        "types",
        "signal",
    }
)

#: The kinds of class an envelope can claim.
KINDS = ("pydantic", "enum", "dataclass", "namedtuple", "error")

#: How messages name each kind.
LABELS = {
    "pydantic": "a pydantic model",
    "enum": "an enum",
    "dataclass": "a dataclass",
    "namedtuple": "a named tuple",
    "error": "an exception class",
}

_REGISTERED: dict[str, type] = {}
#: Modules that define ``@graphtape.effect`` functions: user code, like the modules of a graph's nodes.
_EFFECT_MODULES: set[str] = set()


def qualname(cls: type) -> str:
    """The name a tape records a class by: ``module:Qual.Name``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def is_kind(obj: Any, kind: str) -> bool:
    """Whether ``obj`` is a class of the kind an envelope claims."""
    if not isinstance(obj, type):
        return False
    if kind == "pydantic":
        from pydantic import BaseModel

        return issubclass(obj, BaseModel)
    if kind == "enum":
        return issubclass(obj, enum.Enum)
    if kind == "dataclass":
        return dataclasses.is_dataclass(obj)
    if kind == "namedtuple":  # (typing.NamedTuple or collections.namedtuple: rebuilt with its _make)
        return issubclass(obj, tuple) and isinstance(getattr(obj, "_fields", None), tuple) and hasattr(obj, "_make")
    if kind == "error":
        # Not BaseException: a tape must not be able to raise SystemExit or KeyboardInterrupt.
        return issubclass(obj, Exception)
    return False


def kind_of(cls: type) -> str | None:
    return next((k for k in KINDS if is_kind(cls, k)), None)


def check_types(classes: Iterable[type]) -> tuple[type, ...]:
    """``classes`` as a tuple, each checked to be a kind a tape can rebuild (else ``TypeError``)."""
    out = tuple(classes)
    for cls in out:
        if kind_of(cls) is None:
            raise TypeError(
                f"{cls!r} is not a pydantic model, enum, dataclass, named tuple or exception class; "
                "only those can be rebuilt from a tape"
            )
    return out


def register_types(*classes: type) -> None:
    """Allow these classes to be rebuilt from any tape (pydantic models, enums, dataclasses, named tuples, exceptions).

    Classes the graph declares (state and context schemas, node annotations,
    classes defined in the modules of its nodes and tools) are allowed
    without registering; register the others your tools, effects or errors
    return, e.g. a model defined in a helper module.
    """
    for cls in check_types(classes):
        _REGISTERED[qualname(cls)] = cls


def declare_effect(fn: Any) -> None:
    """Allow the classes an effect's module defines and its annotations name (called by ``@effect``).

    An effect is often defined beside the classes it returns, in a module
    the graph's nodes import but do not live in.
    """
    classes: dict[int, type] = {}
    modules: set[str] = set()
    _walk_function(fn, classes, modules)
    _EFFECT_MODULES.update(modules)
    for cls in classes.values():
        _REGISTERED.setdefault(qualname(cls), cls)


def _split(name: str) -> tuple[str, list[str]] | None:
    module, sep, attr = name.partition(":")
    parts = attr.split(".") if attr else []
    if not sep or not module or not parts or not all(p.isidentifier() for p in parts):
        return None
    if not all(p.isidentifier() for p in module.split(".")):
        return None
    return module, parts


def _lookup(module_name: str, parts: list[str]) -> Any:
    """``module:Qual.Name`` through ``sys.modules`` and ``__dict__`` only (no import, no ``__getattr__``)."""
    obj: Any = sys.modules.get(module_name)
    if obj is None:
        return None
    for part in parts:
        try:
            obj = vars(obj).get(part)
        except TypeError:
            return None
        if obj is None:
            return None
    return obj


def _trusted(module_name: str, kind: str) -> bool:
    top = module_name.split(".", 1)[0]
    if top in TRUSTED_PACKAGES:
        return True
    return kind == "error" and top in sys.stdlib_module_names


def _is_runnable(cls: type) -> bool:
    """Chat models, tools and chains are pydantic models too, but configuration, not data.

    Built from a tape they would read API keys from the environment or
    point a client at the tape's URL (langchain-core's loader warns of the
    same), so the trusted packages' runnables are not rebuilt.
    """
    base = sys.modules.get("langchain_core.runnables.base")
    return base is not None and issubclass(cls, base.Runnable)


class TypePolicy:
    """The classes one decode may rebuild: registered, trusted, and those a graph declares."""

    def __init__(self, classes: Iterable[type] = (), modules: Iterable[str] = ()):
        self._classes: dict[str, type] = {qualname(c): c for c in classes}
        self._modules: frozenset[str] = frozenset(modules)
        self._graph: Any = None
        self._lock = threading.Lock()

    @classmethod
    def for_graph(cls, graph: Any, extra: Iterable[type] = ()) -> TypePolicy:
        """The policy for replaying (or recording) ``graph``: what it declares, plus ``extra``.

        The graph is walked on first use: a recording that never decodes pays nothing.
        """
        policy = cls(extra)
        policy._graph = graph
        return policy

    def _declared(self) -> None:
        if self._graph is None:
            return
        with self._lock:  # tasks decode from several threads: none may see a half-walked graph
            if self._graph is not None:
                classes, modules = declared_by(self._graph)
                self._classes = {**{qualname(c): c for c in classes}, **self._classes}
                self._modules = self._modules | modules
                self._graph = None

    @property
    def classes(self) -> dict[str, type]:
        self._declared()
        return self._classes

    @property
    def modules(self) -> frozenset[str]:
        self._declared()
        return self._modules

    def resolve(self, name: str, kind: str) -> type | None:
        """The allowed class recorded as ``name``, if it is one of ``kind``; never imports."""
        found = self.classes.get(name) or _REGISTERED.get(name)
        if found is not None:
            return found if is_kind(found, kind) else None
        split = _split(name)
        if split is None:
            return None
        module_name, parts = split
        user = module_name in self.modules or module_name in _EFFECT_MODULES
        if user or _trusted(module_name, kind):
            obj = _lookup(module_name, parts)
            if is_kind(obj, kind) and obj.__module__ == module_name and obj.__qualname__ == ".".join(parts):
                return obj if user or not _is_runnable(obj) else None
        if module_name == "__main__":
            # Recorded by ``python app.py``, replayed with the graph loaded as module ``app``.
            same = [c for c in self.classes.values() if c.__qualname__ == ".".join(parts) and is_kind(c, kind)]
            if len(same) == 1:
                return same[0]
        return None


#: The policy of decodes that know no graph: registered and trusted classes only.
DEFAULT = TypePolicy()


def clearly_not_data(name: str, kind: str) -> str | None:
    """Why ``name`` can never be a class of ``kind`` (for refusing an import), or None if it may be.

    Only what is certain without importing anything: a malformed name, a
    module that holds no data classes, or an already imported object that is
    not a class of the claimed kind (``builtins:eval``, ``os:system``).
    """
    split = _split(name)
    if split is None:
        return "it is not a module:Class name"
    module_name, parts = split
    obj = _lookup(module_name, parts)
    # Any exception class is a possible recorded error (a run ended by KeyboardInterrupt records one);
    # only the Exception subclasses among them are ever rebuilt.
    fits = isinstance(obj, type) and issubclass(obj, BaseException) if kind == "error" else is_kind(obj, kind)
    if obj is not None and not fits:
        return f"{name} is {'a class' if isinstance(obj, type) else 'a ' + type(obj).__name__}, not {LABELS[kind]}"
    if obj is None and (module_name in HOSTILE_MODULES or module_name.split(".", 1)[0] in HOSTILE_MODULES):
        return f"module {module_name} holds no data classes"
    return None


# --------------------------------------------------------------------------
# What a graph declares
# --------------------------------------------------------------------------

_SCHEMA_ATTRS = ("state_schema", "input_schema", "output_schema", "context_schema", "config_schema")


def declared_by(graph: Any) -> tuple[list[type], set[str]]:
    """Classes a compiled graph declares, and the modules of its node functions and tools.

    Walks the builder's schemas and every node's function annotations
    recursively (``list[Order]``, ``Optional[Status]``, nested models),
    descends into subgraphs, and collects the module of every node function
    and tool function: a class defined beside the code that returns it is
    the user's own.
    """
    classes: dict[int, type] = {}
    modules: set[str] = set()
    seen: set[int] = set()
    _walk_graph(graph, classes, modules, seen)
    return list(classes.values()), modules


def _walk_graph(graph: Any, classes: dict[int, type], modules: set[str], seen: set[int]) -> None:
    if id(graph) in seen:
        return
    seen.add(id(graph))
    builder = getattr(graph, "builder", None)
    for owner in (builder, graph):
        for attr in _SCHEMA_ATTRS:
            try:
                schema = vars(owner).get(attr) if owner is not None and hasattr(owner, "__dict__") else None
            except TypeError:
                schema = None
            if schema is not None:
                _walk_type(schema, classes, set())
    nodes = getattr(graph, "nodes", None)
    if isinstance(nodes, dict):
        for node in nodes.values():
            _walk_runnable(getattr(node, "bound", node), classes, modules, seen)


def _walk_runnable(obj: Any, classes: dict[int, type], modules: set[str], seen: set[int], depth: int = 0) -> None:
    if obj is None or depth > 6 or id(obj) in seen:
        return
    if hasattr(obj, "nodes") and hasattr(obj, "builder"):  # a compiled subgraph
        _walk_graph(obj, classes, modules, seen)
        return
    seen.add(id(obj))
    for fn in (getattr(obj, "func", None), getattr(obj, "afunc", None), getattr(obj, "coroutine", None)):
        if callable(fn):
            _walk_function(fn, classes, modules)
    schema = getattr(obj, "args_schema", None)
    if isinstance(schema, type):
        _walk_type(schema, classes, set())
    tools = getattr(obj, "tools_by_name", None)
    if isinstance(tools, dict):
        for tool in tools.values():
            _walk_runnable(tool, classes, modules, seen, depth + 1)
    for step in getattr(obj, "steps", None) or ():
        _walk_runnable(step, classes, modules, seen, depth + 1)
    bound = getattr(obj, "bound", None)
    if bound is not None and bound is not obj:
        _walk_runnable(bound, classes, modules, seen, depth + 1)
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        _walk_function(obj, classes, modules)


def _walk_function(fn: Any, classes: dict[int, type], modules: set[str]) -> None:
    fn = inspect.unwrap(fn)
    module = getattr(fn, "__module__", None)
    if isinstance(module, str) and module.split(".", 1)[0] not in TRUSTED_PACKAGES:
        modules.add(module)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable forward references: take what is concrete
        hints = {k: v for k, v in (getattr(fn, "__annotations__", None) or {}).items() if not isinstance(v, str)}
    for hint in hints.values():
        _walk_type(hint, classes, set())


def _walk_type(tp: Any, classes: dict[int, type], seen: set[int]) -> None:
    if id(tp) in seen or len(seen) > 500:
        return
    seen.add(id(tp))
    for arg in typing.get_args(tp):
        _walk_type(arg, classes, seen)
    if not isinstance(tp, type):
        return
    if tp.__module__ == "builtins" or tp.__module__.split(".", 1)[0] in ("typing", "collections"):
        return
    if kind_of(tp) is not None:
        classes[id(tp)] = tp
    if is_kind(tp, "enum"):
        return
    try:
        hints = typing.get_type_hints(tp, include_extras=True)
    except Exception:
        hints = {}
    for hint in hints.values():
        _walk_type(hint, classes, seen)
