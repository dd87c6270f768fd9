"""Cassette normalisation: the same recording gives the same bytes.

A test tape is committed and reviewed in pull requests. Recorded twice with
unchanged code and seeded (or unchanged) model answers, an export still
differs on every line: run, thread, call, checkpoint and task ids are fresh
UUIDs, message ids are ``lc_run--<uuid>``, every event has a timestamp,
and latencies and store-write times are measured. A re-recorded cassette
would churn every time.

:func:`normalize_export` rewrites an export (the JSONL format of
:mod:`graphtape.export`) so that it depends only on what was recorded:

* every UUID that names something graphtape or LangGraph generated (the
  values of ``run_id``, ``thread_id``, ``parent_run_id``, ``replay_of``,
  ``call_id``, ``served_from``, ``checkpoint_id``, ``parent_id``, the id
  part of ``task`` and the ids of message references) is replaced,
  wherever it occurs, by ``00000000-0000-4000-8000-<n>`` numbered in order
  of first appearance; interrupt ids by ``<n>`` padded to 32 hex digits.
  UUIDs inside message *content* (a provider's tool-call ids) are left
  alone: they are part of what the model is asked next, so of the request
  fingerprints;
* timestamps (``started_at``, ``ended_at``, each event's ``ts``) become
  ticks of a fixed clock: ``2026-01-01T00:00:00Z`` plus one millisecond per
  run start, event and run end written before, so their order is kept;
* LangGraph saves checkpoints in a background thread: each root
  checkpoint event is put where a synchronous save would have written it
  (:func:`canonical_order`) and ``seq`` is renumbered;
* measured times are zeroed or dropped: call ``latency`` and task
  ``duration`` become 0, ``recorded_latency`` and the run's
  ``meta.write_ms`` are dropped;
* a run re-recorded in flight mode (``new_episodes``) is written as a
  recording: ``mode`` ``record``, no ``replay_of``, served calls as
  ``source: live`` without ``served_from``, no served/live counts;
* payloads whose text changed get their new content address, and so do
  the payloads and message chains that refer to them.

Rejected: fixing graphtape's clock and ids while a test records. LangGraph
makes its own checkpoint ids (time-based UUIDs), task ids and message ids,
which a graphtape seam does not reach, and latencies are measured, not
read from a clock.
"""

from __future__ import annotations

import json
import re
from typing import Any

from graphtape import serde

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX32 = re.compile(r"\b[0-9a-f]{32}\b")

#: keys whose values are (or contain) ids graphtape or LangGraph generated
_ID_KEYS = frozenset(
    {
        "run_id",
        "thread_id",
        "parent_run_id",
        "replay_of",
        "call_id",
        "served_from",
        "checkpoint_id",
        "parent_id",
        "task",
        "replay_run_id",
        "recorded_call_id",
    }
)
#: the first timestamp of every normalised tape: 2026-01-01T00:00:00Z
EPOCH = 1767225600.0
#: written in the header of a normalised tape
HEADER_KEY = "normalized"


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class _Ids:
    """Generated ids, numbered in the order they are first met."""

    def __init__(self) -> None:
        self.map: dict[str, str] = {}

    def uuid(self, value: str) -> None:
        if value not in self.map:
            self.map[value] = f"00000000-0000-4000-8000-{len(self.map) + 1:012x}"

    def token(self, value: str) -> None:
        if value not in self.map:
            self.map[value] = f"{len(self.map) + 1:032x}"

    def collect(self, obj: Any, key: str | None = None) -> None:
        """Number the generated ids found in ``obj`` (a run row, an event's data, a stored payload)."""
        if isinstance(obj, dict):
            is_ref = obj.get("t") == "msg" or "$m" in obj
            for k, v in obj.items():
                if k == "interrupt_id" and isinstance(v, str):
                    self.token(v)
                elif k == "id" and is_ref and isinstance(v, str):
                    for u in _UUID.findall(v):
                        self.uuid(u)
                else:
                    self.collect(v, k)
        elif isinstance(obj, list):
            for v in obj:
                self.collect(v, key)
        elif isinstance(obj, str) and key in _ID_KEYS:
            for u in _UUID.findall(obj):
                self.uuid(u)

    def apply(self, text: str) -> str:
        if not self.map:
            return text
        text = _UUID.sub(lambda m: self.map.get(m.group(0), m.group(0)), text)
        return _HEX32.sub(lambda m: self.map.get(m.group(0), m.group(0)), text)


