"""A worker process for the archive crash tests: archives old threads and SIGKILLs itself mid-way.

Usage: ``python -m tests.archive_crash_worker STORE_URL DEST CRASH_POINT``

``CRASH_POINT`` names where to die: ``before-rename`` (the file is written
under its ``.partial`` name), ``before-remove`` (the file is complete and
verified, the thread still in the store) or ``after-remove`` (the thread's
transaction committed, its garbage not yet collected).
"""

from __future__ import annotations

import os
import signal
import sys

import graphtape

URL, DEST, CRASH = sys.argv[1], sys.argv[2], sys.argv[3]


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    tape = graphtape.connect(URL)
    store = tape.store
    if CRASH == "before-rename":
        os.replace = lambda *a, **k: die()
    elif CRASH == "before-remove":
        store.remove_thread = lambda *a, **k: die()  # type: ignore[method-assign]
    elif CRASH == "after-remove":
        remove = store.remove_thread

        def remove_then_die(*a, **k):
            remove(*a, **k)
            die()

        store.remove_thread = remove_then_die  # type: ignore[method-assign]
    tape.archive(older_than=30 * 86400, to=DEST)
    sys.exit(3)  # not reached: the crash point was not hit


if __name__ == "__main__":
    main()
