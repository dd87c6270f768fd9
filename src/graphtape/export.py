"""Portable tapes: one run or one thread as a single JSONL file.

Format (version 1), one JSON object per line, keys sorted, no whitespace::

    {"format":"graphtape-tape","kind":"run"|"thread","version":1}
    {"type":"run", ...run summary...}            one per run, oldest first
    {"type":"event","run_id":..,"seq":..,...}    every event of those runs
    {"type":"chain","id":..,"parent":..,"item":..}  message-list nodes, by id
    {"type":"blob","hash":..,"text":..}          payloads, by hash

An archive (kind ``"archive"``, written by ``graphtape archive``) is the
same format, gzip-compressed, with two more record types between the events
and the chains: ``{"type":"checkpoint",...}`` (graphtape's saver rows, body
base64) and ``{"type":"write",...}``; a blob that is not UTF-8 (a binary
checkpoint value) is written ``{"type":"blob","hash":..,"b64":..}``; and its
header carries ``"digest"``, the SHA-256 of the text after the header line.
Plain exports never hold these, so their bytes are unchanged.

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

import base64
import binascii
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphtape import events, serde
from graphtape.errors import GraphtapeError, StoreError, TapeFormatError
from graphtape.store.base import CheckpointRow, EventRow, RunRecord, TapeStore, WriteBatch, WriteRow

if TYPE_CHECKING:
    from graphtape.tape import Tape

FORMAT = "graphtape-tape"
VERSION = 1
#: The kind of an archive file (:mod:`graphtape.runtime.archive`): a thread with its checkpoints and a digest.
ARCHIVE_KIND = "archive"


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def export_runs(tape: Tape, runs: list[RunRecord], path: str | Path, *, kind: str) -> int:
    lines = [_line({"format": FORMAT, "kind": kind, "version": VERSION}), *body_lines(tape.store, runs)]
    text = "\n".join(lines) + "\n"
    target = Path(path)
    tmp = target.with_name(target.name + ".partial")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        raise GraphtapeError(f"cannot write {target}: {exc.strerror or exc}") from exc
    return len(lines)


def body_lines(
    store: TapeStore,
    runs: list[RunRecord],
    checkpoints: Sequence[CheckpointRow] = (),
    writes: Sequence[WriteRow] = (),
) -> list[str]:
    """Every line of a tape file after its header, sorted, references closed over.

    ``checkpoints`` and ``writes`` (graphtape's saver rows of the thread) are
    written only by an archive (kind ``archive``): a plain export has none,
    so its bytes do not depend on them.
    """
    runs = sorted(runs, key=lambda r: (r.started_at, r.run_id))
    lines: list[str] = []
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
    for cp in sorted(checkpoints, key=lambda c: (c.checkpoint_ns, c.checkpoint_id)):
        body = base64.b64encode(cp.body).decode("ascii")
        lines.append(_line({"type": "checkpoint", **dataclasses.asdict(cp), "body": body}))
        blob_ids.update(cp.values.values())
    for w in sorted(writes, key=lambda w: (w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx)):
        lines.append(_line({"type": "write", **dataclasses.asdict(w)}))
        blob_ids.add(w.value)
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
                    try:
                        serde.blob_refs(json.loads(data), new_blobs, new_chains)
                    except ValueError:  # a typed (binary) checkpoint value that merely contains the marker
                        pass
            pending_blobs = new_blobs - set(blobs)
            pending_chains |= new_chains - set(chain_nodes)
    for cid in sorted(chain_nodes):
        parent, item = chain_nodes[cid]
        lines.append(_line({"type": "chain", "id": cid, "parent": parent, "item": item}))
    for h in sorted(blobs):
        try:
            lines.append(_line({"type": "blob", "hash": h, "text": blobs[h].decode("utf-8")}))
        except UnicodeDecodeError:  # a checkpoint value in a binary serde format (archives only)
            lines.append(_line({"type": "blob", "hash": h, "b64": base64.b64encode(blobs[h]).decode("ascii")}))
    return lines


def read_file(path: str | Path) -> tuple[dict[str, Any], WriteBatch]:
    """Parse and verify an export file into a write batch (nothing is written)."""
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TapeFormatError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TapeFormatError(f"{p} is unreadable: {exc}") from exc
    return parse_text(raw, p)


def parse_text(raw: str, p: Path | str) -> tuple[dict[str, Any], WriteBatch]:
    """Parse and verify the text of a tape file (``p`` names it in errors); nothing is written.

    A file of kind ``archive`` also holds the thread's saver checkpoints and
    writes, and its header carries the SHA-256 of every line after it
    (``digest``): an archive edited anywhere is refused.
    """
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
    archive = header.get("kind") == ARCHIVE_KIND
    if archive:
        body = raw.split("\n", 1)[1] if "\n" in raw else ""
        if header.get("digest") != hashlib.sha256(body.encode("utf-8")).hexdigest():
            raise TapeFormatError(f"{p} does not match the digest in its header: the archive was altered or damaged")
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
            elif t == "checkpoint" and archive:
                obj["body"] = base64.b64decode(obj["body"], validate=True)
                batch.checkpoints.append(CheckpointRow(**obj))
            elif t == "write" and archive:
                batch.writes.append(WriteRow(**obj))
            elif t == "blob":
                data = base64.b64decode(obj["b64"], validate=True) if "b64" in obj else obj["text"].encode("utf-8")
                if serde.digest(data) != obj["hash"]:
                    raise TapeFormatError(f"{p} line {n}: blob {obj['hash']} does not match its content (damaged file)")
                batch.blobs[obj["hash"]] = data
            else:
                raise TapeFormatError(f"{p} line {n}: unknown record type {t!r}")
        except TapeFormatError:
            raise
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise TapeFormatError(f"{p} line {n} is damaged: {exc}") from None
    for cid, (parent, item) in batch.chains.items():
        if serde.digest(f"{parent or ''}/{item}") != cid:
            raise TapeFormatError(f"{p}: chain node {cid} does not match its content (damaged file)")
        if item not in batch.blobs:
            raise TapeFormatError(f"{p}: chain node {cid} names a blob the file does not hold")
    if not batch.new_runs and not (archive and batch.checkpoints):  # an archive of a thread without runs
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


def check_names(batch: WriteBatch, path: Path | str) -> None:
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
