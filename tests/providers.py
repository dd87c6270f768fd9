"""A fake OpenAI- and Anthropic-compatible HTTP server for the suite.

Real provider clients (``langchain_openai.ChatOpenAI``,
``langchain_anthropic.ChatAnthropic``, the ``openai``/``anthropic`` SDKs
underneath) talk to it over HTTP on 127.0.0.1, so the provider code paths that
graphtape intercepts (request building, SSE parsing, usage, tool calls,
structured output, API errors) are the real ones, with no network.

Answers are deterministic in shape and random in content (``srv-<random>``,
``q-<random>``), like the fake models of ``tests/graphs.py``: a replay that
reproduces the recorded state proves the answers came from the tape.

The default brain, given a request:

* tools offered and the last message is a user turn (not a tool result):
  call the forced tool if ``tool_choice`` names one, else the first tool, with
  arguments built from its JSON schema;
* else a structured-output request (OpenAI ``response_format`` json_schema,
  Anthropic ``output_config.format``/``output_format``): JSON content that
  satisfies the schema;
* else a forced tool choice naming a tool (structured output through tools):
  a call of that tool;
* else text ``srv-<random>``.

Tests steer it with ``server.script(...)`` (canned replies or callables, one
per request, first in first out) and ``server.fail_next(status, times)``
(provider-shaped error bodies so the SDKs raise their own error classes).
``server.requests`` lists ``(path, body)`` of every request since the test
began.

Connections are closed after each response unless a test sets
``server.keep_alive = True``: langchain_openai/langchain_anthropic cache their
HTTP clients per process, so a kept-alive connection opened in one test's event
loop would otherwise be reused from another test's loop ("Event loop is
closed"), coupling tests by their order. A test about that very hazard (a
replay that runs the graph in another loop than the recording) turns
``keep_alive`` on, as real providers keep connections alive.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

_rng = random.Random()


def token(prefix: str = "q") -> str:
    """A fresh random token: equal tokens across two runs prove a replay."""
    return f"{prefix}-{_rng.randrange(16**8):08x}"


# -- replies -------------------------------------------------------------------------------


@dataclass
class ToolCall:
    name: str
    args: Any = None
    """A dict (sent as JSON) or a raw ``str`` (sent as is, e.g. broken JSON)."""
    id: str | None = None

    def arguments(self) -> str:
        return self.args if isinstance(self.args, str) else json.dumps(self.args if self.args is not None else {})


@dataclass
class Reply:
    """What the model answers, independent of the provider's wire format."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class ProviderCall:
    """A received request, as handed to scripted callables."""

    provider: str  # "openai" | "anthropic"
    path: str
    body: dict

    def default(self) -> Reply:
        """The default brain's answer to this request."""
        return _default_reply(self)

    @property
    def last_text(self) -> str:
        """The text of the last message (handy for echoing in scripts)."""
        msgs = self.body.get("messages") or []
        if not msgs:
            return ""
        content = msgs[-1].get("content")
        if isinstance(content, str):
            return content
        parts = []
        for block in content or []:
            if isinstance(block, dict):
                parts.append(str(block.get("text", block.get("content", ""))))
        return "".join(parts)


Script = Callable[[ProviderCall], Any]


def as_reply(spec: Any, call: ProviderCall) -> Reply:
    """Normalise a scripted answer.

    Accepted: a ``Reply``; a ``str`` (text); a ``dict`` with ``text`` and/or
    ``tool_calls`` (each ``{"name", "args", "id"?}``), or ``{"json": obj}``
    (content is ``json.dumps(obj)``); a callable taking the ``ProviderCall`` and
    returning any of these, or ``None`` for the default brain.
    """
    if callable(spec) and not isinstance(spec, (Reply, str, dict)):
        spec = spec(call)
    if spec is None:
        return call.default()
    if isinstance(spec, Reply):
        return spec
    if isinstance(spec, str):
        return Reply(text=spec)
    if isinstance(spec, dict):
        if "json" in spec:
            return Reply(text=json.dumps(spec["json"]))
        calls = [
            tc if isinstance(tc, ToolCall) else ToolCall(name=tc["name"], args=tc.get("args"), id=tc.get("id"))
            for tc in spec.get("tool_calls", [])
        ]
        return Reply(text=spec.get("text", ""), tool_calls=calls)
    raise TypeError(f"cannot use {spec!r} as a scripted reply: give a str, dict, Reply or callable")


