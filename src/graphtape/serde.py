"""Turning live Python values into tape payloads and back.

Two different jobs live here:

* **Encoding values that must come back as the same objects** (LLM responses,
  tool results, effect results). These use a small typed envelope
  ``{"t": kind, "v": value}`` so that an ``AIMessage`` is served back as an
  ``AIMessage`` (with its tool calls, usage and id), a ``datetime`` as a
  ``datetime`` and so on. Tools that stored ``str(message)`` and handed
  strings to LangGraph are a known failure of earlier recorders; the round
  trip is tested. Pickle is deliberately *not* used: importing a tape from
  someone else must never execute code. Classes named in a tape are looked
  up in an allow-list (:mod:`graphtape.typepolicy`), never imported.
* **Canonical JSON and fingerprints** for requests: sorted keys, no
  whitespace, message ids stripped, so the same request always hashes the
  same and ids that LangGraph regenerates never make a call look changed.
  Canonical JSON is for hashing only: payloads are *stored* as
  order-preserving compact JSON (:func:`stored_json`), because key order is
  part of a value (``json.dumps(args)`` of a served tool call, a
  ``Command(resume={...})`` answer) and sorted keys change the text code
  renders from it.

Redaction happens here too, before anything is hashed or written, so a
secret never reaches the store or an export file.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import decimal
import enum
import hashlib
import json
import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from langchain_core.load import dumpd, load
from langchain_core.load.serializable import Serializable
from langchain_core.messages import BaseMessage

from graphtape import typepolicy
from graphtape.errors import GraphtapeWarning, ReplayError
from graphtape.jsontext import one_shot

REDACTED = "**redacted**"

#: Keys whose values are never written to the tape (matched case-insensitively
#: anywhere in a key name). Users add more with ``connect(redact=[...])``.
SECRET_KEY_PATTERN = re.compile(
    r"(api[_-]?key|secret|password|passwd|token$|access[_-]?token|authorization|"
    r"credential|private[_-]?key|session[_-]?key)",
    re.IGNORECASE,
)

# Usage keys that count tokens; ``total_cost`` is a langchain cache marker.
_TOKEN_KEYS = ("input_tokens", "output_tokens", "total_tokens")


def canonical_json(obj: Any) -> str:
    """JSON text that is identical for equal values (sorted keys, compact)."""
    return _canonical_text(obj)


def canonical_bytes(obj: Any) -> bytes:
    return canonical_json(obj).encode("utf-8")


def stored_json(obj: Any) -> bytes:
    """A payload as stored: compact JSON in the value's own key order (addressed by its digest)."""
    return _stored_text(obj).encode("utf-8")


