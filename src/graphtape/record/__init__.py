"""Capture: interceptions of LLM, tool and effect calls, node tasks and checkpoints."""

from __future__ import annotations


def install() -> None:
    """Install the process-wide interceptions (idempotent; inert outside recorded runs)."""
    from graphtape.record import llm, tools

    llm.install()
    tools.install()


def uninstall() -> None:
    """Remove them again, restoring langchain's methods.

    Raises :class:`~graphtape.errors.PatchConflict` (and removes
    nothing of that kind) if another library wrapped one of the methods after
    graphtape: restoring ours would silently drop its wrapper.
    """
    from graphtape.record import llm, tools

    tools.uninstall()
    llm.uninstall()
