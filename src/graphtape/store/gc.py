"""Garbage collection of content-addressed rows: the mark phase every backend shares.

A backend's ``collect_garbage`` gathers the roots (the addresses that events,
checkpoints and pending writes refer to) and every chain node under its own
locking rules, calls :func:`mark_live`, then deletes what was not marked. The
marking lives here, once, so that what keeps a blob alive cannot differ
between backends.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from graphtape.serde import blob_refs


def mark_live(
    blobs: set[str],
    chains: Iterable[str],
    nodes: dict[str, tuple[str | None, str]],
    fetch: Callable[[list[str]], dict[str, bytes]],
    tick: Callable[[], None] = lambda: None,
) -> tuple[set[str], set[str]]:
    """The mark phase of garbage collection.

    ``blobs`` and ``chains`` are the roots (addresses events, checkpoints and
    writes refer to); ``nodes`` is every chain node ``{id: (parent, item)}``;
    ``fetch`` returns stored blob bytes by address. A chain keeps its
    ancestors and their items; a blob keeps the messages and chains it refers
    to (values and views). Returns ``(live blobs, live chain nodes)``.
    ``tick`` is called between rounds (the Redis collector renews its lock).
    """
    live_blobs = set(blobs)
    live_chains: set[str] = set()

    def keep_chain(head: str, into: set[str]) -> None:
        stack = [head]
        while stack:
            cid = stack.pop()
            if cid in live_chains or cid not in nodes:
                continue
            live_chains.add(cid)
            parent, item = nodes[cid]
            into.add(item)
            if parent:
                stack.append(parent)

    for head in chains:
        keep_chain(head, live_blobs)
    frontier = set(live_blobs)
    while frontier:
        found_b: set[str] = set()
        found_c: set[str] = set()
        chunk = list(frontier)
        for i in range(0, len(chunk), 500):
            for raw in fetch(chunk[i : i + 500]).values():
                # parsed only when it may refer to something: a message envelope, a message or a chain reference
                if b'"t":"msg"' in raw or b'"$m"' in raw or b'"$chain"' in raw:
                    try:
                        blob_refs(json.loads(raw), found_b, found_c)
                    except ValueError:  # a typed (non-JSON) checkpoint value that merely contains the marker
                        pass
        for head in found_c - live_chains:
            keep_chain(head, found_b)
        frontier = found_b - live_blobs
        live_blobs |= found_b
        tick()
    return live_blobs, live_chains
