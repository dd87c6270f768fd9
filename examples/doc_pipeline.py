"""A nine-step document pipeline: a long, linear graph with four LLM steps.

The case where replay pays off most: a change to one late prompt should not
re-run (and re-pay for) every step before it. Two effects pin down what
LangGraph cannot see: reading the clock and sending e-mail.

    ingest ─> clean ─> detect_language ─> [analyze: extract_entities ─> summarize]
           ─> classify ─> translate ─> quality_check ─> publish

``analyze`` is a compiled subgraph added as a single node.
"""

from __future__ import annotations

import random
import re
import uuid
from datetime import UTC, datetime
from typing import Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph

from graphtape import effect
from graphtape.testing import SeededChatModel, tracked
from graphtape.testing.models import model_from_env, random_sentence

CATEGORIES = ["invoice", "contract", "complaint", "report", "other"]

DEFAULT_PROMPTS: dict[str, str] = {
    "extract_entities": (
        "List the named entities (people, organisations, places, amounts) in the document, one per line."
    ),
    "summarize": "Summarize the document in two sentences. Mention the key entities.",
    "classify": f"Classify the document into one of: {', '.join(CATEGORIES)}. Reply with the category only.",
    "translate": "Translate the summary into the target language given. Reply with the translation only.",
}

EXAMPLE_INPUT: dict[str, Any] = {
    "raw": (
        "<p>Dear Ms. Alvarez,</p>\n<p>Following our meeting in Rotterdam on 3 March, Northwind Logistics "
        "confirms the revised delivery contract with Contoso GmbH.  The monthly fee is EUR 12,400, "
        "payable within 30 days.</p>\n\n<p>The agreement runs until December and may be renewed by "
        "either party.   Best regards,  Tom Becker</p>"
    ),
    "target_language": "de",
    "recipient": "ops@example.com",
}

_STOPWORDS = {
    "en": {"the", "and", "of", "to", "is", "with", "by", "our", "in", "on"},
    "de": {"der", "die", "das", "und", "mit", "ist", "von", "zu", "den", "im"},
    "fr": {"le", "la", "les", "et", "de", "est", "avec", "pour", "une", "des"},
}


class DocState(TypedDict, total=False):
    raw: str
    target_language: str
    recipient: str
    received_at: str
    text: str
    language: str
    entities: list[str]
    summary: str
    category: str
    translation: str
    quality: dict[str, Any]
    message_id: str


class AnalyzeState(TypedDict, total=False):
    text: str
    entities: list[str]
    summary: str


@effect
@tracked("effect")
def now() -> str:
    """The current UTC time: nondeterministic, so replays must serve the recorded value."""
    return datetime.now(UTC).isoformat()


