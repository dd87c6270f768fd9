"""graphtape's shipped store conformance suite, run against every backend."""

from __future__ import annotations

import pytest

from graphtape.store import open_store
from graphtape.testing.conformance import StoreConformance


class TestStoreConformance(StoreConformance):
    @pytest.fixture
    def conformance_store(self, store_url):
        store = open_store(store_url)
        yield store
        store.close()
