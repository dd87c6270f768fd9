"""Replaying tape files against the current code: what ``graphtape test`` and ``graphtape_replay`` share.

A tape file (an export, or a cassette) holds one or more threads. Replaying
the last run of each thread replays its whole chain of runs (the first
input, then every recorded resume), so that is what is replayed, each in a
temporary store of its own: a replay writes runs, and the tapes under test
(or the production store they came from) must not change.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: outcomes of one tape file
PASSED, DIVERGED, ERRORED, RERECORDED = "passed", "diverged", "errored", "re-recorded"


def replay_threads(tape: Any, run_ids: Iterable[str], graph: Any, *, mode: str = "strict") -> list[Any]:
    """Replay the last of ``run_ids`` on each of their threads against ``graph``; the results, oldest first."""
    runs = sorted((tape.run(r) for r in run_ids), key=lambda r: (r.started_at, r.run_id))
    last: dict[str, Any] = {}
    for run in runs:
        last[run.thread_id] = run
    return [tape.replay(run.run_id, graph, mode=mode) for run in last.values()]


@dataclasses.dataclass
class FileOutcome:
    """What replaying one tape file gave."""

    path: Path
    status: str
    runs: int = 0
    seconds: float = 0.0
    #: the divergence or error message
    message: str = ""
    #: the diff of the requests (divergences)
    diff: str = ""


def check_file(path: Path, graph: Any, *, mode: str = "strict") -> FileOutcome:
    """Replay every thread of the tape file ``path`` in a temporary store; in flight mode, rewrite the file
    with the new recording when a call went live (normalised when the file was: a cassette stays one)."""
    import json
    import time

    import graphtape
    from graphtape.errors import GraphtapeError

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphtape-test-") as tmp:
        try:
            with graphtape.connect(f"sqlite:///{Path(tmp) / 'replay.db'}") as tape:
                ids = tape.import_file(path)
                results = replay_threads(tape, ids, graph, mode=mode)
                outcome = _judge(path, results)
                if mode == "flight" and outcome.status == PASSED and sum(r.live for r in results):
                    header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
                    _rewrite(tape, [rid for r in results for rid in r.run_ids], path, header, Path(tmp))
                    outcome.status = RERECORDED
        except GraphtapeError as exc:
            outcome = FileOutcome(path, ERRORED, message=str(exc))
        except Exception as exc:  # the graph's code failed outside a run: the tape could not be checked
            outcome = FileOutcome(path, ERRORED, message=f"{type(exc).__name__}: {exc}")
    outcome.seconds = time.perf_counter() - started
    return outcome


def _judge(path: Path, results: list[Any]) -> FileOutcome:
    runs = sum(len(r.run_ids) for r in results)
    for r in results:
        if r.divergence is not None:
            return FileOutcome(
                path, DIVERGED, runs, message=r.error or "diverged", diff=str(r.divergence.get("diff") or "")
            )
        if r.status == "failed":
            return FileOutcome(path, ERRORED, runs, message=f"replay of run {r.replay_of} failed: {r.error}")
    return FileOutcome(path, PASSED, runs)


def _rewrite(tape: Any, run_ids: list[str], path: Path, header: dict[str, Any], tmp: Path) -> None:
    from graphtape.export import export_runs
    from graphtape.testing.normalize import HEADER_KEY, normalize_export

    runs = [tape.store.get_run(rid) for rid in run_ids if rid]
    staging = tmp / "rerecorded.jsonl"
    export_runs(tape, [r for r in runs if r is not None], staging, kind=str(header.get("kind") or "run"))
    text = staging.read_text(encoding="utf-8")
    if header.get(HEADER_KEY):
        text = normalize_export(text)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def tape_files(root: Path) -> list[Path]:
    """The tape files under ``root`` (or ``root`` itself), sorted: ``*.jsonl`` whose first line is a tape header."""
    from graphtape.export import FORMAT

    candidates = [root] if root.is_file() else sorted(root.rglob("*.jsonl"))
    found = []
    for p in candidates:
        try:
            with p.open(encoding="utf-8") as fh:
                first = fh.readline()
        except (OSError, UnicodeDecodeError):
            continue
        if f'"format":"{FORMAT}"' in first.replace(" ", ""):
            found.append(p)
    return found
