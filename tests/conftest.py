"""Shared fixtures: one ``tape`` fixture parametrised over every store backend.

Tests never name a backend; they take ``tape`` (or ``store_url``) and run
once per backend listed in ``BACKENDS``.
"""

from __future__ import annotations

import pytest

import graphtape

BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tape.db"
    raise AssertionError(request.param)  # pragma: no cover


@pytest.fixture
def tape(store_url):
    t = graphtape.connect(store_url)
    yield t
    t.close()


@pytest.fixture(autouse=True)
def _no_default_store(tmp_path, monkeypatch):
    """Tests must never write ``.graphtape/`` into the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRAPHTAPE_URL", raising=False)
