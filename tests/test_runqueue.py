"""The run queue's contract (graphtape.store.runqueue), on every store backend.

Enqueue and claim in order, one running run per thread, the multitask
strategies decided in the store, lease expiry and reclaim (with fencing of
the worker that lost its lease), cancel, the event log (append and read
after a seq; a hypothesis round trip), and the thread and assistant registries.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphtape.errors import LeaseLost
from graphtape.store.runqueue import AssistantRow, QueuedRun, ThreadRow, run_queue_for


@pytest.fixture
def queue(tape):
    q = run_queue_for(tape)
    yield q
    q.close()


def new_run(thread_id: str, **kwargs) -> QueuedRun:
    return QueuedRun(
        run_id=str(uuid.uuid4()),
        thread_id=thread_id,
        assistant_id="a",
        graph_id="g",
        kwargs=kwargs or {"input": {"x": 1}, "stream_mode": []},
        metadata={"who": "test"},
    )


def test_enqueue_and_claim_in_order_one_run_per_thread(queue):
    a1, a2, b1 = new_run("A"), new_run("A"), new_run("B")
    for run in (a1, a2, b1):
        assert queue.enqueue(run, strategy="enqueue").run is run
    stored = queue.get(a1.run_id)
    assert stored is not None and stored.status == "pending" and stored.kwargs == {"input": {"x": 1}, "stream_mode": []}
    assert stored.metadata == {"who": "test"} and stored.attempt == 0 and stored.created_at > 0

    first = queue.claim("w1", 30)
    assert first is not None and first.run_id == a1.run_id
    assert first.status == "running" and first.worker == "w1" and first.attempt == 1
    assert first.lease_expires is not None and first.lease_expires > time.time()
    second = queue.claim("w2", 30)  # A is busy: B's run, not A's second
    assert second is not None and second.run_id == b1.run_id
    assert queue.claim("w3", 30) is None

    assert queue.finish(a1.run_id, "w1", "success", {"done": True})
    assert not queue.finish(a1.run_id, "w1", "success", {})  # only once
    ended = queue.get(a1.run_id)
    assert ended is not None and ended.status == "success" and ended.result == {"done": True} and ended.done
    third = queue.claim("w3", 30)
    assert third is not None and third.run_id == a2.run_id

    listed = queue.list_runs(thread_id="A")
    assert [r.run_id for r in listed] == [a2.run_id, a1.run_id]  # newest first
    assert [r.run_id for r in queue.list_runs(statuses=["running"])] == [b1.run_id, a2.run_id]
    assert [r.run_id for r in queue.list_runs(limit=1, offset=1)] == [a2.run_id]
    assert queue.delete_run(a1.run_id) and queue.get(a1.run_id) is None and not queue.delete_run(a1.run_id)


def test_multitask_strategies_are_decided_in_the_store(queue):
    running, pending = new_run("T"), new_run("T")
    queue.enqueue(running)
    queue.enqueue(pending)
    assert queue.claim("w", 30).run_id == running.run_id

    refused = queue.enqueue(new_run("T"), strategy="reject")
    assert refused.run is None and [r.run_id for r in refused.active] == [running.run_id, pending.run_id]
    assert len(queue.list_runs(thread_id="T")) == 2

    cancelled = {"__error__": {"error": "Cancelled"}}
    newest = new_run("T")
    out = queue.enqueue(newest, strategy="interrupt", cancel_result=cancelled)
    assert out.run is newest
    after = {r.run_id: r for r in queue.list_runs(thread_id="T")}
    assert after[pending.run_id].status == "interrupted" and after[pending.run_id].result == cancelled
    assert after[running.run_id].status == "running" and after[running.run_id].cancel_requested
    assert queue.heartbeat(running.run_id, "w", 30) is True  # the worker learns it must stop
    assert queue.claim("w2", 30) is None  # the new run waits for the cancelled one to end
    queue.finish(running.run_id, "w", "interrupted", cancelled)
    assert queue.claim("w2", 30).run_id == newest.run_id


def test_an_expired_lease_is_claimed_again_and_fences_the_old_worker(queue):
    run = new_run("L")
    queue.enqueue(run)
    assert queue.claim("dead", 0.2).run_id == run.run_id
    assert queue.append(run.run_id, "dead", "metadata", '{"n":1}') == 1
    assert queue.claim("alive", 30) is None  # the lease still holds
    time.sleep(0.3)
    again = queue.claim("alive", 30)
    assert again is not None and again.run_id == run.run_id and again.attempt == 2 and again.worker == "alive"
    assert again.events == 1
    assert queue.heartbeat(run.run_id, "dead", 30) is None
    with pytest.raises(LeaseLost):
        queue.append(run.run_id, "dead", "values", "{}")
    assert not queue.finish(run.run_id, "dead", "success", {})
    assert queue.heartbeat(run.run_id, "alive", 30) is False
    assert queue.append(run.run_id, "alive", "values", '{"n":2}') == 2
    assert [(e.seq, e.event, e.data) for e in queue.events(run.run_id)] == [
        (1, "metadata", '{"n":1}'),
        (2, "values", '{"n":2}'),
    ]


def test_a_released_run_is_claimed_again_at_once(queue):
    run = new_run("R")
    queue.enqueue(run)
    queue.claim("leaving", 30)
    assert not queue.release(run.run_id, "someone else")
    assert queue.release(run.run_id, "leaving")
    again = queue.claim("staying", 30)
    assert again is not None and again.run_id == run.run_id and again.attempt == 2 and again.status == "running"
    assert not queue.release(run.run_id, "leaving")


def test_cancel_a_pending_run_ends_it_and_a_running_one_is_flagged(queue):
    first, second = new_run("C"), new_run("C")
    queue.enqueue(first)
    queue.enqueue(second)
    queue.claim("w", 30)
    out = {r.run_id: r for r in queue.request_cancel([first.run_id, second.run_id, "nope"], {"why": "cancel"})}
    assert set(out) == {first.run_id, second.run_id}
    assert out[second.run_id].status == "interrupted" and out[second.run_id].result == {"why": "cancel"}
    assert out[first.run_id].status == "running" and out[first.run_id].cancel_requested
    assert queue.list_runs(statuses=["pending"]) == []


def test_events_are_read_after_a_seq(queue):
    run = new_run("E")
    queue.enqueue(run)
    queue.claim("w", 30)
    for i in range(5):
        assert queue.append(run.run_id, "w", f"e{i}", str(i)) == i + 1
    assert [e.seq for e in queue.events(run.run_id, after=3)] == [4, 5]
    assert [e.data for e in queue.events(run.run_id, after=1, limit=2)] == ["1", "2"]
    assert queue.events(run.run_id, after=5) == []
    assert queue.get(run.run_id).events == 5


#: event names as publishers make them (``updates|child:<task id>``...): no newline, no NUL
EVENT_NAMES = st.text(st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=20)
#: event data: the JSON text of any JSON value (NUL and newlines inside strings are escaped by JSON)
JSON_TEXT = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
).map(lambda v: json.dumps(v, ensure_ascii=False))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(EVENT_NAMES, JSON_TEXT), max_size=12))
def test_event_log_round_trip(queue, events):
    run = new_run("H-" + uuid.uuid4().hex)
    queue.enqueue(run)
    assert queue.claim("w", 30).run_id == run.run_id
    seqs = [queue.append(run.run_id, "w", name, data) for name, data in events]
    assert seqs == list(range(1, len(events) + 1))
    back = queue.events(run.run_id)
    assert [(e.event, e.data) for e in back] == events
    for after in range(len(events) + 1):
        assert [(e.event, e.data) for e in queue.events(run.run_id, after=after)] == events[after:]
    queue.finish(run.run_id, "w", "success", None)


def test_threads_and_assistants_registry(queue):
    row, created = queue.create_thread(ThreadRow("t1", "g", {"team": "a"}))
    assert created and row.created_at > 0
    again, created = queue.create_thread(ThreadRow("t1", "other"))
    assert not created and again.graph_id == "g" and again.metadata == {"team": "a"}
    updated = queue.update_thread("t1", status="busy", metadata={"team": "b"})
    assert updated is not None and updated.status == "busy" and updated.updated_at >= row.updated_at
    assert queue.get_thread("t1").metadata == {"team": "b"}
    assert queue.update_thread("missing", status="idle") is None
    queue.update_thread("t1", deleted=True)
    assert queue.get_thread("t1").deleted
    fresh, created = queue.create_thread(ThreadRow("t1", None, {"new": 1}))
    assert created and not fresh.deleted and queue.get_thread("t1").metadata == {"new": 1}
    queue.put_thread(ThreadRow("t2", None, {}, "idle", created_at=time.time() + 1))
    assert [t.thread_id for t in queue.list_threads()] == ["t2", "t1"]

    made = AssistantRow("as1", "g", name="n", config={"tags": ["x"]}, context={"c": 1}, metadata={"m": []})
    queue.put_assistant(made)
    got = queue.get_assistant("as1")
    assert got is not None and got.config == {"tags": ["x"]} and got.metadata == {"m": []} and got.version == 1
    queue.put_assistant(AssistantRow("as1", "g", name="renamed", version=2, created_at=got.created_at))
    assert queue.get_assistant("as1").name == "renamed"
    assert [a.assistant_id for a in queue.list_assistants()] == ["as1"]
    assert queue.delete_assistant("as1") and queue.get_assistant("as1") is None and not queue.delete_assistant("as1")


def test_concurrent_claimers_never_take_one_run_twice(tape, backend):
    if backend == "sqlite":
        pytest.skip("SQLite serves one process; its claims are serialised by the file lock")
    queues = [run_queue_for(tape) for _ in range(3)]
    runs = [new_run(f"thread-{i % 5}") for i in range(30)]
    for run in runs:
        queues[0].enqueue(run)
    claimed: list[tuple[str, str]] = []
    lock = threading.Lock()

    def work(q, name):
        while True:
            run = q.claim(name, 30)
            if run is None:
                if not q.list_runs(statuses=["pending"]):
                    return
                time.sleep(0.005)
                continue
            with lock:
                claimed.append((run.run_id, run.thread_id))
                busy = [t for r, t in claimed if t == run.thread_id and queues[0].get(r).status == "running"]
                assert busy == [run.thread_id], "two runs of one thread running at once"
            q.finish(run.run_id, name, "success", None)

    workers = [threading.Thread(target=work, args=(q, f"w{i}")) for i, q in enumerate(queues)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    for q in queues:
        q.close()
    assert sorted(r for r, _ in claimed) == sorted(r.run_id for r in runs)
    for t in {r.thread_id for r in runs}:  # each thread's runs in queue order
        order = [r for r, tid in claimed if tid == t]
        assert order == [r.run_id for r in runs if r.thread_id == t]


def test_listeners_hear_what_other_processes_do(tape):
    speaker, listener = run_queue_for(tape), run_queue_for(tape)
    heard: list[tuple[str, str]] = []
    stop = listener.listen(lambda what, run_id: heard.append((what, run_id)))
    try:
        if stop is None:
            pytest.skip("this backend has no notices: its users poll")
        time.sleep(0.3)  # subscribed
        first, second = new_run("N"), new_run("N")
        speaker.enqueue(first)
        speaker.enqueue(second)
        speaker.claim("w", 30)
        speaker.append(first.run_id, "w", "values", "{}")
        speaker.request_cancel([first.run_id, second.run_id])
        speaker.finish(first.run_id, "w", "interrupted", None)
        expected = [
            ("queued", first.run_id),
            ("queued", second.run_id),
            ("event", first.run_id),
            ("cancel", first.run_id),
            ("ended", second.run_id),
            ("ended", first.run_id),
        ]
        deadline = time.monotonic() + 10
        while len(heard) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert heard == expected
    finally:
        if stop is not None:
            stop()
        speaker.close()
        listener.close()
