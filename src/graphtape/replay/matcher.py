"""Matching calls made by the current code to calls on the tape.

A recorded call is served only when kind, node path and request fingerprint
are all equal: a changed request is never answered with an old response
(tools that matched on position or URL alone did exactly that after a prompt
edit). Among equal candidates the one at the same ordinal and branch wins,
then the earliest recorded, so parallel ``Send`` branches asking the same
thing get their own recorded answers back in order.

Ids are never compared: task ids, checkpoint ids and message ids change on
every execution.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from graphtape.calls import CALL_KINDS, CallSite, RecordedCall, match_key
from graphtape.store.base import EventRow, TapeStore

__all__ = ["CALL_KINDS", "Matcher", "RecordedCall", "index_calls"]


def _message_refs(env: Any) -> Iterator[str]:
    """The addresses of the stored messages a value envelope refers to (``{"t": "msg", "h": ...}``)."""
    if isinstance(env, dict):
        if env.get("t") == "msg" and isinstance(env.get("h"), str):
            yield env["h"]
            return
        for v in env.values():
            yield from _message_refs(v)
    elif isinstance(env, list):
        for v in env:
            yield from _message_refs(v)


def index_calls(
    store: TapeStore, rows: Iterable[EventRow], *, read_with: Iterable[str] = (), keep_parsed: bool = False
) -> tuple[list[RecordedCall], dict[str, bytes]]:
    """The recorded calls among ``rows`` (other kinds are skipped), each with its stored response and the
    messages that response refers to, read in two queries; and what was found of ``read_with`` (more
    blob addresses, read in the first query).

    A served call then costs no store read, and a value is decoded only when its call is served.
    ``keep_parsed``: leave each chat response parsed on its call (``RecordedCall.parsed_env``, handed
    to the first serving instead of parsing it again); without it the calls hold bytes only and can
    answer any number of replays (the engine keeps them for a recorded run that ended).
    """
    calls = [RecordedCall.from_event(row) for row in rows if row.kind in CALL_KINDS]
    extra = list(read_with)
    found = store.get_blobs([*(c.response_ref for c in calls if c.response_ref is not None), *extra])
    # a chat response refers to its message(s) by address: read them in the same pass, one more
    # query per replay instead of one per served call
    wanted: dict[str, list[RecordedCall]] = defaultdict(list)
    for c in calls:
        if c.response_ref is not None:
            c.response_data = found.get(c.response_ref)
            if c.kind == "llm" and c.response_data is not None and b'"msg"' in c.response_data:
                env = json.loads(c.response_data)
                if keep_parsed:
                    c.parsed_env = env  # (served, it is not parsed again)
                for h in _message_refs(env):
                    wanted[h].append(c)
    if wanted:
        for h, data in store.get_blobs(wanted).items():
            for c in wanted[h]:
                c.message_data[h] = data
    return calls, {h: found[h] for h in extra if h in found}


class Matcher:
    """The recorded calls of one or more runs, consumed as the replay asks."""

    def __init__(
        self,
        calls: list[RecordedCall],
        overrides: dict[str, Any] | None = None,
        live_from: set[str] | None = None,
        kinds: tuple[str, ...] | None = None,
    ):
        if kinds is not None:
            calls = [c for c in calls if c.kind in kinds]
        self.calls = calls
        #: call id -> its place on the tape: the chain's runs oldest first, each in its order (an event's
        #: ``seq`` counts within its run: a retry's call would otherwise come before the failed run's)
        self._order = {c.call_id: i for i, c in enumerate(calls)}
        self._by_key: dict[tuple[str, str, str], list[RecordedCall]] = defaultdict(list)
        self._by_site: dict[tuple[str, str], list[RecordedCall]] = defaultdict(list)
        for c in calls:
            self._by_key[c.key].append(c)
            self._by_site[(c.kind, c.node_path)].append(c)
        self.consumed: set[str] = set()
        #: blobs read with the responses for the caller (``from_events``'s ``read_with``)
        self.read_along: dict[str, bytes] = {}
        self.overrides = dict(overrides or {})
        #: call ids that must not be served (``invalidate_from``-style re-runs)
        self.live_from = set(live_from or ())
        self._lock = threading.Lock()

    @classmethod
    def from_store(cls, store: TapeStore, run_ids: list[str], **kw: Any) -> Matcher:
        """The recorded calls of ``run_ids``, with their responses read in one query (the tape is
        indexed once per replay; a served call then costs no store read, and a value is decoded
        only when its call is served)."""
        return cls.from_events(store, [row for rid in run_ids for row in store.events(rid, CALL_KINDS)], **kw)

    @classmethod
    def from_events(
        cls, store: TapeStore, rows: Iterable[EventRow], *, read_with: Iterable[str] = (), **kw: Any
    ) -> Matcher:
        """:meth:`from_store` from event rows already read (other kinds are skipped): a
        replay reads each recorded run's events once, for the matcher, the state check and its input.

        ``read_with``: more blob addresses to read in the same query as the responses (a replay's
        recorded inputs and configs); what was found of them is left in :attr:`read_along`.
        """
        calls, read_along = index_calls(store, rows, read_with=read_with, keep_parsed=True)
        matcher = cls(calls, **kw)
        matcher.read_along = read_along
        return matcher

    def release(self, call_ids: list[str]) -> None:
        """Make calls servable again (their task was interrupted and will run again)."""
        with self._lock:
            self.consumed.difference_update(call_ids)

    def take(self, site: CallSite, fingerprint: str) -> RecordedCall | None:
        with self._lock:
            cands = [
                c
                for c in self._by_key.get(match_key(site.kind, site.node_path, fingerprint), ())
                if c.call_id not in self.consumed and c.call_id not in self.live_from
            ]
            if not cands:
                return None
            best = min(
                cands,
                key=lambda c: (c.ordinal != site.ordinal, c.branch != site.branch, self._order[c.call_id]),
            )
            self.consumed.add(best.call_id)
            return best

    def expected(self, site: CallSite) -> RecordedCall | None:
        """The recorded call the current one most likely corresponds to (for reports)."""
        with self._lock:
            cands = [c for c in self._by_site.get((site.kind, site.node_path), ()) if c.call_id not in self.consumed]
        if not cands:
            return None
        return min(
            cands,
            key=lambda c: (
                c.ordinal != site.ordinal,
                c.branch != site.branch,
                abs((c.step or 0) - (site.step or 0)),
                self._order[c.call_id],
            ),
        )

    def has_fingerprint(self, kind: str, fingerprint: str) -> bool:
        """Whether any recorded call of ``kind`` has this request fingerprint (e.g. an effect's older name)."""
        with self._lock:
            if not hasattr(self, "_fingerprints"):
                self._fingerprints = {(c.kind, c.fingerprint) for c in self.calls}
            return (kind, fingerprint) in self._fingerprints

    def override_for(self, call_id: str) -> Any:
        return self.overrides.get(call_id)

    def unused(self) -> list[RecordedCall]:
        with self._lock:
            return [c for c in self.calls if c.call_id not in self.consumed]
