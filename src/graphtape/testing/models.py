"""A chat model that behaves like a real provider, without the network.

Recording and replay only prove something if the thing recorded is not
deterministic by accident. :class:`SeededChatModel` therefore answers
differently on every call (unless seeded), takes time, reports token usage,
streams, and calls tools — the properties of a hosted model a flight
recorder must cope with — while staying offline and free.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, PrivateAttr

from graphtape.testing.guard import LiveCallForbidden, check_live

#: ``(messages, rng, tools) -> AIMessage | str``; ``tools`` are OpenAI-style tool dicts.
Responder = Callable[[list[BaseMessage], random.Random, list[dict[str, Any]]], Any]

VOCABULARY = (
    "the agent checks each order before it answers and the customer waits while a "
    "policy review confirms that our team can ship a faster reply today because "
    "every ticket needs clear context about billing refunds delivery returns and "
    "account status so we summarize the request verify details then resolve it "
    "quickly with care"
).split()

_WORDS_PER_CHUNK = 3


def random_sentence(rng: random.Random, low: int = 8, high: int = 20) -> str:
    """``low``–``high`` words from a fixed vocabulary, capitalised, with a full stop."""
    words = [rng.choice(VOCABULARY) for _ in range(rng.randint(low, high))]
    return " ".join(words).capitalize() + "."


def fake_args(schema: Mapping[str, Any], rng: random.Random, name: str = "") -> Any:
    """A plausible value for a JSON schema, guessing from property names.

    Only the shapes tool schemas actually use are covered; anything exotic
    yields ``None`` rather than an error, as a sloppy real model would.
    """
    if "enum" in schema:
        return rng.choice(list(schema["enum"]))
    kind = schema.get("type")
    if kind is None and "anyOf" in schema:  # Optional[...] etc.: take the first non-null branch
        branches = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return fake_args(branches[0], rng, name) if branches else None
    lname = name.lower()
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {k: fake_args(v, rng, k) for k, v in props.items() if k in required}
    if kind == "array":
        return [fake_args(schema.get("items", {}), rng, name) for _ in range(rng.randint(1, 2))]
    if kind == "integer":
        return rng.randint(int(schema.get("minimum", 1)), int(schema.get("maximum", 10)))
    if kind == "number":
        return round(rng.uniform(float(schema.get("minimum", 1)), float(schema.get("maximum", 500))), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        if lname.endswith("id"):
            return f"{rng.choice('ABCDX')}-{rng.randint(1000, 9999)}"
        if "email" in lname or lname in {"to", "recipient"}:
            return f"{rng.choice(VOCABULARY)}@example.com"
        return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(2, 5)))
    return None


def tool_call_id(rng: random.Random) -> str:
    """An OpenAI-looking tool call id drawn from ``rng`` (so seeded runs repeat)."""
    return f"call_{rng.getrandbits(96):024x}"


def default_responder(messages: list[BaseMessage], rng: random.Random, tools: list[dict[str, Any]]) -> AIMessage:
    """Call the first bound tool when a human just spoke, otherwise say a random sentence."""
    if tools and messages and isinstance(messages[-1], HumanMessage):
        fn = tools[0].get("function", tools[0])
        args = fake_args(fn.get("parameters", {}), rng)
        return AIMessage(content="", tool_calls=[{"name": fn["name"], "args": args, "id": tool_call_id(rng)}])
    return AIMessage(content=random_sentence(rng))


def model_from_env(var: str = "GRAPHTAPE_MODEL") -> BaseChatModel | None:
    """The real model named in ``$GRAPHTAPE_MODEL`` (e.g. ``openai:gpt-4o-mini``), or None.

    Lets the examples run against a real provider without code changes; the
    error is explicit because silently falling back to a fake would make a
    user believe they recorded their real model.
    """
    spec = os.environ.get(var, "").strip()
    if not spec:
        return None
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise RuntimeError(
            f"{var}={spec!r} asks for a real chat model, but the 'langchain' package is not "
            f"installed: pip install langchain and the provider package (e.g. langchain-openai), "
            f"or unset {var} to use the offline SeededChatModel"
        ) from exc
    return init_chat_model(spec)


def _text_len(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    total = 0
    for part in content or []:
        if isinstance(part, str):
            total += len(part)
        elif isinstance(part, dict):
            total += len(str(part.get("text", "")))
    return total


def _chars(message: BaseMessage) -> int:
    n = _text_len(message.content)
    calls = getattr(message, "tool_calls", None)
    if calls:
        n += len(json.dumps([{"name": c["name"], "args": c["args"]} for c in calls], default=str))
    return n


def _tool_dicts(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    """Tools as OpenAI tool dicts, whether bound via ``bind_tools`` or passed raw."""
    out = []
    for t in tools or []:
        if isinstance(t, dict) and ("function" in t or "parameters" in t):
            out.append(t)
        else:
            out.append(convert_to_openai_tool(t))
    return out


class _Draws:
    """The RNG, its lock and the call counter, shared by all bindings of one model.

    Deep copies get their own lock and an independent RNG continuing from
    the same state (a lock cannot be copied).
    """

    def __init__(self, seed: int) -> None:
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.calls = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> _Draws:
        clone = _Draws(0)
        with self.lock:
            clone.rng = copy.deepcopy(self.rng, memo)
            clone.calls = self.calls
        return clone


class SeededChatModel(BaseChatModel):
    """A fake hosted chat model: random answers, latency, usage, streaming, tools.

    With ``seed=None`` every instance and every call answers differently,
    which is exactly what makes recording worthwhile; with a seed a fresh
    instance repeats the same sequence of answers.
    """

    model_config = ConfigDict(protected_namespaces=())

    model_name: str = "graphtape-fake-1"
    seed: int | None = None
    latency: float = 0.0
    temperature: float = 0.7
    responder: Callable[..., Any] | None = None
    forbid_live: bool = False

    _draws: _Draws = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        seed = self.seed if self.seed is not None else int.from_bytes(os.urandom(8), "big")
        self._draws = _Draws(seed)

    @property
    def _llm_type(self) -> str:
        return "graphtape-fake-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # seed, latency and forbid_live change how a call is served, not what
        # was asked: keeping them out keeps request fingerprints stable.
        return {"model_name": self.model_name, "temperature": self.temperature}

    @property
    def calls(self) -> int:
        """How many times this model really generated (served replays do not count)."""
        with self._draws.lock:
            return self._draws.calls

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Runnable[Any, AIMessage]:
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    # -- one call ---------------------------------------------------------

    def _respond(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> tuple[AIMessage, float]:
        """Decide the whole answer and its latency before any output is produced.

        A single draw from the shared RNG seeds a per-call RNG, so the answer
        does not depend on whether it is streamed, and concurrent calls only
        contend for the lock during that one draw.
        """
        check_live("llm", self.model_name)
        if self.forbid_live:
            raise LiveCallForbidden(f"SeededChatModel {self.model_name!r} was called live (forbid_live=True)")
        with self._draws.lock:
            self._draws.calls += 1
            rng = random.Random(self._draws.rng.getrandbits(64))
        tools = _tool_dicts(kwargs.get("tools"))
        out = (self.responder or default_responder)(list(messages), rng, tools)
        msg = out if isinstance(out, AIMessage) else AIMessage(content=str(out))
        calls = [{**c, "id": c.get("id") or tool_call_id(rng)} for c in msg.tool_calls]
        n_in = max(1, sum(_chars(m) for m in messages) // 4)
        msg = AIMessage(
            content=msg.content,
            tool_calls=calls,
            additional_kwargs=dict(msg.additional_kwargs),
            response_metadata={"model_name": self.model_name, "finish_reason": "tool_calls" if calls else "stop"},
        )
        n_out = _chars(msg) // 4 + 1
        msg.usage_metadata = UsageMetadata(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out)
        # Gamma: right-skewed like real latencies, mean exactly `latency`.
        delay = rng.gammavariate(4.0, self.latency / 4.0) if self.latency > 0 else 0.0
        return msg, delay

    @staticmethod
    def _chunks(msg: AIMessage) -> list[AIMessageChunk]:
        """The answer as a few-word chunks, then a last chunk with tool calls and usage."""
        text = msg.content if isinstance(msg.content, str) else ""
        words = re.findall(r"\s*\S+\s*", text)
        pieces = ["".join(words[i : i + _WORDS_PER_CHUNK]) for i in range(0, len(words), _WORDS_PER_CHUNK)]
        out = [AIMessageChunk(content=p) for p in pieces]
        out.append(
            AIMessageChunk(
                content="" if isinstance(msg.content, str) else msg.content,
                tool_call_chunks=[
                    {
                        "name": c["name"],
                        "args": json.dumps(c["args"]),
                        "id": c["id"],
                        "index": i,
                        "type": "tool_call_chunk",
                    }
                    for i, c in enumerate(msg.tool_calls)
                ],
                usage_metadata=msg.usage_metadata,
                response_metadata=dict(msg.response_metadata),
                chunk_position="last",
            )
        )
        return out

    # -- langchain hooks -------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        msg, delay = self._respond(messages, kwargs)
        time.sleep(delay)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        msg, delay = self._respond(messages, kwargs)
        await asyncio.sleep(delay)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        msg, delay = self._respond(messages, kwargs)
        chunks = self._chunks(msg)
        for chunk in chunks:
            time.sleep(delay / len(chunks))
            yield ChatGenerationChunk(message=chunk)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        msg, delay = self._respond(messages, kwargs)
        chunks = self._chunks(msg)
        for chunk in chunks:
            await asyncio.sleep(delay / len(chunks))
            yield ChatGenerationChunk(message=chunk)


__all__ = [
    "Responder",
    "SeededChatModel",
    "default_responder",
    "fake_args",
    "model_from_env",
    "random_sentence",
    "tool_call_id",
]
