"""Fingerprints of tool and effect code, and an effect's name that does not depend on how Python started.

A tool's answer is served from the tape as long as its *input* is unchanged;
after the user fixes the tool's code, that answer is stale. Each tool and
effect call therefore records a short fingerprint of the code that ran (the
function's source, comments and blank lines left out); a replay compares it
with the current code (``Session.begin``): flight mode runs a changed tool
live, and every replay lists what changed.

The source text, not its AST, is hashed: ``ast.dump`` changes between Python
versions, and a tape recorded on one version must not look changed on the
next.
"""

from __future__ import annotations

import functools
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

from graphtape import serde


def code_fingerprint(*fns: Any) -> str:
    """A short hash of the source of ``fns`` (falling back to their qualified names)."""
    return serde.digest("\n\x00".join(_source(fn) for fn in fns if fn is not None))[:16]


@functools.lru_cache(maxsize=4096)
def _source(fn: Any) -> str:
    fn = _unwrap(fn)
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    lines = [line.rstrip() for line in textwrap.dedent(text).splitlines()]
    return "\n".join(line for line in lines if line.strip() and not line.lstrip().startswith("#"))


def _unwrap(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)  # bound methods
    try:
        return inspect.unwrap(fn)
    except ValueError:  # pragma: no cover - a wrapper cycle
        return fn


def tool_code(tool: Any) -> str:
    """The fingerprint of what a ``BaseTool`` runs: its function/coroutine, or its class's ``_run``/``_arun``."""
    fns = [f for f in (getattr(tool, "func", None), getattr(tool, "coroutine", None)) if callable(f)]
    if not fns:
        cls = type(tool)
        fns = [m for m in (cls.__dict__.get("_run"), cls.__dict__.get("_arun")) if m is not None]
        fns = fns or [getattr(cls, "_run", None)]
    return code_fingerprint(*fns)


def effect_module(fn: Any) -> str:
    """The module part of a bare ``@effect``'s name: the same however the program was started.

    A function defined in the script Python was started with has
    ``__module__ == "__main__"``; the same file loaded with
    ``graphtape replay --graph app.py:graph`` is module ``app``. The name is
    derived the way :mod:`graphtape.loading` names a file: ``python -m
    pkg.app`` gives ``pkg.app`` (from ``__spec__``); ``python app.py`` gives
    the file's stem, prefixed with the packages it sits in (folders with an
    ``__init__.py``). Without a file (a notebook, ``python -c``) it stays
    ``__main__``.
    """
    module = getattr(fn, "__module__", None) or "__main__"
    if module != "__main__":
        return module.removeprefix("_graphtape_graph_")  # loading.py's name for a clashing or odd stem
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) and spec.name != "__main__":
        return spec.name
    file = getattr(main, "__file__", None)
    if not file:
        return "__main__"
    path = Path(file).resolve()
    stem = path.stem if path.stem.isidentifier() else "".join(c if c.isalnum() else "_" for c in path.stem)
    parts = [stem]
    root = path.parent
    while (root / "__init__.py").exists() and root.name.isidentifier():
        parts.insert(0, root.name)
        root = root.parent
    return ".".join(parts)
