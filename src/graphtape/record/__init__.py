"""Capture: interceptions of LLM, tool and effect calls, node tasks and checkpoints."""

from __future__ import annotations


def install() -> None:
    """Install the process-wide interceptions (idempotent; inert outside recorded runs)."""
    from graphtape.record import llm, task_runner, tools

    llm.install()
    tools.install()
    task_runner.install()


def uninstall() -> None:
    """Remove them again: langchain's methods, LangGraph's task runner (and executor, see graphtape.replay.saver).

    Raises :class:`~graphtape.errors.PatchConflict` (and removes
    nothing of that kind) if another library wrapped one of the methods after
    graphtape: restoring ours would silently drop its wrapper.
    """
    import sys

    from graphtape.record import llm, task_runner, tools

    # the strict replay's patch on LangGraph's executor (graphtape.replay.saver), if a replay installed it
    replay_saver = sys.modules.get("graphtape.replay.saver")
    if replay_saver is not None:
        replay_saver.uninstall()
    task_runner.uninstall()
    tools.uninstall()
    llm.uninstall()
