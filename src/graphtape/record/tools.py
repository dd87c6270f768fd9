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

from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import BaseTool

from graphtape import serde
from graphtape.calls import fingerprint
from graphtape.record.codeprint import tool_code
from graphtape.record.context import current_session
from graphtape.record.intercept import CallKind, Interceptor, Patch
from graphtape.record.session import Call, Session


def _split(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, dict[str, Any], dict[str, Any] | None, str | None]:
    """A tool call's input, config, metadata and tool call id, from ``BaseTool.run``'s arguments."""
    tool_input = args[0] if args else kwargs.get("tool_input")
    config = kwargs.get("config") or {}
    metadata = dict(config.get("metadata") or {})
    if kwargs.get("metadata"):
        metadata.update(kwargs["metadata"])
    return tool_input, config, metadata or None, kwargs.get("tool_call_id")


def _request_form(value: Any) -> Any:
    """A tool's input as its request holds it: the messages in it without their ids.

    A tool run as a node, or with ``InjectedState``, is given the state, whose messages
    ``add_messages`` stamps with fresh uuids on every execution (as a model's request, see
    :func:`graphtape.serde.message_for_request`): with them, no replay of it would match.
    """
    if isinstance(value, BaseMessage):
        return serde.message_for_request(value)
    if isinstance(value, dict):
        return {k: _request_form(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_request_form(v) for v in value]
    return value


def _begin(session: Session, tool: BaseTool, tool_input: Any, metadata: dict[str, Any] | None) -> Call:
    request = {"tool": tool.name, "input": serde.to_jsonable(_request_form(tool_input))}
    request = serde.redact(request, session.tape.redact_keys)
    # the code that answers: a tool fixed since the recording is not served its old answer in flight mode
    return session.begin(
        "tool", metadata, request, fingerprint(request), summary={"name": tool.name, "code": _code(tool)}
    )


#: (the tool's class, its func, its coroutine, its class's _run and _arun) -> the fingerprint of its code;
#: at most _CODES_MAX tools
_CODES: dict[tuple[Any, ...], str] = {}
_CODES_MAX = 4096


def _code(tool: BaseTool) -> str:
    """``tool_code(tool)``, worked out once per tool function (every call of a tool records it).

    ``tool_code`` reads each function's source once (it is cached per function
    object) but joins and hashes the sources on every call; the fingerprint
    depends only on the functions, which are the key here (a class's methods
    too: they answer for a tool without a function, and may be replaced).
    """
    cls = type(tool)
    key = (
        cls,
        getattr(tool, "func", None),
        getattr(tool, "coroutine", None),
        getattr(cls, "_run", None),
        getattr(cls, "_arun", None),
    )
    try:
        return _CODES[key]
    except KeyError:
        pass
    except TypeError:  # a callable that cannot be a key
        return tool_code(tool)
    code = tool_code(tool)
    if len(_CODES) >= _CODES_MAX:
        _CODES.clear()
    _CODES[key] = code
    return code


def _present(call: Call, value: Any) -> Any:
    tool_call_id = call.caller_id
    if isinstance(value, ToolMessage) and tool_call_id and value.tool_call_id != tool_call_id:
        value = value.model_copy(update={"tool_call_id": tool_call_id})
    if call.override is not None and tool_call_id and not isinstance(value, ToolMessage):
        # An override given as plain data: answer the way the tool would have.
        value = ToolMessage(
            content=value if isinstance(value, str) else serde.canonical_json(value),
            tool_call_id=tool_call_id,
            name=call.summary.get("name"),
        )
    return value


TOOL = CallKind(present=_present)


def _wrap_run(original: Any) -> Any:
    def run(self: BaseTool, *args: Any, **kwargs: Any) -> Any:
        tool_input, config, metadata, tool_call_id = _split(args, kwargs)
        session = current_session(config)
        if session is None:
            return original(self, *args, **kwargs)
        call = _begin(session, self, tool_input, metadata)
        call.caller_id = tool_call_id
        return TOOL.run(session, call, lambda: original(self, *args, **kwargs))

    run.__wrapped__ = original  # type: ignore[attr-defined]
    return run


def _wrap_arun(original: Any) -> Any:
    async def arun(self: BaseTool, *args: Any, **kwargs: Any) -> Any:
        tool_input, config, metadata, tool_call_id = _split(args, kwargs)
        session = current_session(config)
        if session is None:
            return await original(self, *args, **kwargs)
        call = _begin(session, self, tool_input, metadata)
        call.caller_id = tool_call_id
        return await TOOL.arun(session, call, lambda: original(self, *args, **kwargs))

    arun.__wrapped__ = original  # type: ignore[attr-defined]
    return arun


INTERCEPTOR = Interceptor("tool", [Patch(BaseTool, "run", _wrap_run), Patch(BaseTool, "arun", _wrap_arun)])


def install() -> None:
    """Wrap ``BaseTool.run``/``arun`` (idempotent; inert outside recorded runs)."""
    INTERCEPTOR.install()


def uninstall() -> None:
    """Restore ``BaseTool.run``/``arun`` (raises PatchConflict if someone wrapped them after graphtape)."""
    INTERCEPTOR.uninstall()
