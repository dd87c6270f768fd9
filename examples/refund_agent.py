"""A customer-support agent that decides and pays out refunds.

The shape of many production agents: an LLM triages the request, a
tool-calling loop gathers facts, a payment API (an effect: it moves money)
is retried on a transient failure, and an LLM writes the reply.

    classify ─┬─ refund ─> agent <─> tools
              │             └─ approved ─> issue_refund ⟲ (retry ≤ 3)
              └─ other ──────────────────────────┴──> finalize ─> END

Run offline with the seeded fake model, or set ``GRAPHTAPE_MODEL`` (e.g.
``openai:gpt-4o-mini``) to use a real one.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel, Field

from graphtape import effect
from graphtape.testing import SeededChatModel, tracked
from graphtape.testing.models import model_from_env, random_sentence, tool_call_id

MAX_ATTEMPTS = 3

DEFAULT_PROMPTS: dict[str, str] = {
    "classify": "Classify the customer's request. Reply with exactly one word: refund or other.",
    "agent": (
        "You are a refund agent. Look up the order with lookup_order, then check the refund "
        "policy for its amount with check_policy. When you know whether the refund is allowed, "
        "answer with a one-line decision and no tool call."
    ),
    "finalize": "Write a short, friendly reply to the customer explaining the outcome. Facts follow.",
}

EXAMPLE_INPUT: dict[str, Any] = {
    "messages": [HumanMessage("Hi, my blender from order A-1001 arrived broken. I'd like a refund please.")],
}

_ORDERS = {
    "A-1001": {"order_id": "A-1001", "item": "blender", "amount": 149.0, "status": "delivered"},
    "A-1002": {"order_id": "A-1002", "item": "kettle", "amount": 39.5, "status": "delivered"},
    "B-2001": {"order_id": "B-2001", "item": "sofa", "amount": 899.0, "status": "delivered"},
}


class RefundState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = Field(default_factory=list)
    order_id: str | None = None
    refund_amount: float | None = None
    policy_ok: bool | None = None
    attempts: int = 0
    decision: str | None = None  # "refund" | "other" from classify
    payment_id: str | None = None
    error: str | None = None


# -- tools (the model decides to call these) ------------------------------


@tool
@tracked("tool")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id (like A-1001): item, amount paid and delivery status."""
    order = _ORDERS.get(order_id.strip().upper())
    return order if order else {"order_id": order_id, "error": "no such order"}


@tool
@tracked("tool")
def check_policy(amount: float) -> dict[str, Any]:
    """Check whether a refund of the given amount is allowed without a manager."""
    ok = 0 < amount <= 500
    return {"amount": amount, "eligible": ok, "reason": "within self-service limit" if ok else "needs manager approval"}


TOOLS = [lookup_order, check_policy]


# -- effects (code decides to call these; they act on the world) ----------


class GatewayTimeout(TimeoutError):
    """The payment provider did not answer in time; safe to retry with the same key."""


@effect(name="payments.issue_refund", idempotency_key=lambda order_id, amount, attempt=0: order_id)
@tracked("effect")
def issue_refund_payment(order_id: str, amount: float, attempt: int = 0) -> str:
    """Pay the refund out (fake). Large refunds time out on the first attempt, like a slow gateway."""
    if attempt == 0 and amount > 100:
        raise GatewayTimeout(f"payment gateway timed out refunding {order_id}")
    return f"rf_{uuid.uuid4().hex[:12]}"


# -- nodes ----------------------------------------------------------------


