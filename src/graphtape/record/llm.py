"""Capturing and serving chat-model calls.

Where to hook, and what was rejected:

* A global ``BaseCache`` (``set_llm_cache``) is langchain-core's supported
  substitution point, but models with their own ``cache=`` or
  ``cache=False`` skip it, installing one would replace the user's global
  cache, and explicit ``.stream()``/``.astream()`` bypass it entirely.
* Callbacks can observe but never substitute an answer.

So graphtape wraps ``BaseChatModel._generate_with_cache`` /
``_agenerate_with_cache`` (the single per-request path under ``invoke``,
``ainvoke``, ``batch``, ``abatch`` and ``generate``; it sits *outside* the
model's cache lookup, so the user's caches keep working and ``cache=False``
changes nothing) and the public ``stream``/``astream`` (which never reach
it when the model implements ``_stream`` or ``_astream``). ``batch``/``abatch``
(and the ``_as_completed`` forms) are wrapped only to give each input a
stable slot (see ``_slotted``). The wrappers cost one ContextVar read when
no run is being recorded. Callbacks still fire for served calls because the
wrappers run inside langchain's callback bracket.

In a replay, ``invoke``/``ainvoke`` are wrapped too: when no callback
handler would see the call (:mod:`graphtape.record.serve_fast`), the call
is registered there, with the request ``generate`` would have passed on,
and a served one is answered without langchain's callback manager, run
managers and result objects (most of a served call's cost). A call that
is not served (flight mode) still runs through langchain, which hands it
to ``_generate_with_cache`` already registered.

A request is fingerprinted as it is sent: classes among the parameters by
their JSON Schema (:func:`schema_of`), tracing-only arguments left out.
``install`` also keeps ``Runnable.with_retry`` from retrying graphtape's
control errors (see graphtape.errors).
"""

from __future__ import annotations

import contextvars
import json
import marshal
import operator
from collections.abc import AsyncIterator, Callable, Iterator
from itertools import repeat
from typing import Any

from langchain_core.language_models._utils import _normalize_messages
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables.config import ensure_config

from graphtape import serde
from graphtape.calls import BATCH_SLOT_KEY, chat_fingerprint
from graphtape.record.context import adopt, current_session, reset_current
from graphtape.record.intercept import CallKind, Interceptor, Patch
from graphtape.record.serve_fast import call_metadata, nobody_listens
from graphtape.record.session import Call, Session
from graphtape.record.writer import MessageForm, TapeWriter

#: Set (only around a synchronous inner ``invoke``) when a stream call has
#: already been answered from the tape and the inner call must not be
#: registered a second time.
_SERVING: contextvars.ContextVar[tuple[Session, Call] | None] = contextvars.ContextVar(
    "graphtape_serving", default=None
)

#: Set by the replay fast path of ``invoke``/``ainvoke`` around langchain's own ``invoke`` when the
#: call it registered is not served from the tape (it runs live, in flight mode): the
#: ``_generate_with_cache`` under it takes that call instead of registering the request again.
_BEGUN: contextvars.ContextVar[tuple[Session, Call] | None] = contextvars.ContextVar("graphtape_begun", default=None)


def model_name(model: BaseChatModel, params: dict[str, Any]) -> str:
    for key in ("model_name", "model", "model_id", "deployment_name"):
        v = params.get(key) or getattr(model, key, None)
        if isinstance(v, str) and v:
            return v
    return params.get("_type") or type(model).__name__


#: Call arguments langchain uses for tracing only and never sends (popped by ``generate``
#: before ``_generate_with_cache``, but still present where ``stream`` is intercepted).
_TRACING_ONLY = ("ls_structured_output_format", "structured_output_format")