@effect(name="mail.send")
@tracked("effect")
def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail (fake: nothing leaves the machine) and return its message id."""
    return f"<{uuid.uuid4()}@mail.example.com>"


def build_graph(model: BaseChatModel | None = None, *, prompts: dict[str, str] | None = None) -> Any:
    """The compiled graph, without a checkpointer (the recorder brings one)."""
    llm = model if model is not None else default_model()
    p = {**DEFAULT_PROMPTS, **(prompts or {})}

    def ask(key: str, content: str) -> str:
        return llm.invoke([SystemMessage(p[key]), HumanMessage(content)]).text.strip()

    def ingest(state: DocState) -> dict[str, Any]:
        return {"received_at": now(), "text": state["raw"]}

    def clean(state: DocState) -> dict[str, Any]:
        text = re.sub(r"<[^>]+>", " ", state["text"])
        return {"text": re.sub(r"\s+", " ", text).strip()}

    def detect_language(state: DocState) -> dict[str, Any]:
        words = re.findall(r"[a-zäöüéèàç]+", state["text"].lower())
        scores = {lang: sum(w in stop for w in words) for lang, stop in _STOPWORDS.items()}
        return {"language": max(scores, key=lambda lang: scores[lang])}

    def extract_entities(state: AnalyzeState) -> dict[str, Any]:
        lines = ask("extract_entities", state["text"]).splitlines()
        return {"entities": [ln.lstrip("-* ").strip() for ln in lines if ln.strip()]}

    def summarize(state: AnalyzeState) -> dict[str, Any]:
        entities = ", ".join(state.get("entities", []))
        return {"summary": ask("summarize", f"Entities: {entities}\n\n{state['text']}")}

    def classify(state: DocState) -> dict[str, Any]:
        answer = ask("classify", state["summary"]).lower()
        return {"category": next((c for c in CATEGORIES if c in answer), "other")}

    def translate(state: DocState) -> dict[str, Any]:
        target = state.get("target_language", "en")
        if target == state.get("language"):
            return {"translation": state["summary"]}
        return {"translation": ask("translate", f"Target language: {target}\n\n{state['summary']}")}

    def quality_check(state: DocState) -> dict[str, Any]:
        issues = []
        if not state.get("entities"):
            issues.append("no entities found")
        if not 20 <= len(state.get("summary", "")) <= 600:
            issues.append("summary length out of range")
        if not state.get("translation"):
            issues.append("empty translation")
        return {"quality": {"passed": not issues, "issues": issues}}

    def publish(state: DocState) -> dict[str, Any]:
        flag = "" if state["quality"]["passed"] else "[REVIEW] "
        subject = f"{flag}{state['category'].title()} received {state['received_at'][:10]}"
        translation = f"({state['target_language']}) {state['translation']}"
        body = f"{state['summary']}\n\n{translation}\n\nEntities: {state['entities']}"
        return {"message_id": send_email(state.get("recipient", "ops@example.com"), subject, body)}

    analyze = StateGraph(AnalyzeState)
    analyze.add_node("extract_entities", extract_entities)
    analyze.add_node("summarize", summarize)
    analyze.add_edge(START, "extract_entities")
    analyze.add_edge("extract_entities", "summarize")
    analyze.add_edge("summarize", END)

    builder = StateGraph(DocState)
    steps = [
        ("ingest", ingest),
        ("clean", clean),
        ("detect_language", detect_language),
        ("analyze", analyze.compile()),
        ("classify", classify),
        ("translate", translate),
        ("quality_check", quality_check),
        ("publish", publish),
    ]
    previous = START
    for name, node in steps:
        builder.add_node(name, node)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder.compile()


# -- offline model ----------------------------------------------------------

_ENTITY = re.compile(r"EUR [\d,]*\d|[A-Z][A-Za-z]+(?: [A-Z][A-Za-z]+)*")
_NOT_WORDS = {"Dear", "Ms", "Mr", "Dr", "Following", "The", "Best", "This", "We"}


def respond(messages: list[BaseMessage], rng: random.Random, tools: list[dict[str, Any]]) -> AIMessage:
    """Picks real entities from the text, varies the summary, fakes a translation."""
    system = messages[0].text.lower() if messages and isinstance(messages[0], SystemMessage) else ""
    user = messages[-1].text if messages else ""
    if "entities" in system and "one per line" in system:
        names = (" ".join(w for w in m.split(" ") if w not in _NOT_WORDS) for m in _ENTITY.findall(user))
        found = [e for e in dict.fromkeys(names) if e]
        picked = sorted(rng.sample(found, min(len(found), rng.randint(3, 6))), key=found.index)
        return AIMessage("\n".join(f"- {e}" for e in picked))
    if "summarize" in system:
        entities = user.split("\n\n", 1)[0].removeprefix("Entities: ")
        sentences = re.split(r"(?<=\w{3}[.!?])\s+", user.split("\n\n", 1)[-1])
        main = rng.choice(sorted(sentences, key=len)[-2:])
        main = re.sub(r"^Dear [^,]+,\s*", "", main)
        tail = rng.choice(["It involves {}.", "Parties and figures: {}.", "Key entities: {}."]).format(
            entities or "none"
        )
        return AIMessage(f"{main[:1].upper()}{main[1:]} {tail}")
    if "classify" in system:
        return AIMessage(rng.choices(["contract", "invoice", "other"], weights=[8, 1, 1])[0])
    if "translate" in system:
        target = re.search(r"Target language: (\w+)", user)
        body = user.split("\n\n", 1)[-1]
        register = " formal" if "formal" in system else ""
        return AIMessage(f"[{target.group(1) if target else '?'}{register}] {body}")
    return AIMessage(random_sentence(rng))


def default_model() -> BaseChatModel:
    """The model in ``$GRAPHTAPE_MODEL`` if set, else an offline fake with ~50 ms latency."""
    return model_from_env() or SeededChatModel(latency=0.05, model_name="fake-docs-1", responder=respond)


graph = build_graph()