# -- values from JSON schemas ----------------------------------------------------------------


def fake_from_schema(schema: Any, root: dict | None = None, depth: int = 0) -> Any:
    """A random value satisfying a JSON schema (the subset Pydantic and tools produce)."""
    root = root if root is not None else (schema if isinstance(schema, dict) else {})
    if not isinstance(schema, dict) or depth > 8:
        return token()
    if "$ref" in schema:
        ref = schema["$ref"]
        node: Any = root
        for part in ref.lstrip("#/").split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return fake_from_schema(node, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = [o for o in schema[key] if not (isinstance(o, dict) and o.get("type") == "null")]
            return fake_from_schema((options or schema[key])[0], root, depth + 1)
    if schema.get("allOf"):
        merged: dict = {}
        for part in schema["allOf"]:
            merged.update(part)
        return fake_from_schema(merged, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: fake_from_schema(sub, root, depth + 1) for name, sub in props.items()}
    if kind == "array":
        items = schema.get("items", {"type": "string"})
        count = max(int(schema.get("minItems", 0)), 2)
        return [fake_from_schema(items, root, depth + 1) for _ in range(count)]
    if kind == "integer":
        low = int(schema.get("minimum", 0))
        return _rng.randint(low, max(low, int(schema.get("maximum", low + 10**6))))
    if kind == "number":
        return round(_rng.uniform(0, 1000), 3)
    if kind == "boolean":
        return _rng.random() < 0.5
    if kind == "null":
        return None
    fmt = schema.get("format")
    if fmt == "date-time":
        return f"2026-01-{_rng.randint(1, 28):02d}T12:00:00Z"
    if fmt == "date":
        return f"2026-01-{_rng.randint(1, 28):02d}"
    if fmt == "email":
        return f"{token('u')}@example.com"
    if fmt in ("uri", "url"):
        return f"https://example.com/{token('p')}"
    return token()


# -- the default brain --------------------------------------------------------------------------


def _openai_tools(body: dict) -> list[tuple[str, dict]]:
    out = []
    for t in body.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if fn:
            out.append((fn["name"], fn.get("parameters") or {}))
    return out


def _anthropic_tools(body: dict) -> list[tuple[str, dict]]:
    return [
        (t["name"], t.get("input_schema") or {}) for t in body.get("tools") or [] if isinstance(t, dict) and "name" in t
    ]


def _forced_tool(provider: str, body: dict) -> str | None:
    choice = body.get("tool_choice")
    if not isinstance(choice, dict):
        return None
    if provider == "openai":
        return (choice.get("function") or {}).get("name")
    return choice.get("name") if choice.get("type") == "tool" else None


def _last_is_user(provider: str, body: dict) -> bool:
    msgs = body.get("messages") or []
    if not msgs or msgs[-1].get("role") != "user":
        return False
    if provider == "anthropic":
        content = msgs[-1].get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return False
    return True


def _output_schema(provider: str, body: dict) -> dict | None:
    """The JSON schema of a native structured-output request, if any."""
    if provider == "openai":
        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            return (fmt.get("json_schema") or {}).get("schema") or {}
        return None
    for fmt in ((body.get("output_config") or {}).get("format"), body.get("output_format")):
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            return fmt.get("schema") or {}
    return None


def _default_reply(call: ProviderCall) -> Reply:
    body = call.body
    tools = _openai_tools(body) if call.provider == "openai" else _anthropic_tools(body)
    forced = _forced_tool(call.provider, body)
    schemas = dict(tools)
    if tools and _last_is_user(call.provider, body):
        name = forced if forced in schemas else tools[0][0]
        return Reply(tool_calls=[ToolCall(name=name, args=fake_from_schema(schemas[name]))])
    schema = _output_schema(call.provider, body)
    if schema is not None:
        return Reply(text=json.dumps(fake_from_schema(schema)))
    if forced in schemas:
        return Reply(tool_calls=[ToolCall(name=forced, args=fake_from_schema(schemas[forced]))])
    return Reply(text=token("srv"))


# -- wire formats ---------------------------------------------------------------------------------


def _usage_counts(body: dict, reply: Reply) -> tuple[int, int]:
    prompt = len(json.dumps(body.get("messages", []))) // 4 + 1
    completion = (len(reply.text) + sum(len(tc.arguments()) for tc in reply.tool_calls)) // 4 + 1
    return prompt, completion


def _ids(provider: str, reply: Reply) -> None:
    for tc in reply.tool_calls:
        if tc.id is None:
            tc.id = token("call" if provider == "openai" else "toolu").replace("-", "_")


def _openai_completion(body: dict, reply: Reply) -> dict:
    prompt, completion = _usage_counts(body, reply)
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments()}}
            for tc in reply.tool_calls
        ]
    return {
        "id": token("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "gpt-4o-mini"),
        "system_fingerprint": "fp_graphtape",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _pieces(text: str, n: int = 3) -> list[str]:
    """Split text into up to n non-empty pieces (several deltas, like a real stream)."""
    if not text:
        return []
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def _openai_stream(body: dict, reply: Reply) -> list[str]:
    prompt, completion = _usage_counts(body, reply)
    base = {
        "id": token("chatcmpl"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "gpt-4o-mini"),
        "system_fingerprint": "fp_graphtape",
    }

    def chunk(delta: dict, finish: str | None = None) -> str:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    out += [chunk({"content": piece}) for piece in _pieces(reply.text)]
    for i, tc in enumerate(reply.tool_calls):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": i, "id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": ""}}
                    ]
                }
            )
        )
        out += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}) for piece in _pieces(tc.arguments())
        ]
    out.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append(
            _sse(
                {
                    **base,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": completion,
                        "total_tokens": prompt + completion,
                    },
                }
            )
        )
    out.append(_sse("[DONE]"))
    return out