def digest(data: bytes | str) -> str:
    """Content address used for blobs, chains and fingerprints (128-bit hex)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _fallback(obj: Any) -> Any:
    return to_jsonable(obj)


#: ``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_fallback)``
#: and the same in the value's own key order, with their C encoders built once (graphtape.jsontext):
#: every call writes several payloads and hashes its request; the text is json.dumps's.
_canonical_text = one_shot(
    json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_fallback)
)
_stored_text = one_shot(json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_fallback))


def redact(obj: Any, extra: frozenset[str] = frozenset()) -> Any:
    """A copy of ``obj`` with secret-looking keys replaced by a marker."""
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            ks = k if type(k) is str else str(k)
            secret = _SECRET_KEYS.get(ks)
            if secret is None:
                secret = _secret_key(ks)
            if secret or ks in extra:
                # Serialised langchain secrets are placeholders, not values.
                if isinstance(v, dict) and v.get("type") == "secret":
                    out[k] = v
                else:
                    out[k] = REDACTED if v not in (None, "") else v
            elif type(v) is str or v is None or type(v) is int or type(v) is float or type(v) is bool:
                out[k] = v
            else:
                out[k] = redact(v, extra)
        return out
    if isinstance(obj, list):
        return [redact(v, extra) for v in obj]
    return obj


#: key -> whether SECRET_KEY_PATTERN finds it secret: every tool call's and model request's keys are
#: tested, and they are the same few names again and again (at most _SECRET_KEYS_MAX remembered)
_SECRET_KEYS: dict[str, bool] = {}
_SECRET_KEYS_MAX = 8192


def _secret_key(key: str) -> bool:
    secret = SECRET_KEY_PATTERN.search(key) is not None
    if len(_SECRET_KEYS) >= _SECRET_KEYS_MAX:
        _SECRET_KEYS.clear()
    _SECRET_KEYS[key] = secret
    return secret


#: the exact JSON scalar types, which :func:`to_jsonable` returns as they are (one set look-up instead of a
#: call for each: a model's answer holds a dozen token counts and None values in nested dicts)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def to_jsonable(obj: Any) -> Any:
    """A JSON-able *description* of ``obj`` for display and diffs.

    Lossy on purpose for exotic types (falls back to ``repr``); values that
    must be restored go through :func:`encode_value` instead.
    """
    # exact JSON types first (most of every message and request), without the isinstance chain
    t = type(obj)
    if t in _SCALARS:
        return obj
    if t is dict:
        # a scalar value (most of them: strings, token counts, None) is taken as it is, without a call
        return {k if type(k) is str else str(k): v if type(v) in _SCALARS else to_jsonable(v) for k, v in obj.items()}
    if t is list:
        return [v if type(v) in _SCALARS else to_jsonable(v) for v in obj]
    if isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
        if isinstance(obj, (set, frozenset)):
            items = sorted(items, key=repr)
        return [to_jsonable(v) for v in items]
    if isinstance(obj, Serializable):
        try:
            return to_jsonable(dumpd(obj))
        except Exception:  # pragma: no cover - defensive
            return {"__repr__": repr(obj)}
    if hasattr(obj, "model_dump") and callable(obj.model_dump):
        try:
            return to_jsonable(obj.model_dump(mode="json"))
        except Exception:
            return {"__repr__": repr(obj)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (_dt.datetime, _dt.date, _dt.time)):
        return obj.isoformat()
    if isinstance(obj, (uuid.UUID, decimal.Decimal)):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if isinstance(obj, bytes):
        return {"__bytes__": base64.b64encode(obj).decode()}
    # LangGraph's Send / Command / Interrupt are plain classes with useful attrs.
    if hasattr(obj, "__dict__") and type(obj).__module__.startswith("langgraph"):
        return {
            "__type__": type(obj).__name__,
            **{k: to_jsonable(v) for k, v in vars(obj).items() if not k.startswith("_")},
        }
    if hasattr(type(obj), "__slots__") and type(obj).__module__.startswith("langgraph"):
        return {"__type__": type(obj).__name__, **{k: to_jsonable(getattr(obj, k, None)) for k in type(obj).__slots__}}
    return {"__repr__": repr(obj)}


# --------------------------------------------------------------------------
# Typed envelopes: values that must be restored exactly.
# --------------------------------------------------------------------------

_qualname = typepolicy.qualname


Put = Callable[[Any], str]
Get = Callable[[str], Any]


class Opaque:
    """A recorded value that was stored only as its repr, stood in for it in a replay of its run.

    A graph compiled without a checkpointer may carry any object in its state
    (a ``RunnableLambda``, a client); LangGraph never serialises it, so neither
    may recording make the run fail on it. The tape keeps its class and repr
    (``{"t": "repr"}``), and a replay of that run is given this placeholder in
    its place: code that only passes the value along replays as recorded, and
    the placeholder encodes (and shows) exactly as the original did, so the
    replay's output and writes compare equal to the recorded ones. Code that
    uses the value sees what it is: a placeholder.
    """

    __slots__ = ("cls", "text")

    def __init__(self, cls: str, text: str):
        #: the recorded value's class (``module:Qualname``) and its repr
        self.cls = cls
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and (self.cls, self.text) == (other.cls, other.text)

    def __hash__(self) -> int:
        return hash((self.cls, self.text))


def encode_value(obj: Any, put: Put | None = None) -> dict[str, Any]:
    """Encode ``obj`` so that :func:`decode_value` gives an equal object back.

    With ``put`` (store a JSON value, return its content address), messages
    are stored once, without their id, and referenced as
    ``{"t": "msg", "h": address, "id": id}``: the same address a request's
    message chain uses, so a message is one blob however often it appears.
    """
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"t": "json", "v": obj}
    if put is not None and isinstance(obj, BaseMessage):
        env: dict[str, Any] = {"t": "msg", "h": put(message_for_request(obj))}
        if obj.id is not None:
            env["id"] = obj.id
        return env
    if isinstance(obj, Serializable) and obj.is_lc_serializable():
        return {"t": "lc", "v": dumpd(obj)}
    if isinstance(obj, enum.Enum):
        return {"t": "enum", "c": _qualname(type(obj)), "v": encode_value(obj.value)}
    if isinstance(obj, _dt.datetime):
        return {"t": "datetime", "v": obj.isoformat()}
    if isinstance(obj, _dt.date):
        return {"t": "date", "v": obj.isoformat()}
    if isinstance(obj, _dt.time):
        return {"t": "time", "v": obj.isoformat()}
    if isinstance(obj, uuid.UUID):
        return {"t": "uuid", "v": str(obj)}
    if isinstance(obj, decimal.Decimal):
        return {"t": "decimal", "v": str(obj)}
    if isinstance(obj, bytes):
        return {"t": "bytes", "v": base64.b64encode(obj).decode()}
    if isinstance(obj, tuple):
        if typepolicy.is_kind(type(obj), "namedtuple"):
            # (LangGraph's StateUpdate in update_state's values, a user's own record type)
            return {"t": "namedtuple", "c": _qualname(type(obj)), "v": [encode_value(v, put) for v in obj]}
        return {"t": "tuple", "v": [encode_value(v, put) for v in obj]}
    if isinstance(obj, list):
        if all(_is_plain_json(v) for v in obj):
            return {"t": "json", "v": obj}
        return {"t": "list", "v": [encode_value(v, put) for v in obj]}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and all(_is_plain_json(v) for v in obj.values()):
            return {"t": "json", "v": obj}
        if all(isinstance(k, str) for k in obj):
            return {"t": "dict", "v": {k: encode_value(v, put) for k, v in obj.items()}}
        return {"t": "pairs", "v": [[encode_value(k, put), encode_value(v, put)] for k, v in obj.items()]}
    if hasattr(obj, "model_dump") and hasattr(type(obj), "model_validate"):
        return {"t": "pydantic", "c": _qualname(type(obj)), "v": obj.model_dump(mode="json")}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            "t": "dataclass",
            "c": _qualname(type(obj)),
            "v": {f.name: encode_value(getattr(obj, f.name), put) for f in dataclasses.fields(obj) if f.init},
        }
    if isinstance(obj, Opaque):
        return {"t": "repr", "c": obj.cls, "v": obj.text}
    return {"t": "repr", "c": _qualname(type(obj)), "v": repr(obj)}


def classes_named(env: Any) -> Iterator[tuple[str, str]]:
    """``(module:Class, kind)`` of every class an encoded value would rebuild (for import checks)."""
    if not isinstance(env, dict):
        return
    t, v = env.get("t"), env.get("v")
    if t in ("enum", "pydantic", "dataclass", "namedtuple"):
        yield str(env.get("c")), t
    if t in ("list", "tuple", "namedtuple") and isinstance(v, list):
        for x in v:
            yield from classes_named(x)
    elif t in ("dict", "dataclass") and isinstance(v, dict):
        for x in v.values():
            yield from classes_named(x)
    elif t == "pairs" and isinstance(v, list):
        for pair in v:
            for x in pair if isinstance(pair, list) else ():
                yield from classes_named(x)
    elif t == "enum":
        yield from classes_named(v)


def _is_plain_json(v: Any) -> bool:
    if v is None or isinstance(v, (bool, str)):
        return True
    if isinstance(v, (int, float)):
        return not isinstance(v, enum.Enum)
    if isinstance(v, list):
        return all(_is_plain_json(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) for k in v) and all(_is_plain_json(x) for x in v.values())
    return False


def decode_value(
    env: dict[str, Any],
    get: Get | None = None,
    policy: typepolicy.TypePolicy | None = None,
    *,
    opaque: bool = False,
) -> Any:
    """Inverse of :func:`encode_value`; ``get`` fetches a JSON value by address.

    Nothing named in ``env`` is imported or called unless ``policy`` (default:
    registered and trusted classes only) allows that class for that kind of
    envelope; a value of any other class comes back as plain data (its
    recorded JSON) with a :class:`~graphtape.errors.GraphtapeWarning`.
    ``opaque``: a value stored only as its repr comes back as an
    :class:`Opaque` placeholder (the input of a run of a graph without a
    checkpointer) instead of failing the replay.
    """
    policy = policy or typepolicy.DEFAULT
    t = env.get("t")
    v: Any = env.get("v")  # its shape depends on ``t``
    if t == "json":
        return v
    if t == "msg":
        if get is None:
            raise ReplayError("this value references stored messages; decode it through the tape")
        # the id is given to the constructor: a copy of the message made only to set it cost a fifth of
        # serving a recorded answer
        return message_from_json(get(env["h"]), env.get("id"))
    if t == "lc":
        return load_lc(v)
    if t == "enum":
        value = decode_value(v, get, policy, opaque=opaque)
        cls = _allowed(env, "enum", policy)
        return value if cls is None else cls(value)
    if t == "datetime":
        return _dt.datetime.fromisoformat(v)
    if t == "date":
        return _dt.date.fromisoformat(v)
    if t == "time":
        return _dt.time.fromisoformat(v)
    if t == "uuid":
        return uuid.UUID(v)
    if t == "decimal":
        return decimal.Decimal(v)
    if t == "bytes":
        return base64.b64decode(v)
    if t == "tuple":
        return tuple(decode_value(x, get, policy, opaque=opaque) for x in v)
    if t == "namedtuple":
        items = [decode_value(x, get, policy, opaque=opaque) for x in v]
        cls = _allowed(env, "namedtuple", policy)
        return tuple(items) if cls is None else cls._make(items)  # type: ignore[attr-defined]
    if t == "list":
        return [decode_value(x, get, policy, opaque=opaque) for x in v]
    if t == "dict":
        return {k: decode_value(x, get, policy, opaque=opaque) for k, x in v.items()}
    if t == "pairs":
        return {decode_value(k, get, policy, opaque=opaque): decode_value(x, get, policy, opaque=opaque) for k, x in v}
    if t == "pydantic":
        cls = _allowed(env, "pydantic", policy)
        return v if cls is None else cls.model_validate(v)  # type: ignore[attr-defined]
    if t == "dataclass":
        fields = {k: decode_value(x, get, policy, opaque=opaque) for k, x in v.items()}
        cls = _allowed(env, "dataclass", policy)
        return fields if cls is None else cls(**fields)
    if t == "repr":
        if opaque:
            return Opaque(str(env.get("c")), str(v))
        raise ReplayError(
            f"cannot replay a recorded value of type {env.get('c')}: it was stored only as its repr; "
            "make the tool or effect return JSON-able data, a pydantic model, a dataclass or a message"
        )
    raise ReplayError(f"unknown value encoding {t!r} in the tape; upgrade graphtape")


def _allowed(env: dict[str, Any], kind: str, policy: typepolicy.TypePolicy) -> type | None:
    """The class an envelope names, if the policy allows it; else None, with a warning."""
    name = env.get("c")
    cls = policy.resolve(name, kind) if isinstance(name, str) else None
    if cls is None:
        warnings.warn(
            f"the tape names {kind} class {name}, which is not an allowed class: the value is returned as "
            "plain data; if the class is yours, pass it to graphtape.register_types (or declare it in the "
            "graph's state schema or beside its nodes)",
            GraphtapeWarning,
            stacklevel=3,
        )
    return cls


def _lc_data_classes() -> list[type]:
    """The langchain-core classes a tape may hold: messages, documents, generations, prompt values.

    langchain-core's own ``allowed_objects="core"`` also admits prompt
    templates and runnables, whose constructors take configuration (it warns
    that it is unsafe for untrusted input); a tape needs only data.
    """
    from langchain_core import messages as m
    from langchain_core.agents import AgentAction, AgentActionMessageLog, AgentFinish
    from langchain_core.documents import Document
    from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, Generation, GenerationChunk
    from langchain_core.prompt_values import ChatPromptValue, ChatPromptValueConcrete, StringPromptValue

    return [
        m.AIMessage,
        m.AIMessageChunk,
        m.HumanMessage,
        m.HumanMessageChunk,
        m.SystemMessage,
        m.SystemMessageChunk,
        m.ToolMessage,
        m.ToolMessageChunk,
        m.ChatMessage,
        m.ChatMessageChunk,
        m.FunctionMessage,
        m.FunctionMessageChunk,
        m.RemoveMessage,
        Document,
        Generation,
        GenerationChunk,
        ChatGeneration,
        ChatGenerationChunk,
        StringPromptValue,
        ChatPromptValue,
        ChatPromptValueConcrete,
        AgentAction,
        AgentActionMessageLog,
        AgentFinish,
    ]


def load_lc(v: Any) -> Any:
    """Revive a serialised langchain object: data classes only, no secrets from the environment."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load(v, allowed_objects=_lc_data_classes(), secrets_from_env=False, secrets_map={})


