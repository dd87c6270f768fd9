"""``python -m graphtape.docgen [PAGE]``: write the generated sections of the docs.

Today that is the event reference in ``docs/tape-format.md``, rendered from
the types in :mod:`graphtape.events` (``tests/test_events.py`` fails when the
page and the types disagree). A module of its own, not ``-m graphtape.events``:
``graphtape`` imports its events module, and running an imported module as
``__main__`` would define every event class twice.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphtape import events

#: the page in a source checkout (the installed package has no docs)
TAPE_FORMAT = Path(__file__).resolve().parents[2] / "docs" / "tape-format.md"


def write_event_reference(page: Path) -> bool:
    """Replace (or append) the event reference in ``page``; True if the page changed."""
    text = page.read_text(encoding="utf-8")
    new = events.update_doc(text)
    if new != text:
        page.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str], write: Callable[[str], Any] = sys.stdout.write) -> int:
    page = Path(argv[0]) if argv else TAPE_FORMAT
    changed = write_event_reference(page)
    write(f"{'updated' if changed else 'unchanged'}: the event reference in {page}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - a maintainer's command
    raise SystemExit(main(sys.argv[1:]))
