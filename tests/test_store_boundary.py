"""The store interface holds: no module outside ``graphtape/store`` talks to a database itself.

History listings, retention and statistics read through :class:`graphtape.TapeStore`
methods; only a backend knows its driver, its SQL and its private query helper. A
module elsewhere that imports a driver, names a backend class or calls a store's
``_query`` would choose a backend behind the interface's back.
"""

from __future__ import annotations

import re
from pathlib import Path

import graphtape

SRC = Path(graphtape.__file__).parent

#: what only a backend may write
_FORBIDDEN = re.compile(
    r"^\s*(import|from)\s+(sqlite3|psycopg|psycopg_pool|redis)\b"
    r"|\._query\("
    r"|\b(SqliteTapeStore|PostgresTapeStore|RedisTapeStore)\b"
    r"|graphtape\.store\.(sqlite|postgres|redis)\b",
    re.MULTILINE,
)


def test_only_the_store_package_talks_to_databases():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "store":
            continue
        for match in _FORBIDDEN.finditer(path.read_text(encoding="utf-8")):
            line = path.read_text(encoding="utf-8").count("\n", 0, match.start()) + 1
            offenders.append(f"{path.relative_to(SRC)}:{line}: {match.group(0).strip()}")
    assert not offenders, "outside graphtape/store:\n" + "\n".join(offenders)


def test_the_check_sees_what_it_forbids():
    assert _FORBIDDEN.search("import sqlite3\n")
    assert _FORBIDDEN.search("rows = store._query('SELECT 1')")
    assert _FORBIDDEN.search("    from graphtape.store.sqlite import SqliteTapeStore\n")
    assert not _FORBIDDEN.search("store.checkpoint_listing(thread_id)")
