"""Recorded exceptions: what is written about an error, and how it comes back on replay.

Handlers look at more than a message. ``ToolNode(handle_tool_errors=True)``
writes ``repr(error)`` into the conversation, ``RetryPolicy(retry_on=...)``
and ``except`` clauses test the class, provider retry logic reads
``status_code`` and the response's headers. So an error is recorded as its
class (``module:Qual.Name``), ``str(error)``, its ``args`` and the instance
attributes that encode as values (``vars(error)``), and is rebuilt as an
instance of the *same class*:

1. the class must be allowed (:mod:`graphtape.typepolicy`: registered, declared
   by the graph, the trusted packages or a standard-library exception);
   otherwise it comes back as :class:`RecordedError` with a warning;
2. the class's constructor is called with the recorded ``args`` only when
   that reproduces them exactly (``KeyError('k')``, ``FileNotFoundError(2,
   'x')``): it often does not (``UserError(code, detail)`` that passes one
   formatted string up, ``openai.APIStatusError(message, *, response, body)``);
3. otherwise the instance is created without its constructor
   (``cls.__new__(cls)``), its ``args`` set and its attributes restored
   straight into ``__dict__`` (no setter runs);
4. pydantic's ``ValidationError`` has no usable ``__new__``: it is rebuilt by
   ``ValidationError.from_exception_data(title, errors)`` from its recorded
   line errors, so ``.errors()`` and ``str()`` are the recorded ones.

``httpx.Request``/``httpx.Response`` attributes (provider SDK errors) are
recorded as method, URL, status and response headers and rebuilt as minimal
httpx objects (request headers and the URL's query are not kept: they carry
API keys). Attributes with secret-looking names are not recorded, and
secret-looking keys in values are redacted, as everywhere on the tape.

The details are stored as one order-preserving JSON text (``detail``), since
event bodies are stored with sorted keys; ``type`` and ``message`` stay
plain fields for listings. Tapes written before this have only ``type`` and
``message``: those errors are rebuilt with ``cls(message)`` as before.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from graphtape import serde, typepolicy
from graphtape.errors import GraphtapeWarning

if TYPE_CHECKING:
    from pydantic_core import ValidationError

#: The HTTP libraries whose requests and responses are recorded (and rebuilt only if already imported).
_HTTP_LIBS = ("httpx", "httpx2")

#: Response headers never recorded (beside what ``serde.redact`` removes).
_DROPPED_HEADERS = frozenset({"set-cookie", "cookie"})


class RecordedError(Exception):
    """Stands in for a recorded exception whose class is not allowed (or cannot be rebuilt)."""


# --------------------------------------------------------------------------
# recording
# --------------------------------------------------------------------------


def error_info(error: BaseException | None) -> dict[str, Any] | None:
    """What the tape keeps of ``error``: class, message, and (as JSON text) args and attributes."""
    if error is None:
        return None
    info: dict[str, Any] = {"type": typepolicy.qualname(type(error)), "message": _str(error)}
    try:
        detail = _detail(error, depth=0)
    except Exception:  # an exotic error must never break recording
        detail = None
    if detail:
        info["detail"] = json.dumps(detail, separators=(",", ":"), ensure_ascii=False)
    return info


def _str(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:
        return repr(error)


def _detail(error: BaseException, depth: int) -> dict[str, Any]:
    if _is_validation_error(error):
        return {"validation": _validation(error, depth)}
    detail: dict[str, Any] = {}
    args = [_value(a, depth) for a in error.args]
    if all(a is not None for a in args):
        detail["args"] = args
    attrs = {}
    for name, value in vars(error).items():
        if (name.startswith("__") and name != "__notes__") or serde.SECRET_KEY_PATTERN.search(name):
            continue
        env = _value(value, depth)
        if env is not None:
            attrs[name] = env
    if attrs:
        detail["attrs"] = attrs
    return detail


def _value(value: Any, depth: int) -> dict[str, Any] | None:
    """An envelope for an argument or attribute, or None when it cannot be restored."""
    if isinstance(value, BaseException):
        if depth >= 2:
            return None
        return {"t": "gt.error", "v": error_info_nested(value, depth + 1)}
    lib = _http_lib(value)
    if lib is not None and isinstance(value, sys.modules[lib].Request):
        # no headers (the API key) and no query string (some APIs take the key there)
        url = str(value.url).split("?", 1)[0]
        return {"t": "gt.http_request", "lib": lib, "method": value.method, "url": url}
    if lib is not None and isinstance(value, sys.modules[lib].Response):
        headers = {k: v for k, v in value.headers.items() if k.lower() not in _DROPPED_HEADERS}
        env: dict[str, Any] = {
            "t": "gt.http_response",
            "lib": lib,
            "status": value.status_code,
            "headers": serde.redact(headers),
        }
        try:
            env["request"] = _value(value.request, depth)
        except RuntimeError:  # a response built without a request
            pass
        return env
    if callable(value) and not isinstance(value, type) and not hasattr(value, "model_dump"):
        return None
    try:
        env = serde.encode_value(value)
    except Exception:
        return None
    return None if _has_repr(env) else serde.redact(env)


def _http_lib(value: Any) -> str | None:
    """``"httpx"`` or ``"httpx2"`` (the fork the openai SDK uses) when ``value`` is one of its requests or responses."""
    for name in _HTTP_LIBS:
        lib = sys.modules.get(name)
        if lib is not None and isinstance(value, (lib.Request, lib.Response)):
            return name
    return None


def error_info_nested(error: BaseException, depth: int) -> dict[str, Any]:
    info: dict[str, Any] = {"type": typepolicy.qualname(type(error)), "message": _str(error)}
    try:
        detail = _detail(error, depth)
    except Exception:
        detail = None
    if detail:
        info["detail"] = detail
    return info


def _has_repr(env: Any) -> bool:
    if isinstance(env, dict):
        if env.get("t") == "repr" or env.get("t") == "msg":
            return True
        return any(_has_repr(v) for v in env.values() if isinstance(v, (dict, list)))
    if isinstance(env, list):
        return any(_has_repr(v) for v in env)
    return False


def _is_validation_error(error: BaseException) -> bool:
    core = sys.modules.get("pydantic_core")
    return core is not None and isinstance(error, core.ValidationError)


def _validation(error: Any, depth: int) -> dict[str, Any]:
    lines = []
    for line in error.errors(include_url=False):
        out: dict[str, Any] = {"type": line["type"], "loc": list(line["loc"]), "msg": line["msg"]}
        env = _value(line.get("input"), depth)
        if env is not None:
            out["input"] = env
        ctx = {}
        for key, value in (line.get("ctx") or {}).items():
            ctx[key] = _value(value, depth) or {"t": "json", "v": str(value)}
        if ctx:
            out["ctx"] = ctx
        lines.append(out)
    return {"title": error.title, "errors": lines}


def classes_named(info: Any) -> Iterator[tuple[str, str]]:
    """``(module:Class, kind)`` of every class rebuilding this recorded error would use (for import checks)."""
    if not isinstance(info, dict):
        return
    yield str(info.get("type")), "error"
    detail = info.get("detail")
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            return
    if not isinstance(detail, dict):
        return
    envs = list(detail.get("args") or []) + list((detail.get("attrs") or {}).values())
    for line in (detail.get("validation") or {}).get("errors") or []:
        envs += [line.get("input"), *(line.get("ctx") or {}).values()]
    for env in envs:
        if isinstance(env, dict) and env.get("t") == "gt.error":
            yield from classes_named(env.get("v"))
        else:
            yield from serde.classes_named(env)


# --------------------------------------------------------------------------
# replaying
# --------------------------------------------------------------------------


def rebuild_error(info: dict[str, Any], policy: typepolicy.TypePolicy | None = None) -> BaseException:
    """The recorded error as an instance of its own class, if that class is allowed."""
    policy = policy or typepolicy.DEFAULT
    name = info.get("type")
    message = info.get("message", "")
    detail = info.get("detail")
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            detail = None
    if not isinstance(detail, dict):
        detail = {}
    cls = policy.resolve(name, "error") if isinstance(name, str) else None
    if cls is None or not issubclass(cls, BaseException):  # the policy resolves only exception classes as "error"
        warnings.warn(
            f"the tape names error class {name}, which is not an allowed class: it is replayed as "
            "graphtape's RecordedError; if it is yours, pass it to graphtape.register_types",
            GraphtapeWarning,
            stacklevel=2,
        )
        return RecordedError(f"{name}: {message}")
    try:
        if "validation" in detail:
            from pydantic_core import ValidationError

            if not issubclass(cls, ValidationError):
                return RecordedError(f"{name}: {message}")
            return _rebuild_validation(cls, detail["validation"], message, policy)
        return _rebuild(cls, detail, message, policy)
    except Exception:
        return RecordedError(f"{name}: {message}")


def _decode(env: Any, policy: typepolicy.TypePolicy) -> Any:
    if not isinstance(env, dict):
        return env
    t = env.get("t")
    if t == "gt.error":
        return rebuild_error(env.get("v") or {}, policy)
    lib: str = env["lib"] if env.get("lib") in _HTTP_LIBS else "httpx"
    httpx = sys.modules.get(lib) if t in ("gt.http_request", "gt.http_response") else None
    if t == "gt.http_request":
        if httpx is None:
            return None
        return httpx.Request(str(env.get("method", "GET")), str(env.get("url", "")))
    if t == "gt.http_response":
        if httpx is None:
            return None
        request = _decode(env.get("request"), policy) if env.get("request") else None
        headers = env.get("headers") if isinstance(env.get("headers"), dict) else {}
        return httpx.Response(int(env.get("status", 0)), headers=headers, request=request)
    return serde.decode_value(env, policy=policy)


def _rebuild(
    cls: type[BaseException], detail: dict[str, Any], message: str, policy: typepolicy.TypePolicy
) -> BaseException:
    args = tuple(_decode(a, policy) for a in detail["args"]) if isinstance(detail.get("args"), list) else (message,)
    attrs = {k: _decode(v, policy) for k, v in (detail.get("attrs") or {}).items()}
    try:
        made = cls(*args)
        _restore(made, attrs)
        if type(made) is cls and made.args == args and _str(made) == message:
            return made
    except Exception:
        pass
    made = cls.__new__(cls)
    made.args = args
    _restore(made, attrs)
    return made


def _restore(error: BaseException, attrs: dict[str, Any]) -> None:
    """Attributes straight into ``__dict__``: no property setter or ``__setattr__`` of the class runs."""
    target = getattr(error, "__dict__", None)
    if isinstance(target, dict):
        target.update(attrs)


def _rebuild_validation(
    cls: type[ValidationError], data: dict[str, Any], message: str, policy: typepolicy.TypePolicy
) -> BaseException:
    from pydantic_core import PydanticCustomError

    # pydantic-core's InitErrorDetails, except that ``input`` is left out when the tape has none: pydantic-core
    # accepts that, its TypedDict (which requires the key) does not
    lines: list[Any] = []
    custom = []
    for line in data.get("errors") or []:
        item: dict[str, Any] = {"type": line["type"], "loc": tuple(line.get("loc") or ())}
        if "input" in line:
            item["input"] = _decode(line["input"], policy)
        if line.get("ctx"):
            item["ctx"] = {k: _decode(v, policy) for k, v in line["ctx"].items()}
        lines.append(item)
        custom.append(PydanticCustomError(line["type"], line.get("msg", "")))
    title = str(data.get("title", ""))
    with_custom: list[Any] = [{**item, "type": c} for item, c in zip(lines, custom)]
    for attempt in (lines, with_custom):
        for hide in (False, True):
            try:
                made = cls.from_exception_data(title, attempt, hide_input=hide)
            except Exception:
                continue
            if _str(made) == message:
                return made
    return cls.from_exception_data(title, with_custom)
