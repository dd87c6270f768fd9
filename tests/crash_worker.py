"""A worker process for the crash tests: records one run and may SIGKILL itself mid-way.

Usage: ``python -m tests.crash_worker STORE_URL LEDGER THREAD [CRASH_POINT] [recover]``

Every live model generation and every effect execution is appended to the
LEDGER file (one JSON line each, flushed and fsynced) so the test can prove
that nothing completed was repeated. ``CRASH_POINT`` names where to die:
``after-draft-llm``, ``after-charge``, ``after-check-llm`` (three calls of one
node completed, before the node's step is committed), ``before-notify``, ``in-charge`` (after the charge
happened, before it returns), or ``random:<seed>`` (a random delay).
``recover`` runs ``tape.recover`` instead of a new run.
"""

from __future__ import annotations

import json
import operator
import os
import random
import signal
import sys
import threading
import time
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape.record.effect import NOT_DONE

LEDGER = sys.argv[2] if len(sys.argv) > 2 else os.devnull
CRASH = sys.argv[4] if len(sys.argv) > 4 else ""


def ledger(kind: str, **data: Any) -> None:
    with open(LEDGER, "a") as f:
        f.write(json.dumps({"kind": kind, **data}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def die_at(point: str) -> None:
    if CRASH == point:
        os.kill(os.getpid(), signal.SIGKILL)


class LedgerModel(BaseChatModel):
    """Deterministic answers (so crashed and uncrashed runs end equal); every generation is logged."""

    @property
    def _llm_type(self) -> str:
        return "ledger-model"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        prompt = messages[-1].content
        time.sleep(0.01)
        text = f"answer to: {prompt}"
        ledger("llm", prompt=prompt)
        return ChatResult(
            generations=[
                ChatGeneration(
                    message=AIMessage(
                        content=text, usage_metadata={"input_tokens": 5, "output_tokens": 5, "total_tokens": 10}
                    )
                )
            ]
        )


def _ledger_entries(kind: str) -> list[dict[str, Any]]:
    try:
        with open(LEDGER) as f:
            return [e for e in map(json.loads, f) if e["kind"] == kind]
    except FileNotFoundError:
        return []


def reconcile_charge(key: str) -> Any:
    """Ask "the bank" (the ledger) whether the charge with this key happened."""
    for e in _ledger_entries("effect"):
        if e["name"] == "charge" and e["key"] == key:
            return e["result"]
    return NOT_DONE


@graphtape.effect(name="charge", idempotency_key=lambda order, amount: order, reconcile=reconcile_charge)
def charge(order: str, amount: int) -> str:
    result = f"ch-{order}-{amount}"
    ledger("effect", name="charge", key=order, result=result)
    die_at("in-charge")
    return result


def reconcile_notify(key: str) -> Any:
    for e in _ledger_entries("effect"):
        if e["name"] == "notify" and e["key"] == key:
            return e["result"]
    return NOT_DONE


@graphtape.effect(name="notify", idempotency_key=lambda order, text: f"notify-{order}", reconcile=reconcile_notify)
def notify(order: str, text: str) -> str:
    ledger("effect", name="notify", key=f"notify-{order}", result="sent")
    return "sent"


class State(TypedDict, total=False):
    order: str
    draft: str
    receipt: str
    log: Annotated[list, operator.add]


model = LedgerModel()


def plan(s: State) -> dict:
    return {"log": [model.invoke([HumanMessage(f"plan {s['order']}")]).content]}


def work(s: State) -> dict:
    draft = model.invoke([HumanMessage(f"draft {s['order']}")]).content
    die_at("after-draft-llm")
    receipt = charge(s["order"], 42)
    die_at("after-charge")
    check = model.invoke([HumanMessage(f"check {receipt}")]).content
    die_at("after-check-llm")
    return {"draft": draft, "receipt": receipt, "log": [check]}


def finish(s: State) -> dict:
    die_at("before-notify")
    sent = notify(s["order"], s["draft"])
    return {"log": [model.invoke([HumanMessage(f"summary {s['receipt']} {sent}")]).content]}


builder = StateGraph(State)
builder.add_node(plan)
builder.add_node(work)
builder.add_node(finish)
builder.add_edge(START, "plan")
builder.add_edge("plan", "work")
builder.add_edge("work", "finish")
builder.add_edge("finish", END)
graph = builder.compile()


def main() -> None:
    url, thread = sys.argv[1], sys.argv[3]
    tape = graphtape.connect(url)
    if CRASH.startswith("random:"):
        # the clock starts once the store is open, so kills land in the run, not in the connect
        # over the run's own length when the caller measured it (GT_KILL_WINDOW, seconds): on a loaded
        # machine a fixed 120 ms window ended before the run reached the store, and no kill landed mid-run
        rng = random.Random(int(CRASH.split(":")[1]))
        delay = rng.uniform(0.0, float(os.environ.get("GT_KILL_WINDOW", "0.12")))
        threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    if len(sys.argv) > 5 and sys.argv[5] == "recover":
        results = tape.recover(graph)
        print(json.dumps([r.to_dict() for r in results]))
    else:
        t0 = time.perf_counter()
        recorded = tape.record(graph, name="crash_worker", lease_ttl=0.5, checkpointer=tape.saver)
        out = recorded.invoke({"order": "o-1", "log": []}, {"configurable": {"thread_id": thread}})
        print(json.dumps(out))
        # how long the run took once the store was open (what a caller sizes GT_KILL_WINDOW by)
        print(f"run seconds: {time.perf_counter() - t0:.4f}", file=sys.stderr)
    tape.close()
    os._exit(0)  # no lingering timer thread


if __name__ == "__main__":
    main()