def schema_of(cls: type, key: str | None = None) -> Any:
    """The JSON Schema a provider is sent for a class given as a call parameter.

    ``with_structured_output(Model)`` on ChatOpenAI (``json_schema``, the
    default) passes ``response_format=Model`` down to the ``openai`` SDK,
    which turns it into a strict JSON Schema. Described by its ``repr`` the
    class looks the same after its fields were edited, and an edited schema
    was served from the tape. So a class is described by its schema: for
    ``response_format`` exactly as the OpenAI SDK sends it, otherwise its
    Pydantic or langchain JSON Schema; a class with no schema (none is
    sent for it) by its qualified name.
    """
    if key == "response_format":
        try:
            from openai.lib._parsing._completions import type_to_response_format_param

            return type_to_response_format_param(cls)
        except Exception:  # openai not installed, or not a type it can send
            pass
    try:
        if hasattr(cls, "model_json_schema"):
            return cls.model_json_schema()
        if hasattr(cls, "schema") and hasattr(cls, "__fields__"):  # Pydantic v1 models
            return cls.schema()
    except Exception:
        pass
    try:
        import enum

        if issubclass(cls, enum.Enum):
            return {"title": cls.__name__, "enum": [serde.to_jsonable(m.value) for m in cls]}
        from langchain_core.utils.function_calling import convert_to_json_schema

        return convert_to_json_schema(cls)  # TypedDict and the like
    except Exception:
        return {"class": f"{cls.__module__}.{cls.__qualname__}"}


def sent_form(value: Any, key: str | None = None) -> Any:
    """``value`` with every class replaced by the schema it is sent as (see :func:`schema_of`)."""
    if isinstance(value, type):
        return schema_of(value, key)
    if isinstance(value, dict):
        return {k: sent_form(v, k if isinstance(k, str) else None) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sent_form(v, key) for v in value]
    return value


#: (model class, redact keys, the model's parameters for a call as ``marshal`` bytes) -> that call's
#: request (``{"model": parameters as sent and stored, "class": ...}``), its canonical JSON and its
#: blob (stored bytes, address); None for parameters that are worked out on every call. At most
#: _REQUESTS_MAX entries.
_REQUESTS: dict[tuple[type, frozenset[str], bytes], tuple[dict[str, Any], str, tuple[bytes, str]] | None] = {}
_REQUESTS_MAX = 1024


def model_request(
    model: BaseChatModel, stop: Any, kwargs: dict[str, Any], redact_keys: frozenset[str]
) -> tuple[dict[str, Any], str, tuple[bytes, str] | None]:
    """The model part of a chat request (a new dict; its values are shared), its canonical JSON, and
    its blob as the tape stores it (stored bytes and address) when remembered, else None.

    A model is called with the same parameters again and again (every node,
    every turn): turning them into the request's JSON form (classes as their
    schema, JSON-able, secrets redacted) and canonical JSON is done once per
    distinct set of parameters. They are compared as their ``marshal``
    bytes, written in C: exact where ``==`` is not (``1``, ``1.0`` and
    ``True`` are equal but written differently, and key order is part of
    the stored request), and only plain data is ``marshal``-able, so
    parameters holding a class (``response_format=Model``, whose schema may
    have been edited), an enum or any other object are worked out on every
    call, as they were before. The parameters themselves are still asked of
    the model on every call: a field changed on the model, a bound argument
    or a call argument changes them.
    """
    sent = {k: v for k, v in kwargs.items() if k not in _TRACING_ONLY}
    raw = _invocation_params(model, stop, sent)
    try:
        key: tuple[type, frozenset[str], bytes] | None = (type(model), redact_keys, marshal.dumps(raw, 2))
    except (ValueError, TypeError):  # not plain data
        key = None
    if key is not None:
        known = _REQUESTS.get(key, _UNKNOWN)
        if known is not _UNKNOWN and known is not None:
            return {**known[0]}, known[1], known[2]
    params = serde.redact(serde.to_jsonable(sent_form(raw)), redact_keys)
    request = {"model": params, "class": f"{type(model).__module__}.{type(model).__qualname__}"}
    request_json = serde.canonical_json(request)
    if key is not None and key not in _REQUESTS:
        if len(_REQUESTS) >= _REQUESTS_MAX:
            _REQUESTS.clear()
        # marshal takes code objects too (their JSON description holds their address): only plain JSON is kept
        if _plain(raw):
            # the blob the call event refers to: the request's JSON in its own key order (what put_json
            # stores), written and hashed once per distinct set of parameters instead of on every call
            data = serde.stored_json(request)
            _REQUESTS[key] = ({**request}, request_json, (data, serde.digest(data)))
        else:
            _REQUESTS[key] = None
    return request, request_json, None


_UNKNOWN: Any = object()

