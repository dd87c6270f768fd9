"""A store a command creates, removed again when the command fails.

``graphtape import`` and ``graphtape restore`` create the store they write to
when it does not exist yet. When they then fail (a damaged file, a run
already there), a new SQLite file, with the folders made for it, is removed so
that a failed command leaves nothing behind. A PostgreSQL schema or Redis
keys it made stay: they are empty and a later command reuses them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

__all__ = ["new_store_removed_on_error"]


def _new_sqlite_file(url: str | None) -> tuple[Path, list[Path]] | None:
    """For a ``sqlite:///`` store URL whose file does not exist yet: the file and the folders
    that opening it will create (innermost first); else None."""
    from graphtape.store import sqlite_file

    target = sqlite_file(url)
    if target is None or not target[0]:
        return None
    path = Path(target[0])
    if path.exists():
        return None
    folders = []
    parent = path.parent
    while not parent.exists():
        folders.append(parent)
        parent = parent.parent
    return path, folders


def _remove_new_sqlite(path: Path, folders: list[Path]) -> None:
    """Remove a SQLite store this command created (with its WAL files) and the folders made for it."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            Path(str(path) + suffix).unlink()
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


@contextlib.contextmanager
def new_store_removed_on_error(url: str | None) -> Iterator[None]:
    """Around a command that may create the store at ``url`` (``import``, ``restore``): when the
    command fails, a SQLite store it created is removed again, with the folders made for it, so a
    failed command leaves no empty store behind."""
    new_file = _new_sqlite_file(url)
    try:
        yield
    except BaseException:
        if new_file is not None:
            _remove_new_sqlite(*new_file)
        raise