def message_json(msg: BaseMessage, *, with_id: bool = False) -> dict[str, Any]:
    """A message as compact JSON: its type and the fields that differ from their defaults.

    langchain's ``dumpd`` form repeats the constructor path and every empty
    field; in a long conversation that boilerplate outweighs the text. This
    form is restored by :func:`message_from_json` through langchain-core's
    ``messages_from_dict`` (a fixed map of message types: nothing is imported
    by name from the tape).
    """
    # ``message_to_dict(msg)`` is ``{"type": msg.type, "data": msg.model_dump()}``; each value kept is made
    # JSON-able as it is taken (``to_jsonable`` of the whole dict, without walking it a second time)
    cls = type(msg)
    out: dict[str, Any] = {"type": to_jsonable(msg.type)}
    plan = (_PLANS_ID if with_id else _PLANS).get(cls)
    if plan is None:
        plan = _plan(cls, with_id)
    for key, value in msg.model_dump().items():
        default = plan.get(key, _NO_DEFAULT)
        if default is not _NO_DEFAULT:
            if default is _SKIP:
                continue
            if default is _VARIES:
                default = cls.model_fields[key].default_factory()  # type: ignore[call-arg,misc]
            if value == default:
                continue
        out[key] = value if type(value) in _SCALARS else to_jsonable(value)
    return out