def build_graph(model: BaseChatModel | None = None, *, prompts: dict[str, str] | None = None) -> Any:
    """The compiled graph, without a checkpointer (the recorder brings one)."""
    llm = model if model is not None else default_model()
    p = {**DEFAULT_PROMPTS, **(prompts or {})}
    llm_with_tools = llm.bind_tools(TOOLS)

    def classify(state: RefundState) -> dict[str, Any]:
        human = next((m for m in reversed(state.messages) if isinstance(m, HumanMessage)), None)
        reply = llm.invoke([SystemMessage(p["classify"]), human or HumanMessage("")])
        decision = "refund" if "refund" in reply.text.lower() else "other"
        found = re.search(r"\b[A-Z]-\d{4}\b", human.text if human else "")
        return {"decision": decision, "order_id": found.group(0) if found else None}

    def agent(state: RefundState) -> dict[str, Any]:
        reply = llm_with_tools.invoke([SystemMessage(p["agent"]), *state.messages])
        update: dict[str, Any] = {"messages": [reply]}
        # Facts come from tool results, not from the model's prose.
        for m in state.messages:
            if isinstance(m, ToolMessage):
                data = _json(m.text)
                if m.name == "lookup_order" and "amount" in data:
                    update["order_id"], update["refund_amount"] = data["order_id"], float(data["amount"])
                elif m.name == "check_policy" and "eligible" in data:
                    update["policy_ok"] = bool(data["eligible"])
        return update

    def after_agent(state: RefundState) -> str:
        last = state.messages[-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return "tools"
        if state.policy_ok and state.order_id and state.refund_amount:
            return "issue_refund"
        return "finalize"

    def issue_refund(state: RefundState) -> dict[str, Any]:
        try:
            payment_id = issue_refund_payment(state.order_id, state.refund_amount, attempt=state.attempts)
        except TimeoutError as exc:
            return {"attempts": state.attempts + 1, "error": str(exc)}
        return {"payment_id": payment_id, "error": None}

    def after_refund(state: RefundState) -> str:
        if state.payment_id or state.attempts >= MAX_ATTEMPTS:
            return "finalize"
        return "issue_refund"

    def finalize(state: RefundState) -> dict[str, Any]:
        if state.payment_id:
            outcome = f"refunded {state.refund_amount:.2f} (payment {state.payment_id})"
        elif state.decision != "refund":
            outcome = "not a refund request"
        elif state.policy_ok is False:
            outcome = "refund needs manager approval"
        else:
            outcome = f"refund failed after {state.attempts} attempts: {state.error}"
        facts = f"order={state.order_id}; outcome={outcome}"
        human = next((m for m in state.messages if isinstance(m, HumanMessage)), HumanMessage(""))
        reply = llm.invoke([SystemMessage(f"{p['finalize']}\nFACTS: {facts}"), human])
        return {"messages": [reply]}

    builder = StateGraph(RefundState)
    builder.add_node("classify", classify)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(TOOLS))
    builder.add_node("issue_refund", issue_refund)
    builder.add_node("finalize", finalize)
    builder.add_edge(START, "classify")
    builder.add_conditional_edges(
        "classify", lambda s: "agent" if s.decision == "refund" else "finalize", ["agent", "finalize"]
    )
    builder.add_conditional_edges("agent", after_agent, ["tools", "issue_refund", "finalize"])
    builder.add_edge("tools", "agent")
    builder.add_conditional_edges("issue_refund", after_refund, ["issue_refund", "finalize"])
    builder.add_edge("finalize", END)
    return builder.compile()


def _json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


# -- offline model ----------------------------------------------------------


def respond(messages: list[BaseMessage], rng: random.Random, tools: list[dict[str, Any]]) -> AIMessage:
    """How the fake model plays each role: triage, tool use, then a varied customer reply."""
    system = messages[0].text if messages and isinstance(messages[0], SystemMessage) else ""
    if tools:
        done = {m.name: _json(m.text) for m in messages if isinstance(m, ToolMessage)}
        if "lookup_order" not in done:
            human = " ".join(m.text for m in messages if isinstance(m, HumanMessage))
            found = re.search(r"\b[A-Z]-\d{4}\b", human)
            return _call("lookup_order", {"order_id": found.group(0) if found else "unknown"}, rng)
        amount = done["lookup_order"].get("amount")
        if amount is not None and "check_policy" not in done:
            return _call("check_policy", {"amount": amount}, rng)
        ok = done.get("check_policy", {}).get("eligible")
        return AIMessage("Decision: refund approved." if ok else "Decision: refund not possible automatically.")
    if "classify" in system.lower():
        text = " ".join(m.text.lower() for m in messages if isinstance(m, HumanMessage))
        return AIMessage("refund" if re.search(r"refund|money back|return", text) else "other")
    facts = system.split("FACTS:", 1)[-1].strip()
    opener = rng.choice(["Hi there,", "Hello,", "Thanks for reaching out,", "Sorry about that,"])
    return AIMessage(f"{opener} here is an update: {facts}. {random_sentence(rng)}")


def _call(name: str, args: dict[str, Any], rng: random.Random) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": tool_call_id(rng)}])


def default_model() -> BaseChatModel:
    """The model in ``$GRAPHTAPE_MODEL`` if set, else an offline fake with ~50 ms latency."""
    return model_from_env() or SeededChatModel(latency=0.05, model_name="fake-support-1", responder=respond)


graph = build_graph()
