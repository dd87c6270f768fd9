"""Stopping the Studio's worker pool is bounded: a task that ignores its cancellation is left behind, logged."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

pytest.importorskip("fastapi")

from graphtape.server.studio import create_app, workers
from tests.app_client import app_client
from tests.studio_graphs import studio_graphs


async def test_a_task_that_ignores_its_cancellation_does_not_hold_the_shutdown(tape, monkeypatch, caplog):
    monkeypatch.setattr(workers, "STOP_WAIT_SECONDS", 0.3)
    released = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await released.wait()  # swallows the cancel and waits for what never comes

    app = create_app(tape, studio_graphs())
    caplog.set_level(logging.WARNING, logger=workers.__name__)
    async with app_client(app, timeout=30) as c:
        assert (await c.get("/ok")).status_code == 200
        pool = app.state.studio.workers
        task = asyncio.create_task(stubborn(), name="stubborn-run")
        await asyncio.sleep(0)
        pool.executing["run-that-will-not-stop"] = task
        started = time.monotonic()
    # the lifespan ended (the client's exit ran the shutdown) in about the bounded wait, not never
    assert time.monotonic() - started < 5
    assert not task.done()
    assert "stubborn-run" in caplog.text and "did not stop" in caplog.text and "stubborn" in caplog.text
    released.set()
    await task
