"""Reloading served graphs when their files change, inside a running ``graphtape dev``.

``langgraph dev`` (and uvicorn's ``--reload``) restart the whole process on a
change, which drops the runs in progress. graphtape's runs are asyncio tasks
of the serving process, so instead the changed graph modules are executed
again in the same process and :meth:`Assistants.swap` points the assistants
at the new graph objects: a run that has started keeps a reference to the
graph it started with and finishes on it; the next run uses the new one.

What is watched: the file of each declared graph (a ``module:attr`` spec's
module file) and the ``langgraph.json`` itself. A change to the file
re-executes it and swaps the graph; a change to ``langgraph.json`` reads it
again and loads the graphs whose spec changed or that are new. A file that
fails to load (a syntax error, an exception, no graph at the attribute) keeps
the old graph: one line says why, and the assistant's metadata carries the
error (``load_error``) until a later edit loads. Modules that a graph file
imports are not executed again (they stay in ``sys.modules``): save the graph
file, or restart, after editing one.

The watching is :mod:`watchfiles` (its Rust notify backend) on the folders
holding those files, not recursive, filtered to those files, so that writes to
a store beside them (``.graphtape/tape.db``) wake nothing. Loading runs in a
worker thread; the swap itself runs on the server's event loop, between
requests.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphtape.errors import GraphLoadError
from graphtape.server.studio.project import Project, read_project

__all__ = ["GraphReloader", "Reload"]

#: milliseconds of quiet after a change before reloading (an editor's save is often several writes)
DEBOUNCE_MS = 200


class Reload:
    """What one pass of :meth:`GraphReloader.reload` did: graphs (re)loaded, graphs kept with an error, notes."""

    def __init__(self) -> None:
        self.loaded: dict[str, Any] = {}
        self.failed: dict[str, str] = {}
        self.notes: list[str] = []


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(path)


class GraphReloader:
    """Watches the served graphs' files (and ``config``) and swaps the graphs of ``assistants`` when they change.

    ``overrides``: the ``--graph NAME=SPEC`` options, which win over the
    ``langgraph.json`` when it is read again. ``echo`` prints one line per
    reload or failure.
    """

    def __init__(
        self,
        project: Project,
        assistants: Any,
        *,
        config: Path | None = None,
        overrides: dict[str, str] | None = None,
        echo: Callable[[str], None] = print,
    ):
        self.project = project
        self.assistants = assistants
        self.config = config.resolve() if config is not None else None
        self.overrides = dict(overrides or {})
        self.echo = echo
        self._stop = asyncio.Event()

    def files(self) -> dict[str, set[str]]:
        """Each watched file (real path) and the graphs it defines (empty for ``langgraph.json``)."""
        watched: dict[str, set[str]] = {}
        if self.config is not None:
            watched[_real(self.config)] = set()
        for name in self.project.graphs:
            file = self.project.graph_file(name)
            if file is not None:
                watched.setdefault(_real(file), set()).add(name)
        return watched

    def reload(self, changed: set[str]) -> Reload:
        """Load again what ``changed`` (real paths) touches; runs in a worker thread, swaps nothing."""
        done = Reload()
        watched = self.files()
        names: set[str] = set()
        if self.config is not None and _real(self.config) in changed:
            names |= self._reread_config(done)
        for path in changed:
            names |= watched.get(path, set())
        for name in sorted(names):
            if name not in self.project.graphs:
                continue
            try:
                done.loaded[name] = self.project.load_graph(name, fresh=True)
            except GraphLoadError as exc:
                done.failed[name] = str(exc)
        return done

    def _reread_config(self, done: Reload) -> set[str]:
        """Read ``langgraph.json`` again: the graphs whose spec changed or that are new (overrides win)."""
        assert self.config is not None
        try:
            fresh = read_project(self.config)
        except GraphLoadError as exc:
            done.notes.append(f"{self.config.name} not reloaded, the graphs stay as they were: {exc}")
            return set()
        fresh.graphs.update(self.overrides)
        fresh.apply_env()
        changed = {n for n, spec in fresh.graphs.items() if self.project.graphs.get(n) != spec}
        for name in sorted(set(self.project.graphs) - set(fresh.graphs)):
            done.notes.append(f"graph {name!r} left {self.config.name}; it is served until graphtape dev restarts")
            fresh.graphs[name] = self.project.graphs[name]
        self.project.graphs = fresh.graphs
        return changed

    def apply(self, done: Reload) -> None:
        """Swap the loaded graphs in, note the failures, and print a line for each (on the event loop)."""
        for note in done.notes:
            self.echo(note)
        for name, graph in done.loaded.items():
            added = name not in self.assistants.entries
            self.assistants.swap(name, graph)
            self.echo(f"{'added' if added else 'reloaded'} graph {name!r}: new runs use the edited code")
        for name, error in done.failed.items():
            if name in self.assistants.entries:
                self.assistants.swap(name, None, error=error)
                self.echo(f"kept the previous {name!r}: {error}")
            else:
                self.echo(f"could not add graph {name!r}: {error}")

    async def watch(self) -> None:
        """Watch until :meth:`stop`; each batch of changes is loaded in a thread, then swapped in here.

        A watcher that fails (the system's limit of watched files, a folder removed) says so in one
        line and stops: the server goes on serving the graphs it has.
        """
        try:
            await self._watch()
        except Exception as exc:
            self.echo(f"graphs are no longer reloaded ({type(exc).__name__}: {exc}); restart graphtape dev after edits")

    async def _watch(self) -> None:
        import watchfiles

        while not self._stop.is_set():
            watched = set(self.files())
            folders = sorted({os.path.dirname(p) for p in watched})
            if not folders:
                return

            def ours(_change: Any, path: str, files: set[str] = watched) -> bool:
                return _real(path) in files

            async for changes in watchfiles.awatch(
                *folders,
                watch_filter=ours,
                debounce=DEBOUNCE_MS,
                stop_event=self._stop,
                recursive=False,
            ):
                done = await asyncio.to_thread(self.reload, {_real(path) for _, path in changes})
                self.apply(done)
                if set(self.files()) != watched:
                    break  # langgraph.json named another file: watch the new set

    def stop(self) -> None:
        self._stop.set()
