"""A research assistant: plan, search in parallel, ask a human, write a report.

Exercises the parts of LangGraph a recorder finds hardest: a ``Send``
fan-out whose branches run concurrently, an ``async`` node, a tool called
straight from node code, a human-in-the-loop ``interrupt`` (so a run spans
several invocations), ``Command(goto=...)`` routing and a streamed LLM call.

    plan ─Send×3─> search_one ─> draft ─> human_review ─┬─ approve ─> report ─> END
                                   ^───── feedback ─────┘

``search_one`` has a sync and an ``async def`` implementation: ``invoke``
runs the first, ``ainvoke``/``astream`` the second. The graph stops at
``human_review``; resume it with ``Command(resume=EXAMPLE_RESUME)`` on the
same thread (a checkpointer is required).
"""

from __future__ import annotations

import operator
import random
import re
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from graphtape.testing import SeededChatModel, tracked
from graphtape.testing.models import model_from_env, random_sentence

DEFAULT_PROMPTS: dict[str, str] = {
    "plan": "Break the research topic into exactly 3 sub-questions, one per line, no numbering.",
    "draft": "Write a short draft answer to the topic from the search findings. Address any reviewer feedback.",
    "report": "Turn the approved draft into a final report with a title line and a one-paragraph summary.",
}

EXAMPLE_INPUT: dict[str, Any] = {"topic": "How do heat pumps perform in cold climates?"}
EXAMPLE_RESUME = "approve"

_CORPUS = [
    ("Cold-climate heat pumps keep a COP above 2 down to -15 C", "https://example.org/ccashp-field-study"),
    ("Defrost cycles cut heat pump efficiency by 5-10% in humid cold", "https://example.org/defrost"),
    ("Installation cost of air-source heat pumps ranges from $8k to $15k", "https://example.org/costs"),
    ("Ground-source heat pumps are insensitive to air temperature", "https://example.org/ground-source"),
    ("Backup resistance heat is needed below the balance point", "https://example.org/balance-point"),
    ("Norway has the most heat pumps per household in Europe", "https://example.org/norway"),
    ("Refrigerant R32 and CO2 models improve low-temperature capacity", "https://example.org/refrigerants"),
]


class ResearchState(TypedDict, total=False):
    topic: str
    questions: list[str]
    findings: Annotated[list[dict[str, Any]], operator.add]
    draft: str
    feedback: str | None
    revisions: int
    report: str


class SearchTask(TypedDict):
    question: str


@tool
@tracked("tool")
def web_search(query: str, max_results: int = 2) -> list[dict[str, str]]:
    """Search the web (an offline corpus) and return the best matching snippets with URLs."""
    words = set(re.findall(r"[a-z0-9]+", query.lower()))
    scored = sorted(_CORPUS, key=lambda doc: -len(words & set(re.findall(r"[a-z0-9]+", doc[0].lower()))))
    return [{"snippet": s, "url": u} for s, u in scored[:max_results]]


def build_graph(model: BaseChatModel | None = None, *, prompts: dict[str, str] | None = None) -> Any:
    """The compiled graph, without a checkpointer (the recorder brings one)."""
    llm = model if model is not None else default_model()
    p = {**DEFAULT_PROMPTS, **(prompts or {})}

    def plan(state: ResearchState) -> dict[str, Any]:
        reply = llm.invoke([SystemMessage(p["plan"]), HumanMessage(state["topic"])])
        lines = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", ln).strip() for ln in reply.text.splitlines()]
        return {"questions": [ln for ln in lines if ln][:3] or [state["topic"]], "revisions": 0}

    def fan_out(state: ResearchState) -> list[Send]:
        return [Send("search_one", {"question": q}) for q in state["questions"]]

    def search_one_sync(task: SearchTask) -> dict[str, Any]:
        return {"findings": [{"question": task["question"], "results": web_search.invoke({"query": task["question"]})}]}

    async def search_one(task: SearchTask) -> dict[str, Any]:
        results = await web_search.ainvoke({"query": task["question"]})
        return {"findings": [{"question": task["question"], "results": results}]}

    def draft(state: ResearchState) -> dict[str, Any]:
        # Branches often find the same pages: dedupe, sorted so the prompt never depends on hash order.
        notes = "\n".join(sorted({f"- {r['snippet']} ({r['url']})" for f in state["findings"] for r in f["results"]}))
        ask = f"Topic: {state['topic']}\nFindings:\n{notes}"
        if state.get("feedback"):
            ask += f"\nReviewer feedback: {state['feedback']}"
        reply = llm.invoke([SystemMessage(p["draft"]), HumanMessage(ask)])
        return {"draft": reply.text}

    def human_review(state: ResearchState) -> Command[Literal["report", "draft"]]:
        # Runs again from the top on resume: nothing before interrupt() may have side effects.
        answer = interrupt({"draft": state["draft"], "question": "approve?"})
        if isinstance(answer, dict):
            answer = answer.get("feedback") or ("approve" if answer.get("approved") else "")
        if answer is True or str(answer).strip().lower() in {"approve", "approved", "yes", "ok"}:
            return Command(goto="report", update={"feedback": None})
        return Command(goto="draft", update={"feedback": str(answer), "revisions": state.get("revisions", 0) + 1})

    def report(state: ResearchState) -> dict[str, Any]:
        msgs = [SystemMessage(p["report"]), HumanMessage(f"Topic: {state['topic']}\nDraft:\n{state['draft']}")]
        text = ""
        for chunk in llm.stream(msgs):
            text += chunk.text
        return {"report": text}

    builder = StateGraph(ResearchState)
    builder.add_node("plan", plan)
    builder.add_node("search_one", RunnableLambda(search_one_sync, afunc=search_one, name="search_one"))
    builder.add_node("draft", draft)
    builder.add_node("human_review", human_review)
    builder.add_node("report", report)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["search_one"])
    builder.add_edge("search_one", "draft")
    builder.add_edge("draft", "human_review")
    builder.add_edge("report", END)
    return builder.compile()


# -- offline model ----------------------------------------------------------

_ASPECTS = ["efficiency", "cost", "reliability", "adoption", "limitations", "alternatives", "installation"]


def respond(messages: list[BaseMessage], rng: random.Random, tools: list[dict[str, Any]]) -> AIMessage:
    """Plans three varied sub-questions, drafts from the findings, writes a titled report."""
    system = messages[0].text.lower() if messages and isinstance(messages[0], SystemMessage) else ""
    user = messages[-1].text if messages else ""
    if "sub-question" in system:
        topic = user.rstrip("?").strip()
        aspects = rng.sample(_ASPECTS, 3)
        return AIMessage("\n".join(f"- What about {a} when asking: {topic}?" for a in aspects))
    if "draft" in system and "findings" in user.lower():
        snippets = re.findall(r"^- (.+?) \(", user, flags=re.M)
        picked = rng.sample(snippets, min(2, len(snippets))) if snippets else []
        revised = " (revised per feedback)" if "Reviewer feedback" in user else ""
        return AIMessage(f"Draft{revised}: " + "; ".join(picked) + ". " + random_sentence(rng))
    if "report" in system:
        body = user.split("Draft:", 1)[-1].strip()
        return AIMessage(f"Report: {user.splitlines()[0].removeprefix('Topic: ')}\n\n{body} {random_sentence(rng)}")
    return AIMessage(random_sentence(rng))


def default_model() -> BaseChatModel:
    """The model in ``$GRAPHTAPE_MODEL`` if set, else an offline fake with ~50 ms latency."""
    return model_from_env() or SeededChatModel(latency=0.05, model_name="fake-research-1", responder=respond)


graph = build_graph()
