"""The graph the front-end check serves: a support desk that looks an order up after a human approves the call.

agent (a chat model that calls ``lookup_order`` on a human turn, then answers from the result) ->
approve (an interrupt showing the tool call: resume ``{"type": "accept"}``, or ``{"type": "edit",
"args": {...}}`` to run it with other arguments) -> tools -> agent. The model is graphtape's fake
provider (``SeededChatModel``): it takes time and streams its answer in chunks, like a hosted one.
"""

from __future__ import annotations

import random
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt
from typing_extensions import TypedDict

from graphtape.testing.models import SeededChatModel


class Desk(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up by its id."""
    return f"order {order_id} left the warehouse on Monday"


def respond(messages: list[BaseMessage], rng: random.Random, tools: list[dict[str, Any]]) -> AIMessage:
    """A human turn: look the order up (the last word that looks like an order id); a tool result: answer from it."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        words = [w.strip("?.!,") for w in last.text.split()]
        order = next((w for w in reversed(words) if "-" in w), "A-1")
        return AIMessage(content="", tool_calls=[{"name": "lookup_order", "args": {"order_id": order}, "id": None}])
    found = last.text if isinstance(last, ToolMessage) else "nothing"
    return AIMessage(content=f"I looked it up for you: {found}. Anything else I can check?")


def graph() -> Any:
    model = SeededChatModel(responder=respond, latency=0.4).bind_tools([lookup_order])

    def agent(s: Desk) -> dict[str, Any]:
        return {"messages": [model.invoke(s["messages"])]}

    def route(s: Desk) -> str:
        last = s["messages"][-1]
        return "approve" if isinstance(last, AIMessage) and last.tool_calls else END

    def approve(s: Desk) -> dict[str, Any]:
        call_msg = s["messages"][-1]
        assert isinstance(call_msg, AIMessage)
        call = call_msg.tool_calls[0]
        answer = interrupt({"question": f"Run {call['name']} with {call['args']}?", "tool_call": call})
        if isinstance(answer, dict) and answer.get("type") == "edit":
            edited = call_msg.model_copy(update={"tool_calls": [{**call, "args": answer["args"]}]})
            return {"messages": [edited]}  # the same message id: add_messages replaces the call
        return {}

    b = StateGraph(Desk)
    b.add_node(agent)
    b.add_node(approve)
    b.add_node("tools", ToolNode([lookup_order]))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", route, ["approve", END])
    b.add_edge("approve", "tools")
    b.add_edge("tools", "agent")
    return b.compile()