def _config_thread(ids: _Ids, blobs: dict[str, str], data: dict[str, Any]) -> None:
    """The run's config payload names its thread (``configurable.thread_id``)."""
    ref = data.get("config")
    if isinstance(ref, str) and ref in blobs:
        try:
            ids.collect(json.loads(blobs[ref]))
        except ValueError:  # pragma: no cover - verified on read
            pass


def normalize_export(text: str) -> str:
    """An export file's text, normalised (see the module docstring); idempotent."""
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    header, records = lines[0], lines[1:]
    runs = [_as_recording_run(r) for r in records if r["type"] == "run"]
    events = canonical_order([_as_recording_event(r) for r in records if r["type"] == "event"])
    chains = {r["id"]: (r["parent"], r["item"]) for r in records if r["type"] == "chain"}
    blobs = {r["hash"]: r["text"] for r in records if r["type"] == "blob"}

    ids = _Ids()
    for run in runs:
        ids.collect(run)
    for ev in events:
        ids.collect({"run_id": ev["run_id"]})
        ids.collect(ev["data"])
        if ev["kind"] == "run_started":
            _config_thread(ids, blobs, ev["data"])
    # message references inside payloads carry message ids, in the order events refer to them
    for ev in events:
        for ref in _HEX32.findall(json.dumps(ev["data"], sort_keys=True)):
            _collect_refs(ids, blobs, chains, ref, set())
    # one tick per run start, event and run end, in the order written: runs oldest first, events in order
    ticks: dict[tuple[str, Any], float] = {}
    for run in runs:
        ticks[(run["run_id"], "start")] = EPOCH + len(ticks) / 1000
        for ev in events:
            if ev["run_id"] == run["run_id"]:
                ticks[(run["run_id"], ev["seq"])] = EPOCH + len(ticks) / 1000
        ticks[(run["run_id"], "end")] = EPOCH + len(ticks) / 1000

    new_address: dict[str, str] = {}
    new_blobs: dict[str, str] = {}
    new_chains: dict[str, tuple[str | None, str]] = {}

    def address(ref: str) -> str:
        """The content address of ``ref`` (a blob or chain node) after normalisation."""
        if ref in new_address:
            return new_address[ref]
        if ref in blobs:
            body = _rewrite_refs(ids.apply(blobs[ref]), address, blobs, chains)
            new = serde.digest(body.encode("utf-8"))
            new_blobs[new] = body
        elif ref in chains:
            parent, item = chains[ref]
            new_parent = address(parent) if parent is not None else None
            new_item = address(item)
            new = serde.digest(f"{new_parent or ''}/{new_item}")
            new_chains[new] = (new_parent, new_item)
        else:
            return ref
        new_address[ref] = new
        return new

    out = [_line({**header, HEADER_KEY: True})]
    for run in runs:
        row = json.loads(ids.apply(json.dumps(run)))
        for key, tick in (("started_at", "start"), ("ended_at", "end")):
            if row.get(key) is not None:
                row[key] = ticks[(run["run_id"], tick)]
        out.append(_line(row))
    for ev in events:
        data = json.loads(_rewrite_refs(ids.apply(json.dumps(ev["data"])), address, blobs, chains))
        out.append(
            _line({**ev, "run_id": ids.apply(ev["run_id"]), "ts": ticks[(ev["run_id"], ev["seq"])], "data": data})
        )
    for ref in list(blobs) + list(chains):  # payloads no event refers to are still carried
        address(ref)
    for cid in sorted(new_chains):
        parent, item = new_chains[cid]
        out.append(_line({"type": "chain", "id": cid, "parent": parent, "item": item}))
    for h in sorted(new_blobs):
        out.append(_line({"type": "blob", "hash": h, "text": new_blobs[h]}))
    return "\n".join(out) + "\n"


