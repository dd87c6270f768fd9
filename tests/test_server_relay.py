"""How a run's stream is stopped when the run is cancelled while its publisher is busy.

The recorder tells a run cancelled from outside (``interrupted``) from a stream
its consumer closed early (``failed``) by what reaches the stream: a
cancellation, or ``GeneratorExit``. A cancel lands wherever the run's task is
waiting; when that is in the publisher (writing an event to the store), the
stream must still be stopped with the cancellation.
"""

from __future__ import annotations

import asyncio

from graphtape.server.studio.runs import _relay


async def test_a_cancel_during_the_publisher_reaches_the_stream_as_a_cancellation():
    seen: list[str] = []
    busy = asyncio.Event()

    async def stream():
        try:
            for i in range(10):
                yield i
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        except GeneratorExit:
            seen.append("closed")
            raise

    async def publish(item: int) -> None:
        busy.set()
        await asyncio.sleep(30)  # the publisher is writing when the cancel comes

    task = asyncio.create_task(_relay(stream(), publish))
    await busy.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the relay swallowed the cancellation")
    assert seen == ["cancelled"]
