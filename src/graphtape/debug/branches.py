"""The branch tree of a thread: runs that continue one another, forks, replays, labels.

A thread's runs that continue one another form one branch; a run that
starts elsewhere than the tip of its branch (LangGraph time travel,
``update_state``) starts a ``fork`` branch under the checkpoint it started
from; replays (and graphtape's forks, which are replays in a new thread)
are ``replay``/``fork`` branches under the run they replay. A label and a
note can be attached to any run; a branch shows the latest label of its
runs.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from graphtape import events
from graphtape.debug.listing import Keys, Reader
from graphtape.errors import GraphtapeError
from graphtape.store.base import RunRecord

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = ["LABEL_KIND", "LABEL_SEQ_BASE", "Branch", "BranchRun", "branch_run", "build_tree"]

#: Event kind of a run label; the latest label event of a run wins.
LABEL_KIND = events.Label.KIND
#: Label events are appended at sequence numbers from here on, so that a label
#: written while the run is still recording (by another process) can never
#: take a sequence number the recording session will use.
LABEL_SEQ_BASE = 1 << 40


@dataclasses.dataclass
class BranchRun:
    """A run as it appears in the branch tree."""

    run_id: str
    thread_id: str
    status: str
    mode: str
    started_at: float
    ended_at: float | None = None
    parent_run_id: str | None = None
    replay_of: str | None = None
    label: str | None = None
    note: str | None = None
    labeled_at: float | None = None
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Branch:
    """A line of runs that continue one another, and the branches that leave it.

    ``kind`` is ``main`` (a thread's first line), ``fork`` (started from an
    earlier checkpoint, an edited state or graphtape's fork) or ``replay``.
    ``from_run``/``from_checkpoint`` say where it leaves its parent branch;
    ``via`` lists the checkpoints written outside any run on the way
    (``update_state``, copies), oldest first.
    """

    id: str
    kind: str
    thread_id: str
    runs: list[BranchRun] = dataclasses.field(default_factory=list)
    from_run: str | None = None
    from_checkpoint: str | None = None
    via: list[str] = dataclasses.field(default_factory=list)
    children: list[Branch] = dataclasses.field(default_factory=list)

    @property
    def label(self) -> str | None:
        labeled = [r for r in self.runs if r.labeled_at is not None]
        return max(labeled, key=lambda r: r.labeled_at or 0).label if labeled else None

    @property
    def note(self) -> str | None:
        labeled = [r for r in self.runs if r.labeled_at is not None]
        return max(labeled, key=lambda r: r.labeled_at or 0).note if labeled else None

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    def walk(self) -> Iterator[Branch]:
        yield self
        for child in self.children:
            yield from child.walk()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "thread_id": self.thread_id,
            "label": self.label,
            "note": self.note,
            "from_run": self.from_run,
            "from_checkpoint": self.from_checkpoint,
            "via": list(self.via),
            "runs": [r.to_dict() for r in self.runs],
            "children": [c.to_dict() for c in self.children],
        }


def branch_run(run: RunRecord, labels: dict[str, tuple[int, float, events.Label]]) -> BranchRun:
    """A run as the tree shows it, with its latest label (``labels``: run id -> (seq, time, label))."""
    meta = run.meta or {}
    detail: dict[str, Any] = {
        k: meta[k] for k in ("replay_mode", "fork_of", "override_of", "invalidate_from", "edit") if k in meta
    }
    br = BranchRun(
        run.run_id,
        run.thread_id,
        run.status,
        run.mode,
        run.started_at,
        run.ended_at,
        run.parent_run_id,
        run.replay_of,
        detail=detail,
    )
    lab = labels.get(run.run_id)
    if lab is not None:
        br.label, br.note, br.labeled_at = lab[2].label, lab[2].note, lab[1]
    return br


def config_start(tape: Tape, run: RunRecord) -> str | None:
    """The checkpoint a run was invoked from (``checkpoint_id`` in its recorded config), if any."""
    try:
        started = tape.store.events(run.run_id, [events.RunStarted.KIND])
        if not started:
            return None
        cfg: Any = events.RunStarted.from_row(started[0]).config
        if isinstance(cfg, str):
            cfg = tape.store.get_json(cfg)
        value = ((cfg or {}).get("configurable") or {}).get("checkpoint_id")
        return str(value) if value else None
    except GraphtapeError:
        return None


def build_tree(
    tape: Tape,
    reader: Reader,
    thread_id: str,
    thread_runs: list[RunRecord],
    rows: list[tuple[Any, ...]],
    keys: Keys,
    copies: dict[str, str],
    nested: bool,
    labels: dict[str, tuple[int, float, events.Label]],
    runs_info: dict[str, BranchRun],
    labels_read_for: Sequence[str],
) -> list[Branch]:
    """The tree of branches around a thread's runs (``rows``: its listed checkpoints, oldest first).

    Fills ``runs_info`` with every run placed in the tree; reads the labels of
    runs not in ``labels_read_for`` (replays in other threads).
    """
    # rows are Row-shaped tuples, oldest first
    root_rows = [r for r in rows if not r[6]] if nested else rows
    first_root: dict[str, tuple[Any, ...]] = {}
    last_root: dict[str, tuple[Any, ...]] = {}
    # a thread's runs follow one another (one writer per thread): their rows are runs of equal ids
    for key, group in itertools.groupby(root_rows, operator.itemgetter(4)):
        rid = keys[key][0]
        if rid is not None:
            first = next(group)
            first_root.setdefault(rid, first)
            # the group's last row, without keeping the others (next() above took the first: a second pass by design)
            rest = collections.deque(group, maxlen=1)  # noqa: B031
            last_root[rid] = rest[-1] if rest else first
    index: dict[str, tuple[Any, ...]] | None = None

    def row_of(cid: str | None) -> tuple[Any, ...] | None:
        """The root row with this id; indexed on first use (a thread of one run never asks)."""
        nonlocal index
        if cid is None:
            return None
        if index is None:
            index = {r[0]: r for r in root_rows}
        return index.get(cid)

    # the replays of these runs, of their replays, ...: runs (and their threads) elsewhere
    replays = reader.replay_runs()
    by_replayed: dict[str, list[RunRecord]] = {}
    for r in replays:
        by_replayed.setdefault(r.replay_of or "", []).append(r)
    tree_runs = {r.run_id for r in thread_runs}
    replay_thread_runs: dict[str, list[RunRecord]] = {}  # in the order they were found
    frontier = list(tree_runs)
    while frontier:
        nxt = []
        for rid in frontier:
            for rep in by_replayed.get(rid, []):
                if rep.thread_id != thread_id and rep.thread_id not in replay_thread_runs:
                    t_runs = tape.store.list_runs(thread_id=rep.thread_id, limit=None, newest_first=False)
                    replay_thread_runs[rep.thread_id] = t_runs
                    for other in t_runs:
                        if other.run_id not in tree_runs:
                            tree_runs.add(other.run_id)
                            nxt.append(other.run_id)
        frontier = nxt

    read = set(labels_read_for)
    missing = [rid for rid in tree_runs if rid not in read]
    if missing:
        for run_id, seq, _k, ts, *_rest, data in reader.events(sorted(missing), [LABEL_KIND]):
            prev = labels.get(run_id)
            if prev is None or seq > prev[0]:
                labels[run_id] = (seq, ts, events.Label.from_data(data))

    branch_of: dict[str, Branch] = {}  # run id -> its branch
    tips: dict[str, str | None] = {}  # branch id -> the checkpoint where it stopped
    at_tip: dict[str, list[Branch]] = {}  # checkpoint id -> the branches that stopped there
    roots: list[Branch] = []

    def new_branch(r: RunRecord, kind: str, parent: Branch | None, **kw: Any) -> Branch:
        b = Branch(id=r.run_id, kind=kind, thread_id=r.thread_id, **kw)
        (parent.children if parent is not None else roots).append(b)
        return b

    def set_tip(b: Branch, tip: str | None) -> None:
        old = tips.get(b.id)
        if old is not None and b in at_tip.get(old, []):
            at_tip[old].remove(b)
        tips[b.id] = tip
        if tip is not None:
            at_tip.setdefault(tip, []).append(b)

    for r in thread_runs:
        runs_info[r.run_id] = info = branch_run(r, labels)
        first_row = first_root.get(r.run_id)
        start = first_row[1] if first_row is not None else config_start(tape, r) if r.parent_run_id else None
        # checkpoints written outside runs (update_state, copies) between the start and a run's checkpoint
        via: list[str] = []
        s = start
        while s is not None and (row := row_of(s)) is not None and keys[row[4]][0] is None:
            via.append(s)
            s = row[1]
        via.reverse()
        anchor_row = row_of(s)
        anchor = s if anchor_row is not None else None
        owner = keys[anchor_row[4]][0] if anchor_row is not None else None
        owner_branch = branch_of.get(owner) if owner is not None else None
        time_travel = first is not None and keys[first[4]][1] == "fork"
        stopped_here = at_tip.get(start, []) if start is not None else []
        previous = branch_of.get(r.parent_run_id or "")
        if stopped_here and not time_travel:
            # it picks up where a branch stopped (a resume, the next turn)
            b = previous if previous in stopped_here else stopped_here[0]
        elif owner_branch is not None:
            b = new_branch(r, "fork", owner_branch, from_run=owner, from_checkpoint=anchor, via=via)
        elif start is None and previous is not None:
            b = previous
        else:
            copied = next((copies[v] for v in via if v in copies), None)
            b = new_branch(
                r,
                "main" if not roots else "fork",
                previous or (roots[-1] if roots else None),
                from_checkpoint=copied,
                via=via,
            )
        b.runs.append(info)
        branch_of[r.run_id] = b
        last = last_root.get(r.run_id)
        if last is not None:
            set_tip(b, last[0])
        elif b.id not in tips:
            set_tip(b, start)

    # replay threads, parents before children
    for t, t_runs in replay_thread_runs.items():
        if not t_runs:
            continue
        head = t_runs[0]
        replayed = head.replay_of
        parent = branch_of.get(replayed or "")
        meta = head.meta or {}
        from_cp = meta.get("fork_of")
        if from_cp is None:
            from_cp = next(iter(reader.copies(t).values()), None)
        kind = "fork" if meta.get("fork_of") or meta.get("edit") else "replay"
        b = Branch(id=head.run_id, kind=kind, thread_id=t, from_run=replayed, from_checkpoint=from_cp)
        (parent.children if parent is not None else roots).append(b)
        for r in t_runs:
            runs_info[r.run_id] = info = branch_run(r, labels)
            b.runs.append(info)
            branch_of[r.run_id] = b
    if not roots and not thread_runs:
        roots.append(Branch(id=thread_id, kind="main", thread_id=thread_id))
    return roots
