"""Capture: interceptions of LLM, tool and effect calls, node tasks and checkpoints."""

from __future__ import annotations


def install() -> None:
    """Install the process-wide interceptions (idempotent; inert outside recorded runs)."""
    from graphtape.record import llm, tools

    llm.install()
    tools.install()