def _as_input(args: Any) -> Any:
    """Anthropic sends tool input as an object; raw scripted text is decoded when it can be."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return {}
    return args if args is not None else {}


def _anthropic_message(body: dict, reply: Reply) -> dict:
    prompt, completion = _usage_counts(body, reply)
    content: list[dict] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    content += [
        {"type": "tool_use", "id": tc.id, "name": tc.name, "input": _as_input(tc.args)} for tc in reply.tool_calls
    ]
    return {
        "id": token("msg"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-sonnet-4-5"),
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt,
            "output_tokens": completion,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _anthropic_stream(body: dict, reply: Reply) -> list[str]:
    prompt, completion = _usage_counts(body, reply)
    msg = _anthropic_message(body, reply)
    start = {
        **msg,
        "content": [],
        "stop_reason": None,
        "usage": {
            "input_tokens": prompt,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    out = [_sse({"type": "message_start", "message": start}, "message_start")]
    index = 0
    if reply.text:
        out.append(
            _sse(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                "content_block_start",
            )
        )
        out += [
            _sse(
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
                "content_block_delta",
            )
            for piece in _pieces(reply.text)
        ]
        out.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        index += 1
    for tc in reply.tool_calls:
        out.append(
            _sse(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": tc.id, "name": tc.name, "input": {}},
                },
                "content_block_start",
            )
        )
        out += [
            _sse(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                },
                "content_block_delta",
            )
            for piece in _pieces(tc.arguments())
        ]
        out.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        index += 1
    out.append(
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": completion},
            },
            "message_delta",
        )
    )
    out.append(_sse({"type": "message_stop"}, "message_stop"))
    return out


def _error_body(provider: str, status: int) -> dict:
    if provider == "openai":
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return {"error": {"message": f"fake {status} from the test server", "type": kind, "param": None, "code": None}}
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": f"fake {status} from the test server"}}


# -- the server ------------------------------------------------------------------------------------


class ProviderServer:
    """The fake provider on a free port of 127.0.0.1, served by uvicorn in a thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[tuple[str, dict]] = []
        self._script: deque = deque()
        self._failures: deque = deque()
        self.keep_alive = False
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/messages", self._anthropic, methods=["POST"]),
            ]
        )

    # -- what tests use

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: Any) -> None:
        """Queue answers for the next requests, one each, before the default brain.

        Each item is a str (text), a dict (``{"text"}``, ``{"tool_calls": [{"name",
        "args"}]}``, ``{"json": obj}``), a ``Reply``, or a callable taking the
        ``ProviderCall`` and returning one of those (``None``: default brain).
        """
        with self._lock:
            self._script.extend(replies)

    def fail_next(self, status: int = 500, times: int = 1) -> None:
        """The next ``times`` requests fail with ``status`` and a provider-shaped error body."""
        with self._lock:
            self._failures.extend([status] * times)

    def reset(self) -> None:
        """Forget requests, scripts and pending failures (each test starts clean)."""
        with self._lock:
            self.requests.clear()
            self._script.clear()
            self._failures.clear()
            self.keep_alive = False

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        return len(self._script)

    # -- lifecycle

    def start(self) -> ProviderServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
            http="h11",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)  # outside the main thread it installs no signal handlers
        self._thread = threading.Thread(target=self._run, args=(sock,), name="provider-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake provider server did not start")
            time.sleep(0.01)
        return self

    def _run(self, sock: socket.socket) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._server.serve(sockets=[sock]))
        finally:
            loop.close()
            sock.close()

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- handlers

    async def _take(self, provider: str, request: Request) -> tuple[dict, Any, int | None]:
        body = await request.json()
        with self._lock:
            self.requests.append((request.url.path, body))
            failure = self._failures.popleft() if self._failures else None
            scripted = self._script.popleft() if (failure is None and self._script) else None
        return body, scripted, failure

    def _reply(self, provider: str, path: str, body: dict, scripted: Any) -> Reply:
        call = ProviderCall(provider=provider, path=path, body=body)
        reply = as_reply(scripted, call)
        _ids(provider, reply)
        return reply

    def _headers(self, **extra: str) -> dict[str, str]:
        return extra if self.keep_alive else {**extra, "connection": "close"}

    async def _openai(self, request: Request) -> Response:
        body, scripted, failure = await self._take("openai", request)
        if failure is not None:
            return JSONResponse(_error_body("openai", failure), status_code=failure, headers=self._headers())
        reply = self._reply("openai", request.url.path, body, scripted)
        headers = self._headers(**{"x-request-id": token("req")})
        if body.get("stream"):
            return StreamingResponse(iter(_openai_stream(body, reply)), media_type="text/event-stream", headers=headers)
        return JSONResponse(_openai_completion(body, reply), headers=headers)

    async def _anthropic(self, request: Request) -> Response:
        body, scripted, failure = await self._take("anthropic", request)
        if failure is not None:
            return JSONResponse(_error_body("anthropic", failure), status_code=failure, headers=self._headers())
        reply = self._reply("anthropic", request.url.path, body, scripted)
        headers = self._headers(**{"request-id": token("req")})
        if body.get("stream"):
            return StreamingResponse(
                iter(_anthropic_stream(body, reply)), media_type="text/event-stream", headers=headers
            )
        return JSONResponse(_anthropic_message(body, reply), headers=headers)
