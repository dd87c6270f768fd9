"""Documentation checked by tests: every CLI command has a section in docs/cli.md."""

from __future__ import annotations

from pathlib import Path

import typer

from graphtape.cli.app import app

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_cli_command_is_documented():
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = [name for name in commands if f"## `graphtape {name}`" not in text]
    assert not missing, f"docs/cli.md has no section for: {missing}"


def test_readme_links_every_doc_page():
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    pages = [p.name for p in DOCS.glob("*.md")]
    missing = [p for p in pages if f"docs/{p}" not in readme]
    assert not missing, f"README.md does not link: {missing}"
