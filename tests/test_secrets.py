"""Secrets passed in a run's config are stored nowhere: not in a table, an export, or any output.

A run is recorded with secrets in ``configurable`` (keys that look like
secrets, and a key the user added with ``connect(redact=[...])``) and in the
config's ``metadata``; LangGraph copies such string values into every
checkpoint's metadata. Then every byte the backend holds, an export file,
the CLI's JSON output and the ``/metrics`` page are searched for them.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import graphtape
from graphtape.cli import app
from tests import graphs
from tests.store_raw import raw_dump

SECRETS = {
    "openai_api_key": "sk-SECRET-123",
    "db_password": "hunter2-XYZ",
    "customer_ref": "cust-SECRET-789",  # not secret-looking: redacted because the user asked
}
META_SECRET = "tok-SECRET-456"
ALL = [*SECRETS.values(), META_SECRET]
ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "GRAPHTAPE_URL": None}


def found_in(data: bytes | str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [s for s in ALL if s in text]


def record_with_secrets(store_url: str) -> tuple[str, str]:
    with graphtape.connect(store_url, redact=["customer_ref"]) as tape:
        agent = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
        config = {
            "configurable": {"thread_id": "secret-thread", **SECRETS},
            "metadata": {"auth_token": META_SECRET, "team": "blue"},
        }
        agent.invoke({}, config)
        run_id = agent.last_run_id
        assert tape.run(run_id).status == "finished"
        with graphs.forbid():  # replay still works, serving every call (the redacted values are not passed on)
            result = tape.replay(run_id, graphs.build_linear(), mode="strict")
        assert result.status == "finished" and result.output_matches, result.to_dict()
    return run_id, result.run_id


def test_secrets_in_the_config_are_in_no_table(store_url):
    _run_id, _replay_id = record_with_secrets(store_url)
    dump = raw_dump(store_url)
    assert b"secret-thread" in dump and b"blue" in dump  # the dump does see the config's other values
    assert found_in(dump) == []
    # checkpoint metadata keeps the keys, redacted, so a listing shows that something was there
    with graphtape.connect(store_url) as tape:
        metas = [r.metadata for r in tape.store.list_checkpoints(thread_id="secret-thread")]
    assert metas and all(m.get("openai_api_key") == "**redacted**" for m in metas)
    assert all(m.get("auth_token") == "**redacted**" and m.get("team") == "blue" for m in metas)


def test_secrets_are_in_no_export_or_output(store_url, tmp_path):
    run_id, replay_id = record_with_secrets(store_url)
    with graphtape.connect(store_url) as tape:
        tape.export_thread("secret-thread", tmp_path / "thread.jsonl")
        tape.export_run(replay_id, tmp_path / "replay.jsonl")
        checkpoint = tape.store.list_checkpoints(thread_id="secret-thread")[0].checkpoint_id
    for name in ("thread.jsonl", "replay.jsonl"):
        assert found_in((tmp_path / name).read_bytes()) == []

    runner = CliRunner()
    for args in (
        ["runs", "--json"],
        ["runs"],
        ["show", run_id, "--json"],
        ["show", run_id],
        ["history", run_id, "--json"],
        ["history", "secret-thread"],
        ["state", checkpoint, "--json"],
        ["show", replay_id, "--json"],
        ["stats", "--json"],
        ["stats", "--prometheus"],
    ):
        result = runner.invoke(app, ["--url", store_url, *args], env=ENV)
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
        assert found_in(result.stdout) == [], args


def test_secrets_are_not_in_metrics(store_url):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from graphtape.server import create_app
    from tests.test_server_metrics import Served

    record_with_secrets(store_url)
    with graphtape.connect(store_url) as tape, Served(create_app(tape, cache_seconds=0)) as served:
        status, _, body = served.get("/metrics")
        assert status == 200 and b"graphtape_runs" in body
        assert found_in(body) == []
        status, _, body = served.get("/healthz")
        assert status == 200 and found_in(body) == []


def test_a_foreign_saver_gets_what_langgraph_gives_it_and_the_tape_stays_clean(store_url):
    """With the user's own saver, graphtape's tape holds no secret; the saver's own storage is the user's."""
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    with graphtape.connect(store_url, redact=["customer_ref"]) as tape:
        agent = tape.record(graphs.build_linear().builder.compile(checkpointer=saver))
        agent.invoke(
            {}, {"configurable": {"thread_id": "own-saver", **SECRETS}, "metadata": {"auth_token": META_SECRET}}
        )
    assert found_in(raw_dump(store_url)) == []
    stored = saver.get_tuple({"configurable": {"thread_id": "own-saver"}})
    assert stored is not None
    # documented: LangGraph copies string config values into the metadata the user's saver stores
    assert json.dumps(stored.metadata, default=str).count(SECRETS["openai_api_key"]) == 1


async def test_an_ended_server_run_keeps_no_secret_in_the_run_queue(store_url):
    """The Studio server's run queue holds a run's whole config while the run may still execute;
    once it has ended, however (success, error, paused at an interrupt, cancelled before it began,
    interrupted by a newer run), no secret value of it is left in any table or key of the store."""
    import asyncio

    pytest.importorskip("fastapi")
    from graphtape.server.studio import create_app
    from tests.app_client import app_client
    from tests.studio_graphs import studio_graphs

    config = {"configurable": SECRETS}
    metadata = {"auth_token": META_SECRET, "team": "blue"}
    with graphtape.connect(store_url, redact=["customer_ref"]) as tape:
        app = create_app(tape, studio_graphs())
        async with app_client(app) as client:

            async def thread() -> str:
                return (await client.post("/threads", json={})).json()["thread_id"]

            async def wait(tid: str, assistant: str, run_input: dict, **more) -> dict:
                body = {"assistant_id": assistant, "input": run_input, "config": config, "metadata": metadata}
                r = await client.post(f"/threads/{tid}/runs/wait", json={**body, **more})
                assert r.status_code == 200, r.text
                return r.json()

            assert (await wait(await thread(), "slow", {"seconds": 0})) == {"seconds": 0, "done": True}
            assert "__error__" in await wait(await thread(), "agent", {"messages": []})
            assert "__interrupt__" in await wait(await thread(), "doc", {"topic": "x"})

            tid = await thread()
            body = {"assistant_id": "slow", "config": config, "metadata": metadata}
            long = (await client.post(f"/threads/{tid}/runs", json={**body, "input": {"seconds": 30}})).json()
            queued = {**body, "input": {"seconds": 0}, "multitask_strategy": "enqueue"}
            pending = (await client.post(f"/threads/{tid}/runs", json=queued)).json()
            raw = app.state.studio.queue.get(pending["run_id"])
            assert raw.status == "pending" and raw.kwargs["config"]["configurable"] == SECRETS  # what it runs with
            r = await client.post(f"/threads/{tid}/runs/{pending['run_id']}/cancel", params={"wait": True})
            assert r.status_code == 204
            for _ in range(500):
                if tape.runs(thread_id=tid):
                    break
                await asyncio.sleep(0.01)
            behind = (await client.post(f"/threads/{tid}/runs", json=queued)).json()
            await wait(tid, "slow", {"seconds": 0}, multitask_strategy="interrupt")  # ends `long` and `behind`
            statuses = {run["run_id"]: run["status"] for run in (await client.get(f"/threads/{tid}/runs")).json()}
            assert {statuses[r["run_id"]] for r in (long, pending, behind)} == {"interrupted"}
            rows = app.state.studio.queue.list_runs()
            assert len(rows) == 7 and all(row.done for row in rows)
            assert rows[0].kwargs["config"]["configurable"]["openai_api_key"] == "**redacted**"
    dump = raw_dump(store_url)
    assert b"blue" in dump  # the dump sees the run's other values
    assert found_in(dump) == []


def test_a_pending_run_ended_by_a_newer_runs_strategy_is_never_seen_with_its_secrets(store_url):
    """A newer run's ``interrupt``/``rollback`` strategy ends the thread's pending run and redacts
    its kwargs in the same transaction or script: a process that learns of the end (the queue's
    ``ended`` notice) and reads the run at once finds no secret in it."""
    import threading
    import time

    from graphtape.store.runqueue import QueuedRun, run_queue_for

    kwargs = {"config": {"configurable": SECRETS}}
    with graphtape.connect(store_url, redact=["customer_ref"]) as tape:
        speaker, reader = run_queue_for(tape), run_queue_for(tape)
        read: dict[str, str] = {}  # run id -> its kwargs and metadata as read when its end was announced
        everything = threading.Event()
        try:

            def on_notice(what: str, run_id: str) -> None:
                if what == "ended" and run_id.startswith("pending-"):
                    row = reader.get(run_id)
                    assert row is not None
                    read[run_id] = json.dumps([row.status, row.kwargs, row.metadata])
                    if len(read) == 20:
                        everything.set()

            stop = reader.listen(on_notice)
            if stop is None:
                pytest.skip("this backend sends no notices (its queue is polled): nothing can read in between")
            try:
                time.sleep(0.5)  # subscribed
                for n in range(20):
                    meta = {"auth_token": META_SECRET}
                    speaker.enqueue(QueuedRun(f"pending-{n}", f"t{n}", "a", "g", kwargs=kwargs, metadata=meta))
                    newer = QueuedRun(f"newer-{n}", f"t{n}", "a", "g", kwargs=kwargs)
                    ended = speaker.enqueue(newer, strategy="interrupt" if n % 2 else "rollback")
                    assert [r.run_id for r in ended.active] == [f"pending-{n}"]
                assert everything.wait(20), sorted(read)
            finally:
                stop()
        finally:
            speaker.close()
            reader.close()
    assert all(json.loads(text)[0] == "interrupted" for text in read.values())
    assert {run_id: found_in(text) for run_id, text in read.items() if found_in(text)} == {}