_NO_DEFAULT = object()
_VARIES = object()
_SKIP = object()
#: message class -> field -> its default (compared with, never handed out), _VARIES (a default factory
#: other than an empty builtin container: called for every message, as it may vary) or _SKIP (``type``,
#: written first, and ``id``); a field without a default is not in it. _PLANS_ID: the same, ``id`` kept.
_PLANS: dict[type, dict[str, Any]] = {}
_PLANS_ID: dict[type, dict[str, Any]] = {}


def _plan(cls: type, with_id: bool) -> dict[str, Any]:
    """What :func:`message_json` does with each field of a message class, worked out once per class.

    Every call serialises messages: the look-up of one table per field is
    all the loop asks (the key tests for ``type`` and ``id`` and the test for
    a missing default are in it).
    """
    from pydantic_core import PydanticUndefined

    plan: dict[str, Any] = {}
    for key, f in cls.model_fields.items():  # type: ignore[attr-defined]
        if f.default_factory is not None:
            plan[key] = f.default_factory() if f.default_factory in (dict, list, tuple) else _VARIES
        elif f.default is not PydanticUndefined:
            plan[key] = f.default
    plan["type"] = _SKIP
    if not with_id:
        plan["id"] = _SKIP
    (_PLANS_ID if with_id else _PLANS)[cls] = plan
    return plan


