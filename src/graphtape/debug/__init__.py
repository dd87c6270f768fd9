"""Time travel and logic injection: history, diffs, forks, overrides, breakpoints.

* :mod:`graphtape.debug.history`: the checkpoints of a run or thread
  (``Tape.history``), the state at one (``Tape.state``), run labels
  (``Tape.label``);
* :mod:`graphtape.debug.diff`: structural diffs of two states and JSON Patch
  (``Tape.diff``);
* :mod:`graphtape.debug.inject`, :mod:`graphtape.debug.edit`,
  :mod:`graphtape.debug.debugger`: forks, overrides, breakpoints.
"""

from graphtape.debug.debugger import Breakpoint, Debugger, DebugStopped, Pause
from graphtape.debug.diff import Change, StateDiff, diff_states, json_view
from graphtape.debug.history import Branch, BranchRun, CheckpointRef, History, HistoryEntry

__all__ = [
    "Branch",
    "BranchRun",
    "Breakpoint",
    "Change",
    "CheckpointRef",
    "DebugStopped",
    "Debugger",
    "History",
    "HistoryEntry",
    "Pause",
    "StateDiff",
    "diff_states",
    "json_view",
]
