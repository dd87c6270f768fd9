"""graphtape's saver serialises a small scalar once (a routing write's None every super-step, a
counter written by its task and again as the next checkpoint's value): the memo must give each
value its own bytes, as serialising it again would."""

from __future__ import annotations

from pathlib import Path

from graphtape import serde
from graphtape.runtime.saver import GraphtapeSaver
from graphtape.store.base import WriteBatch
from graphtape.store.sqlite import SqliteTapeStore


def test_scalars_are_memoised_with_their_own_bytes(tmp_path: Path) -> None:
    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        saver = GraphtapeSaver(store)
        values = [None, True, False, 0, 1, -1, 2**62, "", "x", "y" * 64, "z" * 65, 0.0, -0.0, 1.5]
        first = WriteBatch()
        addresses = [saver._blob(v, first) for v in values]
        again = WriteBatch()
        assert [saver._blob(v, again) for v in values] == addresses  # the memo, for what it holds
        assert again.blobs == first.blobs  # and the bytes go with every batch that refers to them
        for value, address in zip(values, addresses):
            type_, data = saver.serde.dumps_typed(value)
            blob = type_.encode() + b"\x00" + data
            assert serde.digest(blob) == address and first.blobs[address] == blob
        # equal but distinct values keep distinct bytes (True == 1, 0.0 == -0.0)
        assert len({addresses[1], addresses[4]}) == 2 and len({addresses[11], addresses[12]}) == 2
        assert (bool, True) in saver._scalars and (str, "z" * 65) not in saver._scalars
        assert not any(t is float for t, _ in saver._scalars)
        # read back as the values they were
        for value, address in zip(values, addresses):
            stored_type, _, stored = first.blobs[address].partition(b"\x00")
            back = saver.serde.loads_typed((stored_type.decode(), stored))
            assert back == value and type(back) is type(value)
    finally:
        store.close()