def message_from_json(data: dict[str, Any], msg_id: Any = None) -> BaseMessage:
    """Inverse of :func:`message_json`; with ``msg_id`` (not None), the message gets that id."""
    from langchain_core.messages import messages_from_dict

    body = {k: v for k, v in data.items() if k != "type"}
    if msg_id is not None:
        body["id"] = msg_id
    return messages_from_dict([{"type": data["type"], "data": body}])[0]


def message_for_request(msg: BaseMessage) -> dict[str, Any]:
    """A message as it takes part in a request fingerprint: compact, no id.

    ``add_messages`` stamps fresh uuids on id-less messages and live model
    messages get ``lc_run--<uuid>`` ids, so ids differ on every execution of
    identical code; langchain-core's own cache strips them for the same reason.
    """
    return message_json(msg)


def usage_tokens(usage: dict[str, Any] | None) -> tuple[int, int, int]:
    """(input, output, total) tokens from a ``usage_metadata`` dict."""
    if not usage:
        return (0, 0, 0)
    i = int(usage.get("input_tokens") or 0)
    o = int(usage.get("output_tokens") or 0)
    t = int(usage.get("total_tokens") or (i + o))
    return (i, o, t)


def json_round_trip(env: Any) -> Any:
    """``env`` as it comes back from the store (through the stored JSON form)."""
    return json.loads(stored_json(env))


def blob_refs(obj: Any, blobs: set[str], chains: set[str]) -> None:
    """Collect the content addresses a stored JSON value refers to.

    Encoded values reference messages (``{"t": "msg", "h": ...}``); display
    views reference messages (``{"$m": ...}``) and message lists
    (``{"$chain": ...}``). Exports follow these to carry everything a run
    needs.
    """
    if isinstance(obj, dict):
        if obj.get("t") == "msg" and isinstance(obj.get("h"), str):
            blobs.add(obj["h"])
        if isinstance(obj.get("$m"), str):
            blobs.add(obj["$m"])
        if isinstance(obj.get("$chain"), str):
            chains.add(obj["$chain"])
        for v in obj.values():
            if isinstance(v, (dict, list)):
                blob_refs(v, blobs, chains)
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, (dict, list)):
                blob_refs(v, blobs, chains)