def _as_recording_run(run: dict[str, Any]) -> dict[str, Any]:
    """A run row without what measures or links it (write timings, the run a flight run replayed)."""
    meta = {k: v for k, v in (run.get("meta") or {}).items() if k not in ("write_ms", "replay_mode", "cassette")}
    return {**run, "mode": "record", "replay_of": None, "served_calls": 0, "live_calls": 0, "meta": meta}


def _as_recording_event(ev: dict[str, Any]) -> dict[str, Any]:
    """An event without measured times; a served call as the live call it once was."""
    data = dict(ev["data"])
    if ev["kind"].endswith("_call"):
        data["latency"] = 0.0
        data.pop("recorded_latency", None)
        data.pop("served_from", None)
        if data.get("source") == "tape":
            data["source"] = "live"
    if "duration" in data:
        data["duration"] = 0.0
    return {**ev, "data": data}


#: events written when a run ends: every checkpoint of the run is saved before them
_TERMINAL = frozenset({"run_finished", "run_failed", "interrupt", "divergence"})


def canonical_order(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each run's events with its root checkpoints where a synchronous save would have put them.

    LangGraph saves checkpoints in a background thread, so the checkpoint
    of step *s* is written before or after the first task of step *s + 1*
    starts, as the threads happen to run. Here it goes right before the
    first event of a later step (or the end of the run), and ``seq`` is
    renumbered. Tasks running in parallel (``Send`` fan-out, subgraphs)
    still record in the order they happened to finish: their cassettes may
    reorder lines when re-recorded.
    """
    by_run: dict[str, list[dict[str, Any]]] = {}
    for ev in events:
        by_run.setdefault(ev["run_id"], []).append(ev)
    out: list[dict[str, Any]] = []
    for run_events in by_run.values():
        out += _run_order(sorted(run_events, key=lambda e: e["seq"]))
    return out


def _run_order(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    step_of: dict[str, int] = {}
    for ev in events:
        task = ev["data"].get("task")
        if (
            ev["kind"] == "task_started"
            and isinstance(task, str)
            and "|" not in task
            and isinstance(ev["data"].get("step"), int)
        ):
            step_of[task] = ev["data"]["step"]

    def root_step(ev: dict[str, Any]) -> int | None:
        owner = ev["data"].get("task") or (ev["data"].get("ns") if ev["kind"] == "checkpoint" else None)
        return step_of.get(owner.split("|")[0]) if isinstance(owner, str) and owner else None

    def is_root_checkpoint(ev: dict[str, Any]) -> bool:
        return ev["kind"] == "checkpoint" and not ev["data"].get("ns") and isinstance(ev["data"].get("step"), int)

    checkpoints = [ev for ev in events if is_root_checkpoint(ev)]
    ordered: list[dict[str, Any]] = []
    pending = 0
    for ev in events:
        if is_root_checkpoint(ev):
            continue
        step = root_step(ev)
        while pending < len(checkpoints) and (
            ev["kind"] in _TERMINAL or (step is not None and step > checkpoints[pending]["data"]["step"])
        ):
            ordered.append(checkpoints[pending])
            pending += 1
        ordered.append(ev)
    ordered += checkpoints[pending:]
    return [{**ev, "seq": n} for n, ev in enumerate(ordered)]


def _collect_refs(
    ids: _Ids, blobs: dict[str, str], chains: dict[str, tuple[str | None, str]], ref: str, seen: set[str]
) -> None:
    """Number the message ids of the payloads ``ref`` leads to, depth first (a stable order)."""
    if ref in seen:
        return
    seen.add(ref)
    if ref in chains:
        parent, item = chains[ref]
        if parent is not None:
            _collect_refs(ids, blobs, chains, parent, seen)
        _collect_refs(ids, blobs, chains, item, seen)
        return
    body = blobs.get(ref)
    if body is None:
        return
    try:
        ids.collect(json.loads(body))
    except ValueError:  # pragma: no cover - verified on read
        return
    for inner in _HEX32.findall(body):
        _collect_refs(ids, blobs, chains, inner, seen)


def _rewrite_refs(text: str, address: Any, blobs: dict[str, str], chains: dict[str, Any]) -> str:
    """``text`` with every reference to a payload or chain node replaced by its new address."""
    return _HEX32.sub(
        lambda m: address(m.group(0)) if m.group(0) in blobs or m.group(0) in chains else m.group(0), text
    )
