"""Portable tapes: one run or one thread as a single JSONL file.

Format (version 1), one JSON object per line, keys sorted, no whitespace::

    {"format":"graphtape-tape","kind":"run"|"thread","version":1}
    {"type":"run", ...run summary...}            one per run, oldest first
    {"type":"event","run_id":..,"seq":..,...}    every event of those runs
    {"type":"chain","id":..,"parent":..,"item":..}  message-list nodes, by id
    {"type":"blob","hash":..,"text":..}          payloads, by hash

Nothing time-dependent is written outside the recorded data, and every
section is sorted, so exporting an imported tape gives the same bytes.
Blobs are checked against their hash on import, and an import is one
transaction: a damaged file adds nothing. Secrets were redacted when the
run was recorded, so an export never contains them.

A tape is data, and an export file is untrusted input (it is attached to
bug reports). Decoding never imports or calls what a file names (see
:mod:`graphtape.typepolicy`); on top of that, import refuses, with
:class:`TapeFormatError`, a file whose values or recorded errors name
something that can never be a data class (``os:system``,
``subprocess:Popen``, ``builtins:eval``): no recording produces such a
name, so the file was crafted. Names that may be legitimate classes
(a module not imported here) are accepted and decode as plain data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphtape import events, serde
from graphtape.errors import GraphtapeError, StoreError, TapeFormatError
from graphtape.store.base import EventRow, RunRecord, WriteBatch

if TYPE_CHECKING:
    from graphtape.tape import Tape

FORMAT = "graphtape-tape"
VERSION = 1


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def export_runs(tape: Tape, runs: list[RunRecord], path: str | Path, *, kind: str) -> int:
    store = tape.store
    runs = sorted(runs, key=lambda r: (r.started_at, r.run_id))
    lines = [_line({"format": FORMAT, "kind": kind, "version": VERSION})]
    blob_ids: set[str] = set()
    chain_heads: set[str] = set()
    rows: list[EventRow] = []
    for run in runs:
        lines.append(_line({"type": "run", **run.to_dict()}))
        for ev in store.events(run.run_id):
            rows.append(ev)
            events.refs(ev.kind, ev.data, blob_ids, chain_heads)
    for ev in rows:
        lines.append(
            _line({"type": "event", "run_id": ev.run_id, "seq": ev.seq, "kind": ev.kind, "ts": ev.ts, "data": ev.data})
        )
    # Close over references: blobs refer to message blobs and chains, chains to blobs.
    chain_nodes: dict[str, tuple[str | None, str]] = {}
    blobs: dict[str, bytes] = {}
    pending_blobs, pending_chains = set(blob_ids), set(chain_heads)
    while pending_blobs or pending_chains:
        if pending_chains:
            found = store.get_chain_nodes(pending_chains)
            missing = pending_chains - set(found)
            if missing:
                raise StoreError(f"chain node {sorted(missing)[0]} is missing from {store.url}: the tape is damaged")
            chain_nodes.update(found)
            pending_chains = {p for p, _ in found.values() if p is not None and p not in chain_nodes}
            pending_blobs |= {item for _, item in found.values() if item not in blobs}
        if pending_blobs:
            got = store.get_blobs(pending_blobs)
            missing_blobs = pending_blobs - set(got)
            if missing_blobs:
                raise StoreError(f"blob {sorted(missing_blobs)[0]} is missing from {store.url}: the tape is damaged")
            blobs.update(got)
            new_blobs: set[str] = set()
            new_chains: set[str] = set()
            for data in got.values():
                if b'"t":"msg"' in data or b'"$m"' in data or b'"$chain"' in data:
                    serde.blob_refs(json.loads(data), new_blobs, new_chains)
            pending_blobs = new_blobs - set(blobs)
            pending_chains |= new_chains - set(chain_nodes)
    for cid in sorted(chain_nodes):
        parent, item = chain_nodes[cid]
        lines.append(_line({"type": "chain", "id": cid, "parent": parent, "item": item}))
    for h in sorted(blobs):
        lines.append(_line({"type": "blob", "hash": h, "text": blobs[h].decode("utf-8")}))
    text = "\n".join(lines) + "\n"
    target = Path(path)
    tmp = target.with_name(target.name + ".partial")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        raise GraphtapeError(f"cannot write {target}: {exc.strerror or exc}") from exc
    return len(lines)


def read_file(path: str | Path) -> tuple[dict[str, Any], WriteBatch]:
    """Parse and verify an export file into a write batch (nothing is written)."""
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TapeFormatError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TapeFormatError(f"{p} is unreadable: {exc}") from exc
    lines = raw.splitlines()
    if not lines:
        raise TapeFormatError(f"{p} is empty: not a graphtape tape")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        raise TapeFormatError(f"{p} is not a graphtape tape (line 1 is not JSON)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TapeFormatError(f"{p} is not a graphtape tape (no '{FORMAT}' header)")
    if header.get("version") != VERSION:
        raise TapeFormatError(
            f"{p} is tape format v{header.get('version')}; this graphtape reads v{VERSION}: upgrade graphtape"
        )
    batch = WriteBatch()
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            t = obj.pop("type")
            if t == "run":
                batch.new_runs.append(RunRecord(**obj))
            elif t == "event":
                batch.events.append(
                    EventRow(obj["run_id"], int(obj["seq"]), obj["kind"], float(obj["ts"]), obj["data"])
                )
            elif t == "chain":
                batch.chains[obj["id"]] = (obj["parent"], obj["item"])
            elif t == "blob":
                data = obj["text"].encode("utf-8")
                if serde.digest(data) != obj["hash"]:
                    raise TapeFormatError(f"{p} line {n}: blob {obj['hash']} does not match its content (damaged file)")
                batch.blobs[obj["hash"]] = data
            else:
                raise TapeFormatError(f"{p} line {n}: unknown record type {t!r}")
        except TapeFormatError:
            raise
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise TapeFormatError(f"{p} line {n} is damaged: {exc}") from None
    for cid, (parent, item) in batch.chains.items():
        if serde.digest(f"{parent or ''}/{item}") != cid:
            raise TapeFormatError(f"{p}: chain node {cid} does not match its content (damaged file)")
        if item not in batch.blobs:
            raise TapeFormatError(f"{p}: chain node {cid} names a blob the file does not hold")
    if not batch.new_runs:
        raise TapeFormatError(f"{p} holds no runs")
    check_names(batch, p)
    for blob in batch.blobs.values():
        refs: set[str] = set()
        chains: set[str] = set()
        if b'"t":"msg"' in blob or b'"$m"' in blob or b'"$chain"' in blob:
            serde.blob_refs(json.loads(blob), refs, chains)
        if refs - set(batch.blobs) or chains - set(batch.chains):
            raise TapeFormatError(f"{p} refers to payloads it does not hold (damaged or truncated file)")
    return header, batch


def check_names(batch: WriteBatch, path: Path) -> None:
    """Refuse a file whose values or errors name a callable that is not a data class (nothing is imported)."""
    from graphtape import typepolicy
    from graphtape.record import errors_codec

    for ev in batch.events:
        named: list[tuple[str, str]] = []
        try:
            typed = events.parse(ev)
            error = getattr(typed, "error", None)  # run_failed, task_failed and the calls keep one
            if isinstance(error, dict):
                named += errors_codec.classes_named(error)
            for name in typed.VALUE_FIELDS:
                address = getattr(typed, name)
                blob = batch.blobs.get(address) if isinstance(address, str) else None
                if blob is not None and (b'"c":' in blob):
                    named += serde.classes_named(json.loads(blob))
        except (AttributeError, TypeError, ValueError) as exc:
            raise TapeFormatError(f"{path}: event {ev.seq} of run {ev.run_id} is damaged: {exc}") from None
        for name, kind in named:
            why = typepolicy.clearly_not_data(name, kind)
            if why is not None:
                raise TapeFormatError(
                    f"{path} was refused: event {ev.seq} ({ev.kind}) of run {ev.run_id} names {name!r} as "
                    f"{typepolicy.LABELS[kind]}, but {why}; a tape is data and may only name data classes. "
                    "Nothing was imported; do not replay this file"
                )


def import_file(tape: Tape, path: str | Path) -> list[str]:
    _, batch = read_file(path)
    existing = [r.run_id for r in batch.new_runs if tape.store.get_run(r.run_id) is not None]
    if existing:
        raise StoreError(
            f"run {existing[0]} is already in {tape.url}; nothing was imported (import into another store, "
            "or leave it: it is the same run)"
        )
    tape.store.write(batch)
    return [r.run_id for r in batch.new_runs]
