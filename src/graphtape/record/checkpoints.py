"""A checkpoint saver wrapper that links LangGraph's checkpoints to the tape.

Every ``put`` is delegated to the user's saver (or graphtape's default) and
then becomes a ``checkpoint`` event on the run that wrote it; the run is
found through ``graphtape_run_id`` in the checkpoint metadata, which
LangGraph copies from the run's config. The tape's buffered events are
flushed right after each checkpoint, so a crash loses at most one
super-step of tape, and, under LangGraph's default ``durability="async"``,
the flush happens on LangGraph's background writer, off the hot path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.types import INTERRUPT

from graphtape.record.context import RUN_META_KEY, session_for_run


def note_interrupts(config: Mapping[str, Any], writes: Sequence[tuple[str, Any]]) -> None:
    """Tell the run that a task paused on ``interrupt()`` (its status then needs a state read)."""
    if any(channel == INTERRUPT for channel, _ in writes):
        rid = (config.get("metadata") or {}).get(RUN_META_KEY)
        session = session_for_run(rid)
        if session is not None:
            session.saw_interrupt = True


class TapSaver(BaseCheckpointSaver):
    """Delegates everything to ``inner``; reports each saved checkpoint."""

    def __init__(self, inner: BaseCheckpointSaver):
        super().__init__(serde=inner.serde)
        self.inner = inner

    def __getattr__(self, name: str) -> Any:  # setup(), conn, ... of the inner saver
        return getattr(self.inner, name)

    @property
    def config_specs(self) -> list:
        return self.inner.config_specs

    def _tap(self, config: dict[str, Any], checkpoint: Any, metadata: Any) -> None:
        # Savers merge the config's metadata into the stored metadata themselves,
        # so the run id is found on the config, not on ``metadata``.
        rid = (config.get("metadata") or {}).get(RUN_META_KEY) or (metadata or {}).get(RUN_META_KEY)
        session = session_for_run(rid)
        if session is not None:
            session.on_checkpoint(config, checkpoint, metadata)
            session.maybe_flush()

    # -- sync ---------------------------------------------------------------
    def get_tuple(self, config):
        return self.inner.get_tuple(config)

    def list(self, config, *, filter=None, before=None, limit=None) -> Iterator:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    def put(self, config, checkpoint, metadata, new_versions):
        out = self.inner.put(config, checkpoint, metadata, new_versions)
        self._tap(config, checkpoint, metadata)
        return out

    def put_writes(self, config, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        self.inner.put_writes(config, writes, task_id, task_path)
        note_interrupts(config, writes)

    def delete_thread(self, thread_id: str) -> None:
        return self.inner.delete_thread(thread_id)

    def delete_for_runs(self, run_ids):
        return self.inner.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id, target_thread_id):
        return self.inner.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids, *, strategy="keep_latest"):
        return self.inner.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current, channel):
        return self.inner.get_next_version(current, channel)

    def get_delta_channel_history(self, *args, **kwargs):
        return self.inner.get_delta_channel_history(*args, **kwargs)

    # -- async ----------------------------------------------------------------
    async def aget_tuple(self, config):
        return await self.inner.aget_tuple(config)

    async def alist(self, config, *, filter=None, before=None, limit=None) -> AsyncIterator:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config, checkpoint, metadata, new_versions):
        out = await self.inner.aput(config, checkpoint, metadata, new_versions)
        self._tap(config, checkpoint, metadata)
        return out

    async def aput_writes(self, config, writes, task_id, task_path=""):
        out = await self.inner.aput_writes(config, writes, task_id, task_path)
        note_interrupts(config, writes)
        return out

    async def adelete_thread(self, thread_id):
        return await self.inner.adelete_thread(thread_id)

    async def adelete_for_runs(self, run_ids):
        return await self.inner.adelete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id, target_thread_id):
        return await self.inner.acopy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids, *, strategy="keep_latest"):
        return await self.inner.aprune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(self, *args, **kwargs):
        return await self.inner.aget_delta_channel_history(*args, **kwargs)
