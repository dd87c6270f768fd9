"""Capturing and serving tool calls.

``ToolNode(wrap_tool_call=...)`` is LangGraph's official interceptor, but it
only sees tools run by a ``ToolNode`` the user built with that argument, and
tools called directly from node code have no hook at all. Every tool,
however it is called (``ToolNode``, ``tool.invoke`` in a node, an agent
from ``langchain``), ends in ``BaseTool.run`` / ``BaseTool.arun``, so those
are wrapped: one place, no change to the user's graph.

A served call returns the recorded result object (a ``ToolMessage`` when the
tool was called with a tool call id, whose id is set to the current call's
so the conversation stays consistent) without running the tool.
"""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from graphtape import serde
from graphtape.record.codeprint import tool_code
from graphtape.record.session import Call, Session, current_session

_installed = False
_install_lock = threading.Lock()
_orig_run = BaseTool.run
_orig_arun = BaseTool.arun


def _split(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any] | None, str | None]:
    tool_input = args[0] if args else kwargs.get("tool_input")
    config = kwargs.get("config") or {}
    metadata = dict(config.get("metadata") or {})
    if kwargs.get("metadata"):
        metadata.update(kwargs["metadata"])
    return tool_input, metadata or None, kwargs.get("tool_call_id")


def _begin(session: Session, tool: BaseTool, tool_input: Any, metadata: dict[str, Any] | None) -> Call:
    request = {"tool": tool.name, "input": serde.to_jsonable(tool_input)}
    request = serde.redact(request, session.tape.redact_keys)
    fingerprint = serde.digest(serde.canonical_json(request))
    # the code that answers: a tool fixed since the recording is not served its old answer in flight mode
    return session.begin("tool", metadata, request, fingerprint, summary={"name": tool.name, "code": tool_code(tool)})


def _serve(session: Session, call: Call, tool_call_id: str | None) -> Any:
    value, error = session.served_value(call)
    if error is not None:
        raise error
    if isinstance(value, ToolMessage) and tool_call_id and value.tool_call_id != tool_call_id:
        value = value.model_copy(update={"tool_call_id": tool_call_id})
    if call.override is not None and tool_call_id and not isinstance(value, ToolMessage):
        # An override given as plain data: answer the way the tool would have.
        value = ToolMessage(content=value if isinstance(value, str) else serde.canonical_json(value),
                            tool_call_id=tool_call_id, name=call.summary.get("name"))
    return value


def _run(self: BaseTool, *args: Any, **kwargs: Any) -> Any:
    tool_input, metadata, tool_call_id = _split(args, kwargs)
    session = current_session(metadata)
    if session is None:
        return _orig_run(self, *args, **kwargs)
    call = _begin(session, self, tool_input, metadata)
    if call.served is not None:
        return _serve(session, call, tool_call_id)
    try:
        result = _orig_run(self, *args, **kwargs)
    except BaseException as exc:
        session.end_live(call, error=exc)
        raise
    session.end_live(call, result=result)
    return result


async def _arun(self: BaseTool, *args: Any, **kwargs: Any) -> Any:
    tool_input, metadata, tool_call_id = _split(args, kwargs)
    session = current_session(metadata)
    if session is None:
        return await _orig_arun(self, *args, **kwargs)
    call = _begin(session, self, tool_input, metadata)
    if call.served is not None:
        return _serve(session, call, tool_call_id)
    try:
        result = await _orig_arun(self, *args, **kwargs)
    except BaseException as exc:
        session.end_live(call, error=exc)
        raise
    session.end_live(call, result=result)
    return result


def install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        BaseTool.run = _run  # type: ignore[method-assign]
        BaseTool.arun = _arun  # type: ignore[method-assign]
        _installed = True
