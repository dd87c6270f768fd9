"""A call's site is built without the frozen dataclass's per-field ``object.__setattr__`` (issue 13, per call).

``calls._new_site`` sets the fields of a :class:`~graphtape.calls.CallSite`
in one ``__dict__`` update. What must not change: it is the same object as
``CallSite(...)`` (equal, same hash, repr and field order, still frozen),
and it names every field the dataclass has.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from graphtape.calls import BATCH_SLOT_KEY, CallSite, _new_site, site_from_metadata


def test_new_site_is_the_dataclass() -> None:
    args = ("tool", "n", "sub/n", "__pregel_pull,n", 3, "sub:1|n:2", 4)
    fast, slow = _new_site(*args), CallSite(*args)
    assert type(fast) is CallSite
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert list(vars(fast).items()) == list(vars(slow).items())
    assert [f.name for f in dataclasses.fields(CallSite)] == list(vars(fast))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.ordinal = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    "ns", ["", "a:1", "a:1|b:2", ":1", "a", "a:1|b:2|c:3"], ids=["root", "one", "two", "unnamed", "no-id", "three"]
)
def test_sites_from_metadata_are_call_sites(ns: str) -> None:
    counts: dict[tuple[str, str], int] = {}

    def counter(task: str, kind: str) -> int:
        counts[(task, kind)] = counts.get((task, kind), -1) + 1
        return counts[(task, kind)]

    md: dict[str, Any] = {"langgraph_checkpoint_ns": ns, "langgraph_node": "n"}
    md["langgraph_path"] = ("__pregel_pull", "n")
    md[BATCH_SLOT_KEY] = 1
    site = site_from_metadata("llm", md, counter, {"1": ("__pregel_push", 2)})
    again = site_from_metadata("llm", md, counter, {"1": ("__pregel_push", 2)})
    assert type(site) is CallSite and again.ordinal == site.ordinal + 1
    assert CallSite(**vars(site)) == site