#: The methods ``_get_invocation_params`` goes through on langchain's base class (see below).
_BASE_PARAMS = tuple(
    BaseChatModel.__dict__.get(name) for name in ("_get_invocation_params", "_dict_for_compat", "dict")
)
#: model class -> whether it keeps langchain's own ``_get_invocation_params``, ``_dict_for_compat``
#: and ``dict``; at most _PLAIN_CLASSES_MAX classes
_PLAIN_CLASSES: dict[type, bool] = {}
_PLAIN_CLASSES_MAX = 1024


def _invocation_params(model: BaseChatModel, stop: Any, sent: dict[str, Any]) -> dict[str, Any]:
    """``model._get_invocation_params(stop=stop, **sent)``, asked every call, in less of its time.

    langchain's own method is ``{**self.asdict(), "stop": stop, **kwargs}``,
    reached through its deprecated ``dict()`` inside a context manager that
    silences the deprecation warning (``_dict_for_compat``): that set-up was
    most of its cost (about 3 of 3.5 us, more inside a run). A class that
    keeps all three of langchain's methods gets the same dict from
    ``asdict()`` directly; a class that overrides any of them (a provider
    package's ``_get_invocation_params``, a deprecated ``dict`` override) is
    asked as before.
    """
    cls = type(model)
    plain = _PLAIN_CLASSES.get(cls)
    if plain is None:
        plain = all(
            getattr(cls, name, None) is base and base is not None
            for name, base in zip(("_get_invocation_params", "_dict_for_compat", "dict"), _BASE_PARAMS)
        )
        if len(_PLAIN_CLASSES) >= _PLAIN_CLASSES_MAX:
            _PLAIN_CLASSES.clear()
        _PLAIN_CLASSES[cls] = plain
    if not plain:
        return model._get_invocation_params(stop=stop, **sent)
    params = model.asdict()
    params["stop"] = stop
    return {**params, **sent}


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON data only (str keys; tuples allowed): what the request memo keeps."""
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return True
    if t is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if t is list or t is tuple:
        return all(_plain(v) for v in value)
    return False


#: (message class, its fields and extra fields as ``marshal`` bytes) -> its stored form, for messages
#: without an id (see _forms); at most _IDLESS_MAX entries and _IDLESS_BYTES bytes of keys and forms
_IDLESS: dict[tuple[type, bytes], MessageForm] = {}
_IDLESS_MAX = 20_000
_IDLESS_BYTES = 32 << 20
_idless_bytes = 0


_is = operator.is_
_id_of = operator.attrgetter("id")
_key_of = operator.attrgetter("key")


def _forms(writer: TapeWriter, messages: list[BaseMessage]) -> list[MessageForm]:
    """``writer.forms(messages)``, with the forms of messages without an id remembered by their content.

    A prompt built in a node (``[SystemMessage(...), HumanMessage(...)]``)
    is made of new messages without ids on every call, the same ones on
    every run of the graph (and in every replay of it): the writer
    remembers such a message only by its identity, for one run, so each
    was turned into JSON, hashed and keyed again. Here it is found by its
    fields and extra fields (``model_dump`` writes both) as ``marshal``
    bytes: exact (``1``, ``1.0`` and ``True`` differ, so do key orders), and
    only plain data is ``marshal``-able, so a message holding any other
    object is left to the writer, as is a message with an id (the writer
    remembers those process-wide).
    """
    global _idless_bytes
    if not any(map(_is, map(_id_of, messages), repeat(None))):
        # every message has an id (a graph's state: add_messages gives one to each): the writer's one
        # pass, without a second list to merge (the test runs in C: at turn 200 of a conversation a
        # Python loop over the 400 messages cost as much as the writer's look-ups of them)
        return writer.forms(messages)
    out: list[MessageForm | None] = []
    rest: list[BaseMessage] = []
    for msg in messages:
        d = msg.__dict__
        if d.get("id") is None:
            try:
                key = (type(msg), marshal.dumps((d, msg.__pydantic_extra__), 2))
            except (ValueError, TypeError):  # not plain data
                pass
            else:
                form = _IDLESS.get(key)
                if form is None:
                    form = writer.forms([msg])[0]
                    size = len(key[1]) + 2 * len(form.data)
                    if len(_IDLESS) >= _IDLESS_MAX or _idless_bytes + size > _IDLESS_BYTES:
                        _IDLESS.clear()
                        _idless_bytes = 0
                    _IDLESS[key] = form
                    _idless_bytes += size
                out.append(form)
                continue
        out.append(None)
        rest.append(msg)
    if not rest:
        return out  # type: ignore[return-value]  # no None left
    found = iter(writer.forms(rest))
    return [f if f is not None else next(found) for f in out]


def begin_llm(
    session: Session,
    model: BaseChatModel,
    messages: list[BaseMessage],
    stop: Any,
    kwargs: dict[str, Any],
    metadata: dict[str, Any] | None,
) -> Call:
    request, request_json, request_blob = model_request(model, stop, kwargs, session.tape.redact_keys)
    writer = session.writer
    forms = _forms(writer, messages)
    msg_json = [f.js for f in forms]
    # the chain stores only what the tape lacks (a conversation's history is there from earlier turns)
    head = session.put_messages([f.h for f in forms], forms)
    # canonical message keys, not blob addresses: stored blobs keep key order, fingerprints must not
    keys = list(map(_key_of, forms))
    if None in keys:  # (keys are str or None) a form met for the first time
        form_key = writer.form_key
        keys = [k if k is not None else form_key(f) for k, f in zip(keys, forms)]
    return session.begin(
        "llm",
        metadata,
        request,
        chat_fingerprint(keys, request_json),
        messages_ref=head,
        summary={"model": model_name(model, request["model"])},
        messages_view=msg_json,
        request_blob=request_blob,
    )


def _finish_live(session: Session, call: Call, messages_out: list[BaseMessage]) -> None:
    usage = None
    for m in messages_out:
        if isinstance(m, AIMessage) and m.usage_metadata:
            usage = dict(m.usage_metadata)
            break
    session.end_live(call, result=list(messages_out), usage=usage, model_name=call.summary.get("model"))


def _present(call: Call, value: Any) -> ChatResult:
    return ChatResult(generations=[ChatGeneration(message=m) for m in _as_messages(value)])


def _finish_result(session: Session, call: Call, result: ChatResult) -> None:
    _finish_live(session, call, [g.message for g in result.generations])


#: a request through ``_generate_with_cache``: served as a ChatResult, its messages recorded
LLM = CallKind(present=_present, finish=_finish_result)


def _as_messages(value: Any) -> list[BaseMessage]:
    if isinstance(value, BaseMessage):
        return [value]
    if isinstance(value, str):  # an override given as plain text
        return [AIMessage(content=value)]
    if isinstance(value, dict) and "content" in value:
        return [AIMessage(**value)]
    return [v if isinstance(v, BaseMessage) else AIMessage(content=str(v)) for v in value]


def _wrap_gen(original: Any) -> Any:
    def _generate_with_cache(
        self: BaseChatModel,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        serving = _SERVING.get()
        if serving is not None:
            return LLM.serve(*serving)
        begun = _BEGUN.get()
        if begun is not None:
            _BEGUN.set(None)  # this request only: a model called from inside it is a call of its own
            return LLM.run(*begun, lambda: original(self, messages, stop, run_manager, **kwargs))
        session = current_session()
        if session is None:
            return original(self, messages, stop, run_manager, **kwargs)
        call = begin_llm(session, self, messages, stop, kwargs, getattr(run_manager, "metadata", None))
        return LLM.run(session, call, lambda: original(self, messages, stop, run_manager, **kwargs))

    return _generate_with_cache


def _wrap_agen(original: Any) -> Any:
    async def _agenerate_with_cache(
        self: BaseChatModel,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        serving = _SERVING.get()
        if serving is not None:
            return LLM.serve(*serving)
        begun = _BEGUN.get()
        if begun is not None:
            _BEGUN.set(None)
            return await LLM.arun(*begun, lambda: original(self, messages, stop, run_manager, **kwargs))
        session = current_session()
        if session is None:
            return await original(self, messages, stop, run_manager, **kwargs)
        call = begin_llm(session, self, messages, stop, kwargs, getattr(run_manager, "metadata", None))
        return await LLM.arun(session, call, lambda: original(self, messages, stop, run_manager, **kwargs))

    return _agenerate_with_cache


def _fast_begin(
    self: BaseChatModel, input: Any, config: Any, stop: Any, kwargs: dict[str, Any]
) -> tuple[Session, Call] | None:
    """Register a replayed ``invoke``/``ainvoke`` call before langchain's ``generate`` runs, when safe.

    Only in a replay (its calls are answered from the tape) and only when no
    callback handler would see the call (:func:`~graphtape.record.serve_fast.nobody_listens`);
    otherwise None and langchain's path registers it, as in a recording.
    The request is the one ``generate`` hands to ``_generate_with_cache``:
    the same messages (normalised the same way), ``stop`` and arguments,
    so the fingerprint, the call site and a divergence report are the same.
    """
    if _SERVING.get() is not None or _BEGUN.get() is not None:
        return None
    # recording, or no run at all: settled before any config is built (langchain's path is the reference)
    found = current_session(config if isinstance(config, dict) else None)
    if found is None or not found.answerer.replays:
        return None
    cfg = ensure_config(config)
    metadata = call_metadata(cfg, self)
    session = current_session(cfg)
    if session is None or not session.answerer.replays or not nobody_listens(cfg.get("callbacks"), self):
        return None
    messages = _input_messages(self, input)
    if not all(type(m.content) is str for m in messages):
        # only a list content holds blocks to translate: text messages are passed as they are
        messages = _normalize_messages(messages)
    return session, begin_llm(session, self, messages, stop, kwargs, metadata)


def _input_messages(self: BaseChatModel, input: Any) -> list[BaseMessage]:
    """``self._convert_input(input).to_messages()``; a list of messages is those messages (no prompt value built)."""
    if isinstance(input, list) and all(isinstance(m, BaseMessage) for m in input):
        return list(input)
    return self._convert_input(input).to_messages()


def _served_message(session: Session, call: Call) -> Any:
    """What ``invoke`` returns for a served call: the first recorded message (``generations[0][0]``)."""
    value, error = session.served_value(call)
    if error is not None:
        raise error
    return _as_messages(value)[0]


def _wrap_invoke(original: Any) -> Any:
    def invoke(
        self: BaseChatModel, input: Any, config: Any = None, *, stop: list[str] | None = None, **kwargs: Any
    ) -> Any:
        adopted = adopt(config if isinstance(config, dict) else None)
        if adopted is None:
            return _invoke(self, input, config, stop, kwargs)
        try:  # called on a thread that lost the run's context, with its node's config: the run is found
            return _invoke(self, input, config, stop, kwargs)
        finally:
            reset_current(adopted)

    def _invoke(self: BaseChatModel, input: Any, config: Any, stop: Any, kwargs: dict[str, Any]) -> Any:
        begun = _fast_begin(self, input, config, stop, kwargs)
        if begun is None:
            return original(self, input, config, stop=stop, **kwargs)
        session, call = begun
        if call.served is not None:
            return _served_message(session, call)
        token = _BEGUN.set((session, call))
        try:
            return original(self, input, config, stop=stop, **kwargs)
        finally:
            _BEGUN.reset(token)

    return invoke


def _wrap_ainvoke(original: Any) -> Any:
    async def ainvoke(
        self: BaseChatModel, input: Any, config: Any = None, *, stop: list[str] | None = None, **kwargs: Any
    ) -> Any:
        adopted = adopt(config if isinstance(config, dict) else None)
        if adopted is None:
            return await _ainvoke(self, input, config, stop, kwargs)
        try:  # (as invoke)
            return await _ainvoke(self, input, config, stop, kwargs)
        finally:
            reset_current(adopted)

    async def _ainvoke(self: BaseChatModel, input: Any, config: Any, stop: Any, kwargs: dict[str, Any]) -> Any:
        begun = _fast_begin(self, input, config, stop, kwargs)
        if begun is None:
            return await original(self, input, config, stop=stop, **kwargs)
        session, call = begun
        if call.served is not None:
            return _served_message(session, call)
        token = _BEGUN.set((session, call))
        try:
            return await original(self, input, config, stop=stop, **kwargs)
        finally:
            _BEGUN.reset(token)

    return ainvoke


def to_chunk(msg: BaseMessage) -> AIMessageChunk:
    """A recorded message as the single chunk a served stream yields."""
    if isinstance(msg, AIMessageChunk):
        return msg
    tool_chunks = [
        tool_call_chunk(name=tc["name"], args=json.dumps(tc["args"]), id=tc.get("id"), index=i)
        for i, tc in enumerate(getattr(msg, "tool_calls", None) or [])
    ]
    return AIMessageChunk(
        content=msg.content,
        id=msg.id,
        additional_kwargs=dict(msg.additional_kwargs),
        response_metadata=dict(msg.response_metadata),
        usage_metadata=getattr(msg, "usage_metadata", None),
        tool_call_chunks=tool_chunks,
        chunk_position="last",
    )


def _merge(chunks: list[Any]) -> list[BaseMessage]:
    from langchain_core.messages import message_chunk_to_message

    if not chunks:
        return [AIMessage(content="")]
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    return [message_chunk_to_message(total)]


def _stream_setup(
    self: BaseChatModel, input: Any, config: Any, stop: Any, kwargs: dict[str, Any], *, async_api: bool
) -> tuple[Session | None, Call | None]:
    """Register a ``stream``/``astream`` call, unless langchain will answer it through ``(a)invoke``.

    The question must be the one langchain's own ``stream``/``astream`` ask
    (``async_api`` differs): a model with only ``_astream`` streams on
    ``astream`` but falls back to ``invoke`` on ``stream``, and one with only
    ``_stream`` streams on both. Asking the sync question for ``astream``
    left async-only streaming models off the tape.
    """
    from langchain_core.runnables.config import ensure_config

    session = current_session(config if isinstance(config, dict) else None)
    if session is None or _SERVING.get() is not None:
        return None, None
    if not self._should_stream(async_api=async_api, **{**kwargs, "stream": True}):
        return None, None  # falls back to (a)invoke, which _gen/_agen record
    cfg = ensure_config(config)
    messages = self._convert_input(input).to_messages()
    call = begin_llm(session, self, messages, stop, kwargs, cfg.get("metadata"))
    return session, call


def _unheard(self: BaseChatModel, config: Any) -> bool:
    """Whether no callback handler would see a served stream answered through ``invoke`` (then it is not)."""
    return nobody_listens(ensure_config(config).get("callbacks"), self)


def _wrap_stream(original: Any) -> Any:
    def stream(
        self: BaseChatModel, input: Any, config: Any = None, *, stop: list[str] | None = None, **kwargs: Any
    ) -> Iterator[AIMessageChunk]:
        session, call = _stream_setup(self, input, config, stop, kwargs, async_api=False)
        if session is None or call is None:
            yield from original(self, input, config, stop=stop, **kwargs)
            return
        if call.served is not None:
            if _unheard(self, config):
                yield to_chunk(_served_message(session, call))
                return
            # through invoke, so langchain's callbacks see the served answer; _gen serves it
            token = _SERVING.set((session, call))
            try:
                msg = self.invoke(input, config=config, stop=stop, **kwargs)
            finally:
                _SERVING.reset(token)
            yield to_chunk(msg)
            return
        chunks: list[Any] = []
        try:
            for chunk in original(self, input, config, stop=stop, **kwargs):
                chunks.append(chunk)
                yield chunk
        except GeneratorExit:
            _finish_live(session, call, _merge(chunks))  # the consumer stopped early: keep what it saw
            raise
        except BaseException as exc:
            session.end_live(call, error=exc)
            raise
        _finish_live(session, call, _merge(chunks))

    return stream


def _wrap_astream(original: Any) -> Any:
    async def astream(
        self: BaseChatModel, input: Any, config: Any = None, *, stop: list[str] | None = None, **kwargs: Any
    ) -> AsyncIterator[AIMessageChunk]:
        session, call = _stream_setup(self, input, config, stop, kwargs, async_api=True)
        if session is None or call is None:
            async for chunk in original(self, input, config, stop=stop, **kwargs):
                yield chunk
            return
        if call.served is not None:
            if _unheard(self, config):
                yield to_chunk(_served_message(session, call))
                return
            token = _SERVING.set((session, call))
            try:
                msg = await self.ainvoke(input, config=config, stop=stop, **kwargs)
            finally:
                _SERVING.reset(token)
            yield to_chunk(msg)
            return
        chunks: list[Any] = []
        try:
            async for chunk in original(self, input, config, stop=stop, **kwargs):
                chunks.append(chunk)
                yield chunk
        except GeneratorExit:
            _finish_live(session, call, _merge(chunks))
            raise
        except BaseException as exc:
            session.end_live(call, error=exc)
            raise
        _finish_live(session, call, _merge(chunks))

    return astream


def _slotted(inputs: Any, config: Any) -> Any:
    """One config per input, each carrying the input's index (its slot) in its metadata.

    ``batch`` runs one thread (``abatch`` one task) per input, and they reach
    the model in any order. The metadata travels into ``_gen``/``_agen``
    through the run manager and becomes part of the call site, so on replay
    slot ``i`` is answered with what slot ``i`` was answered when recorded,
    even when all the inputs are the same request.
    """
    from langchain_core.runnables.config import get_config_list

    configs = get_config_list(config, len(inputs))
    return [{**c, "metadata": {**(c.get("metadata") or {}), BATCH_SLOT_KEY: i}} for i, c in enumerate(configs)]


def _batch_wrapper(name: str) -> Any:
    """A maker of ``name`` (a batch method) with slotted configs while a run is recorded or replayed."""

    def configs(inputs: Any, config: Any) -> Any:
        given = config if isinstance(config, dict) else None
        return _slotted(inputs, config) if inputs and current_session(given) is not None else config

    def make(orig: Any) -> Any:
        wrapper: Callable[..., Any]
        if name == "abatch":

            async def abatch(self: BaseChatModel, inputs: Any, config: Any = None, **kwargs: Any) -> Any:
                return await orig(self, inputs, configs(inputs, config), **kwargs)

            wrapper = abatch
        elif name == "abatch_as_completed":

            async def abatch_as_completed(
                self: BaseChatModel, inputs: Any, config: Any = None, **kwargs: Any
            ) -> AsyncIterator[Any]:
                async for item in orig(self, inputs, configs(inputs, config), **kwargs):
                    yield item

            wrapper = abatch_as_completed
        else:

            def batch(self: BaseChatModel, inputs: Any, config: Any = None, **kwargs: Any) -> Any:
                return orig(self, inputs, configs(inputs, config), **kwargs)

            wrapper = batch
        wrapper.__name__ = wrapper.__qualname__ = name
        wrapper.__doc__ = orig.__doc__
        return wrapper

    return make


def _never_retry_control_errors(built: Any) -> Any:
    """``RunnableRetry._kwargs_retrying`` that makes ``with_retry`` re-raise graphtape's control errors at once.

    ``RunnableRetry`` retries through tenacity with a rule built from
    ``retry_if_exception_type`` (``Exception`` by default), which knows
    nothing of LangGraph's ``GraphBubbleUp``: a model wrapped in
    ``with_retry`` would be asked again after a divergence. The rule it
    builds gets "and not a ControlError" added (see graphtape.errors).
    """
    from tenacity import retry_if_exception_type, retry_if_not_exception_type

    from graphtape.errors import ControlError

    if not isinstance(built, property) or built.fget is None:  # pragma: no cover - langchain changed
        return built
    rule = built.fget

    def _kwargs_retrying(self: Any) -> dict[str, Any]:
        kwargs = rule(self)
        kwargs["retry"] = kwargs.get("retry", retry_if_exception_type()) & retry_if_not_exception_type(ControlError)
        return kwargs

    return property(_kwargs_retrying)


def _patches() -> list[Patch]:
    from langchain_core.runnables.retry import RunnableRetry

    return [
        Patch(BaseChatModel, "invoke", _wrap_invoke),
        Patch(BaseChatModel, "ainvoke", _wrap_ainvoke),
        Patch(BaseChatModel, "_generate_with_cache", _wrap_gen),
        Patch(BaseChatModel, "_agenerate_with_cache", _wrap_agen),
        Patch(BaseChatModel, "stream", _wrap_stream),
        Patch(BaseChatModel, "astream", _wrap_astream),
        *(
            Patch(BaseChatModel, name, _batch_wrapper(name))
            for name in ("batch", "abatch", "batch_as_completed", "abatch_as_completed")
        ),
        Patch(RunnableRetry, "_kwargs_retrying", _never_retry_control_errors),
    ]


INTERCEPTOR = Interceptor("chat model", _patches())


def install() -> None:
    """Install the wrappers once per process (idempotent, inert outside runs)."""
    INTERCEPTOR.install()


def uninstall() -> None:
    """Restore langchain's methods (raises PatchConflict if someone wrapped one of them after graphtape)."""
    INTERCEPTOR.uninstall()
