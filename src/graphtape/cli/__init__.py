"""The ``graphtape`` command line (``graphtape --help``); see ``docs/cli.md``."""

from graphtape.cli.app import app, main

__all__ = ["app", "main"]
