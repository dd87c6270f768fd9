"""The Studio web UI in a real browser (Debian's Chromium driven by Playwright) against a real server.

A module-wide ``graphtape dev`` serves the examples from a temporary SQLite
store where they were recorded (as ``make demo`` records them); each test
drives the UI the way a user would and checks what the page shows against
what the API says. Screenshots of the main views go to a temporary folder
(``GRAPHTAPE_UI_SHOTS`` names a folder to keep them).

Skipped when Chromium or Playwright is missing (CI installs both).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_web_ui_graphs import busy_graph

CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(f"the browser tests need Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need playwright (pip install it)")
pytest.importorskip("uvicorn")
# the machine running these is often shared: give the page time before an expectation fails
sync_api.expect.set_options(timeout=10_000)

ROOT = Path(__file__).resolve().parent.parent
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return json.loads(r.read())


class Server:
    """``graphtape dev`` on the examples, in a subprocess; restartable on the same port."""

    def __init__(self, store: str, port: int, log: Path):
        self.store, self.port, self.log = store, port, log
        self.base = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start and wait for ``/ok``; a store still leased to a killed server is waited for (its lease ends)."""
        deadline = time.monotonic() + 45
        while True:
            if self._start_once(deadline):
                return
            if time.monotonic() > deadline or "is served by" not in self.log.read_text()[-600:]:
                raise RuntimeError(f"graphtape dev exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.5)

    def _start_once(self, deadline: float) -> bool:
        path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
        env.pop("GRAPHTAPE_URL", None)
        code = "import sys; from graphtape.cli.app import main; sys.exit(main())"
        cmd = [sys.executable, "-c", code, "dev", "--url", self.store, "--port", str(self.port)]
        cmd += ["--no-browser", "--no-reload", "--graph", "slow=tests.test_web_ui_graphs:slow"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT / "examples", env=env, stdout=out, stderr=subprocess.STDOUT)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if _get(self.base, "/ok") == {"ok": True}:
                    return True
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"graphtape dev did not start: {self.log.read_text()[-2000:]}")

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server: gracefully (it lets open streams finish), or killed like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A SQLite store with the examples recorded: (url, example name -> run id)."""
    folder = tmp_path_factory.mktemp("webui")
    url = f"sqlite:///{folder / 'tape.db'}"
    code = (
        "import json, sys, graphtape\n"
        "from examples.demo import record_examples\n"
        f"t = graphtape.connect({url!r})\n"
        "runs = record_examples(t)\n"
        "t.close()\n"
        "sys.stdout.write('RUNS=' + json.dumps(runs))\n"
    )
    path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=True
    ).stdout
    return url, json.loads(out.rsplit("RUNS=", 1)[1])


@pytest.fixture(scope="module")
def server(recorded, tmp_path_factory) -> Iterator[Server]:
    srv = Server(recorded[0], _free_port(), tmp_path_factory.mktemp("log") / "server.log")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    keep = os.environ.get("GRAPHTAPE_UI_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return Path(keep)
    return tmp_path_factory.mktemp("shots")


@pytest.fixture
def page(browser, server) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(15_000)
    yield pg
    context.close()
    assert not errors, f"errors in the page: {errors}"


def expect(locator: Any) -> Any:
    return sync_api.expect(locator)


def _open_run(page: Any, server: Server, run_id: str, query: str = "") -> None:
    page.goto(f"{server.base}/ui/runs/{run_id}{query}")
    expect(page.get_by_role("region", name="Run")).to_be_visible()


def _wait_run_ended(server: Server, run_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            run = _get(server.base, f"/graphtape/runs/{run_id}")["run"]
        except urllib.error.HTTPError as exc:  # a background run is on the tape a moment after its 202
            if exc.code != 404:
                raise
        else:
            if run["status"] != "running":
                return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} still running after {timeout} s")


def _new_run_id(page: Any, old: str) -> str:
    page.wait_for_url(lambda url: "/ui/runs/" in url and old not in url)
    return page.url.split("/ui/runs/", 1)[1].split("?", 1)[0]


def test_the_runs_list_shows_the_recorded_runs_and_filters_by_graph(page, server, recorded, shots):
    _, runs = recorded
    page.goto(server.base + "/")
    page.wait_for_url("**/ui")
    rows = page.get_by_role("list", name="Run list")
    for run_id in runs.values():
        expect(rows.locator(f'[data-run-id="{run_id}"]')).to_be_visible()
    page.screenshot(path=str(shots / "runs.png"))
    page.get_by_role("button", name="refund_agent", exact=True).click()
    page.wait_for_url("**graph=refund_agent")
    expect(rows.locator(f'[data-run-id="{runs["doc_pipeline"]}"]')).to_have_count(0)
    expect(rows.locator(f'[data-run-id="{runs["refund_agent"]}"]')).to_be_visible()
    # by status: the research assistant's first run paused at its interrupt
    page.get_by_role("button", name="All graphs").click()
    page.get_by_label("Filter by status").select_option("interrupted")
    page.wait_for_url("**status=interrupted")
    listed = rows.locator("[data-run-id]")
    expect(listed.first).to_be_visible()
    api = _get(server.base, "/graphtape/runs?status=interrupted")
    expect(listed).to_have_count(api["total"])
    expect(rows.locator(f'[data-run-id="{runs["refund_agent"]}"]')).to_have_count(0)
    # by time: everything here started within the hour; by text
    page.get_by_label("Filter by status").select_option("")
    page.get_by_label("Filter by time").select_option("1h")
    expect(rows.locator(f'[data-run-id="{runs["refund_agent"]}"]')).to_be_visible()
    page.get_by_label("Search runs").fill(runs["doc_pipeline"][:8])
    page.get_by_label("Search runs").press("Enter")
    expect(listed).to_have_count(1)
    expect(rows.locator(f'[data-run-id="{runs["doc_pipeline"]}"]')).to_be_visible()


def test_open_a_run_and_inspect_a_checkpoint(page, server, recorded, shots):
    _, runs = recorded
    run_id = runs["refund_agent"]
    page.goto(server.base + "/ui")
    page.locator(f'[data-run-id="{run_id}"]').click()
    page.wait_for_url(f"**/ui/runs/{run_id}")
    timeline = page.get_by_role("tree", name="Timeline")
    calls = _get(server.base, f"/graphtape/runs/{run_id}/calls")["calls"]
    first = calls[0]
    row = timeline.locator(f'[data-call-id="{first["call_id"]}"]')
    expect(row.locator(".kind")).to_have_text(first["kind"])
    expect(row).to_contain_text(first["name"])
    expect(row).to_contain_text(first["source"])
    page.screenshot(path=str(shots / "timeline.png"))
    # the call detail, deep-linked in the URL
    row.click()
    page.wait_for_url(f"**call={first['call_id']}")
    detail = page.get_by_role("complementary", name="Call detail")
    expect(detail.get_by_role("heading", name="Messages")).to_be_visible()
    expect(detail.locator(".role-human")).to_contain_text("order A-1001")
    page.screenshot(path=str(shots / "call.png"))
    # the state at a checkpoint
    page.get_by_role("tab", name="State").click()
    history = _get(server.base, f"/graphtape/history/{run_id}")["entries"]
    target = history[3]
    page.get_by_role("button", name=f"Checkpoint step {target['step']} {target['checkpoint_id'][:8]}").click()
    page.wait_for_url(f"**checkpoint={target['checkpoint_id']}")
    inspector = page.get_by_role("region", name="State inspector")
    state = _get(server.base, f"/graphtape/threads/{target['thread_id']}/checkpoints/{target['checkpoint_id']}")
    first_key = next(iter(state["values"]))
    expect(inspector.get_by_role("list", name="state tree")).to_contain_text(first_key)
    inspector.get_by_role("button", name="Raw JSON").click()
    expect(inspector.locator(".cm-content")).to_contain_text(f'"{first_key}"')
    page.screenshot(path=str(shots / "state.png"))
    # a reload keeps the checkpoint (deep link)
    page.reload()
    expect(page.get_by_role("region", name="State inspector")).to_contain_text(target["checkpoint_id"][:12])


def test_diff_two_checkpoints(page, server, recorded, shots):
    _, runs = recorded
    run_id = runs["refund_agent"]
    history = _get(server.base, f"/graphtape/history/{run_id}")["entries"]
    a, b = history[2], history[-1]
    _open_run(page, server, run_id, f"?tab=state&checkpoint={b['checkpoint_id']}")
    radio = page.get_by_role("radio", name=f"Compare with step {a['step']} {a['checkpoint_id'][:8]}")
    radio.click()
    expect(radio).to_be_checked()
    page.wait_for_url(f"**compare={a['checkpoint_id']}")
    diff = page.get_by_role("region", name="Checkpoint diff")
    query = f"a={a['checkpoint_id']}&b={b['checkpoint_id']}&thread_id={a['thread_id']}"
    expected = _get(server.base, f"/graphtape/diff?{query}")
    assert expected["changes"], "the two checkpoints should differ"
    for change in expected["changes"][:3]:
        expect(diff).to_contain_text(change["path"])
    page.screenshot(path=str(shots / "diff.png"))
    diff.get_by_role("button", name="Side by side").click()
    expect(diff.locator(".jsondiffpatch-delta").first).to_be_visible()


def test_replay_flight_shows_the_savings(page, server, recorded):
    _, runs = recorded
    run_id = runs["doc_pipeline"]
    _open_run(page, server, run_id)
    page.get_by_role("button", name="Replay flight").click()
    new_id = _new_run_id(page, run_id)
    run = _wait_run_ended(server, new_id)
    assert run["replay_of"] == run_id and run["status"] == "finished"
    savings = page.get_by_label("Savings")
    expect(savings).to_contain_text(f"{run['served_calls']} calls served from the tape")
    assert run["served_calls"] > 0
    # a replay's header says how many calls were served and how many made live (a recording's does not)
    facts = page.get_by_role("region", name="Run").locator(".facts")
    expect(facts).to_contain_text(f"({run['served_calls']} served, {run['live_calls']} live)")
    expect(page.get_by_role("tree", name="Timeline").locator(".src-tape").first).to_be_visible()
    # the replay is a branch under its parent in the runs list
    page.goto(server.base + "/ui")
    parent_row = page.locator(f'[data-run-id="{run_id}"]')
    child_row = page.locator(f'[data-run-id="{new_id}"]')
    expect(child_row).to_contain_text("└")
    assert child_row.bounding_box()["y"] > parent_row.bounding_box()["y"]


def _set_editor(page: Any, editor: Any, text: str) -> None:
    editor.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    editor.locator(".cm-content").fill(text)


def test_fork_with_an_edit_starts_a_new_branch(page, server, recorded):
    _, runs = recorded
    run_id = runs["refund_agent"]
    history = _get(server.base, f"/graphtape/history/{run_id}")["entries"]
    cp = next(e for e in history if "classify" in e["writers"])
    state = _get(server.base, f"/graphtape/threads/{cp['thread_id']}/checkpoints/{cp['checkpoint_id']}")
    assert state["values"]["decision"] == "refund"
    _open_run(page, server, run_id, f"?tab=state&checkpoint={cp['checkpoint_id']}")
    page.get_by_role("button", name="Fork from here").click()
    editor = page.get_by_label("Fork state editor")
    expect(editor.locator(".cm-content")).to_contain_text('"decision": "refund"')
    # values that do not fit the state schema: the server's message names the channel, no run starts
    _set_editor(page, editor, '{"attempts": "many"}')
    page.get_by_role("button", name="Start fork").click()
    expect(page.get_by_label("Fork editor").get_by_role("alert")).to_contain_text("attempts")
    assert page.url.split("/ui/runs/", 1)[1].startswith(run_id)
    _set_editor(page, editor, '{"decision": "other"}')
    page.get_by_role("button", name="Start fork").click()
    new_id = _new_run_id(page, run_id)
    run = _wait_run_ended(server, new_id)
    assert run["status"] == "finished", run
    expect(page.get_by_role("region", name="Run")).to_contain_text("fork")
    final = _get(server.base, f"/threads/{run['thread_id']}/state")["values"]
    assert final["decision"] == "other"
    # the fork is a branch of the run it came from
    detail = _get(server.base, f"/graphtape/runs/{run_id}")
    assert new_id in [c["run_id"] for c in detail["children"]]
    _open_run(page, server, run_id)
    expect(page.get_by_role("region", name="Run").locator(f'a[href="/ui/runs/{new_id}"]')).to_contain_text("fork")


def test_answer_an_interrupt_from_a_new_run(page, server):
    page.goto(server.base + "/ui/new?graph=research_assistant")
    page.get_by_label("Topic").fill("Do tides affect coastal wind?")
    page.get_by_role("button", name="Start run").click()
    run_id = _new_run_id(page, "/new")
    run = _wait_run_ended(server, run_id)
    assert run["status"] in ("interrupted", "paused"), run
    form = page.get_by_role("region", name="Pending interrupt")
    expect(form).to_contain_text("approve?")
    # feedback in words: the assistant drafts again and asks again
    form.get_by_label("Answer as text").fill("Add one number, please.")
    form.get_by_role("button", name="Send text").click()
    revised = _new_run_id(page, run_id)
    assert _wait_run_ended(server, revised)["status"] in ("interrupted", "paused")
    state = _get(server.base, f"/threads/{run['thread_id']}/state")["values"]
    assert state["feedback"] == "Add one number, please." and state["revisions"] == 1
    form = page.get_by_role("region", name="Pending interrupt")
    expect(form).to_contain_text("approve?")
    form.get_by_role("button", name="Approve").click()
    resumed = _new_run_id(page, revised)
    run2 = _wait_run_ended(server, resumed)
    assert run2["status"] == "finished", run2
    assert run2["thread_id"] == run["thread_id"]
    expect(page.get_by_role("region", name="Run").locator(".status-finished").first).to_be_visible()
    final = _get(server.base, f"/threads/{run['thread_id']}/state")
    assert final["interrupts"] == []
    # the report streamed token by token: the Messages tab grew it into the final text
    page.get_by_role("tab", name="Messages").click()
    chat = page.get_by_label("Streamed messages")
    report = chat.locator(".bubble").filter(has_text="report")
    expect(report.locator(".text")).to_have_text(final["values"]["report"])


def test_watch_a_live_run_stream(page, server):
    page.goto(server.base + "/ui/new?graph=doc_pipeline")
    page.get_by_label("Raw JSON").check()
    from examples import doc_pipeline

    _set_editor(page, page.get_by_label("Run input JSON"), json.dumps(doc_pipeline.EXAMPLE_INPUT))
    page.get_by_role("button", name="Start run").click()
    run_id = _new_run_id(page, "/new")
    page.get_by_role("tab", name="Events").click()
    run = _wait_run_ended(server, run_id)
    assert run["status"] == "finished", run
    total = len(_get(server.base, f"/graphtape/runs/{run_id}/events?limit=10000")["events"])
    expect(page.get_by_test_id("event-count")).to_have_text(str(total))
    expect(page.get_by_role("region", name="Run").locator(".status-finished").first).to_be_visible()


def test_override_a_call_in_flight_mode_shows_which_calls_went_live(page, server, recorded, shots):
    _, runs = recorded
    run_id = runs["refund_agent"]
    calls = _get(server.base, f"/graphtape/runs/{run_id}/calls")["calls"]
    first = calls[0]  # classify: its answer decides the route
    _open_run(page, server, run_id, f"?call={first['call_id']}")
    detail = page.get_by_role("complementary", name="Call detail")
    detail.get_by_role("button", name="Override output and re-run").click()
    editor = detail.get_by_label("Override output editor")
    expect(editor.locator(".cm-content")).to_contain_text('"refund"')
    _set_editor(page, editor, '"other"')
    detail.get_by_role("button", name="Re-run with this output").click()
    new_id = _new_run_id(page, run_id)
    run = _wait_run_ended(server, new_id)
    assert run["status"] == "finished", run
    sources = {c["call_id"]: c["source"] for c in _get(server.base, f"/graphtape/runs/{new_id}/calls")["calls"]}
    assert "override" in sources.values() and "live" in sources.values(), sources
    timeline = page.get_by_role("tree", name="Timeline")
    for call_id, source in sources.items():
        expect(timeline.locator(f'[data-call-id="{call_id}"]')).to_contain_text(source)
    expect(page.get_by_role("region", name="Run")).to_contain_text("override")
    page.screenshot(path=str(shots / "override.png"))


def test_debugger_breaks_on_a_call_uses_an_edited_answer_and_steps(page, server, recorded, shots):
    _, runs = recorded
    run_id = runs["refund_agent"]
    _open_run(page, server, run_id, "?tab=debugger")
    page.get_by_label("Break on calls").check()
    page.get_by_label("Call breakpoint kind").select_option("llm")
    page.get_by_label("Call breakpoint node").fill("agent")
    # strict by default, as the API's replay: the edited answer below changes later requests, so go flight
    expect(page.get_by_label("Debug replay mode")).to_have_value("strict")
    page.get_by_label("Debug replay mode").select_option("flight")
    # a breakpoint before a node, set on the diagram
    page.locator('.react-flow__node[data-id="finalize"]').click()
    expect(page.locator('.react-flow__node[data-id="finalize"] .gnode')).to_have_class(re.compile("has-bp"))
    page.get_by_role("button", name="Start debugging").click()
    session = page.get_by_role("region", name="Debug session")
    expect(session.get_by_role("status")).to_contain_text("agent")
    expect(page.locator('.react-flow__node[data-id="agent"] .gnode')).to_have_class(re.compile("running"))
    page.screenshot(path=str(shots / "debugger.png"))
    _set_editor(page, page.get_by_label("Paused call answer editor"), '"No refund: the order is not eligible."')
    session.get_by_role("button", name="Use this answer").click()
    # the edited answer ends the agent's loop: the next pause is before finalize
    expect(session.get_by_role("status")).to_contain_text("finalize")
    page.locator("body").press("n")  # step
    expect(session.get_by_role("status")).not_to_contain_text("before finalize")
    expect(session.get_by_role("button", name="continue")).to_be_enabled()
    page.locator("body").press("c")  # continue to the end
    expect(session).to_contain_text("finished")
    replay_id = session.get_by_role("button", name="open the replay run")
    replay_id.click()
    new_id = _new_run_id(page, run_id)
    sources = [(c["node_path"], c["source"]) for c in _get(server.base, f"/graphtape/runs/{new_id}/calls")["calls"]]
    assert ("agent", "override") in sources, sources
    final = _get(server.base, f"/graphtape/runs/{new_id}")["output"]
    assert "not eligible" in json.dumps(final)


def test_a_run_of_10000_events_opens_and_scrolls_within_budget(page, server, recorded, shots):
    import graphtape

    tape = graphtape.connect(recorded[0])
    try:
        rec = tape.record(busy_graph(4, 2500, 0), name="busy")
        rec.invoke({"n": 0})
        run_id = rec.last_run_id
        total = len(tape.store.events(run_id))
    finally:
        tape.close()
    assert total >= 10_000
    started = time.monotonic()
    page.goto(f"{server.base}/ui/runs/{run_id}")
    page.locator("[data-call-id]").first.wait_for()
    interactive = time.monotonic() - started
    # virtualised: a screenful of rows in the page, not 10,000
    assert page.locator(".wf-row").count() < 100
    scroller = page.locator(".timeline-scroll")
    began = time.monotonic()
    for y in range(0, 300_000, 30_000):
        scroller.evaluate(f"el => {{ el.scrollTop = {y}; }}")
        page.wait_for_timeout(16)
    expect(page.locator("[data-call-id]").first).to_be_visible()
    scrolled = time.monotonic() - began
    page.get_by_role("tab", name="Events").click()
    expect(page.get_by_test_id("event-count")).to_have_text(str(total), timeout=30_000)
    print(f"10,000-event run: rows shown after {interactive:.2f} s, 10 scroll jumps in {scrolled:.2f} s")
    # the target is 1 s on an idle machine (the server's /timeline of 10,000 calls takes ~0.4 s of it);
    # the bound leaves room for a machine shared with other jobs
    assert interactive < 4.0, f"the run opened in {interactive:.2f} s"
    assert scrolled < 3.0, f"scrolling took {scrolled:.2f} s"


def test_a_live_run_followed_across_a_server_restart(page, tmp_path):
    import threading

    import graphtape

    # its own store: the run records in this process while the server restarts
    url = f"sqlite:///{tmp_path / 'live.db'}"
    tape = graphtape.connect(url)
    srv = Server(url, _free_port(), tmp_path / "server.log")
    srv.start()
    box: dict[str, Any] = {}

    def record() -> None:
        rec = tape.record(busy_graph(8, 1, 0.6), name="slow")
        rec.invoke({"n": 0})
        box["run_id"] = rec.last_run_id

    worker = threading.Thread(target=record)
    worker.start()
    try:
        deadline = time.monotonic() + 20
        run_id = None
        while run_id is None and time.monotonic() < deadline:
            found = _get(srv.base, "/graphtape/runs?graph=slow&status=running")["runs"]
            run_id = found[0]["run_id"] if found else None
            time.sleep(0.1)
        assert run_id, "the slow run did not start"
        page.goto(f"{srv.base}/ui/runs/{run_id}?tab=events")
        expect(page.get_by_role("status").filter(has_text="live")).to_be_visible()
        seen_before = int(page.get_by_test_id("event-count").inner_text())
        srv.stop(kill=True)
        expect(page.get_by_role("status").filter(has_text="reconnecting")).to_be_visible()
        time.sleep(1.5)  # the run goes on writing events while no server answers
        srv.start()
        worker.join(30)
        assert box.get("run_id") == run_id
        total = len(_get(srv.base, f"/graphtape/runs/{run_id}/events?limit=10000")["events"])
        expect(page.get_by_test_id("event-count")).to_have_text(str(total), timeout=20_000)
        assert total > seen_before
        expect(page.get_by_role("region", name="Run").locator(".status-finished").first).to_be_visible()
        seqs = page.locator(".ev-row .mono").all_inner_texts()
        assert len(seqs) == len(set(seqs)), "an event was shown twice"
    finally:
        worker.join(30)
        tape.close()
        srv.stop()


def test_label_a_run_and_rerun_from_a_node(page, server, recorded):
    _, runs = recorded
    run_id = runs["doc_pipeline"]
    _open_run(page, server, run_id)
    page.get_by_label("Run label").fill("baseline")
    page.get_by_role("button", name="Save label").click()
    expect(page.get_by_label("Run label")).to_have_value("baseline")
    # the field shows what was typed at once; the label is on the tape once the request has been answered
    deadline = time.monotonic() + 20
    while _get(server.base, f"/graphtape/runs/{run_id}")["run"]["label"] != "baseline":
        assert time.monotonic() < deadline, "the label never reached the tape"
        time.sleep(0.05)
    page.goto(f"{server.base}/ui?q=baseline")
    expect(page.locator(f'[data-run-id="{run_id}"]')).to_contain_text("baseline")
    # invalidate: the node's calls and everything after it run again
    shape = _get(server.base, "/assistants/doc_pipeline/graph")
    last = next(e["source"] for e in shape["edges"] if e["target"] == "__end__")
    _open_run(page, server, run_id)
    page.get_by_label("Node to re-run from").select_option(last)
    page.get_by_label("allow live effects").check()  # the last node sends mail: an effect
    page.get_by_role("button", name="Re-run from node").click()
    new_id = _new_run_id(page, run_id)
    run = _wait_run_ended(server, new_id)
    assert run["status"] == "finished", run
    assert run["meta"].get("invalidate_from") == last
    expect(page.get_by_role("region", name="Run")).to_contain_text("invalidate")


def test_export_a_run_and_import_it_into_another_store(page, server, recorded, tmp_path):
    _, runs = recorded
    run_id = runs["refund_agent"]
    with urllib.request.urlopen(f"{server.base}/graphtape/runs/{run_id}/export", timeout=10) as r:
        tape_file = r.read()
    other = Server(f"sqlite:///{tmp_path / 'other.db'}", _free_port(), tmp_path / "other.log")
    other.start()
    try:
        page.goto(f"{other.base}/ui")
        chooser = page.get_by_label("Import a tape file")
        chooser.set_input_files({"name": "broken.tape", "mimeType": "application/octet-stream", "buffer": b"junk"})
        expect(page.get_by_role("alert")).to_be_visible()
        assert _get(other.base, "/graphtape/runs")["total"] == 0
        chooser.set_input_files({"name": "refund.tape", "mimeType": "application/octet-stream", "buffer": tape_file})
        expect(page.get_by_role("status")).to_contain_text("imported")
        expect(page.locator(f'[data-run-id="{run_id}"]')).to_be_visible()
    finally:
        other.stop()


def test_the_graph_diagram_and_the_dark_theme(page, server, recorded, shots):
    _, runs = recorded
    run_id = runs["refund_agent"]
    shape = _get(server.base, "/assistants/refund_agent/graph?xray=true")
    _open_run(page, server, run_id, "?tab=graph")
    nodes = page.locator(".react-flow__node")
    expect(nodes).to_have_count(len(shape["nodes"]), timeout=15_000)
    conditional = [e for e in shape["edges"] if e.get("conditional")]
    assert conditional, "the refund agent routes with conditional edges"
    expect(page.locator(".react-flow__edge.edge-conditional")).to_have_count(len(conditional))
    expect(page.locator(".react-flow__edge.edge-plain")).to_have_count(len(shape["edges"]) - len(conditional))
    page.get_by_role("button", name="Switch to dark theme").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.get_by_role("button", name="Expand subgraphs").click()
    expect(page.get_by_text("this graph has no subgraphs")).to_be_visible()
    page.screenshot(path=str(shots / "graph-dark.png"))
    page.reload()  # the choice is kept
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.get_by_role("button", name="Switch to light theme").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "light")


def test_cancel_a_running_run(page, server):
    page.goto(server.base + "/ui/new?graph=slow")
    page.get_by_label("N", exact=True).fill("0")
    page.get_by_role("button", name="Start run").click()
    run_id = _new_run_id(page, "/new")
    header = page.get_by_role("region", name="Run")
    expect(header.locator(".status-running").first).to_be_visible()
    expect(page.get_by_role("status").filter(has_text="live")).to_be_visible()
    # the running node is highlighted on the diagram
    page.get_by_role("tab", name="Graph").click()
    expect(page.locator('.react-flow__node[data-id="work"] .gnode')).to_have_class(re.compile("running"))
    header.get_by_role("button", name="Cancel run").click()
    run = _wait_run_ended(server, run_id)
    assert run["status"] == "interrupted", run
    expect(header.locator(".status-interrupted").first).to_be_visible()
    expect(header.get_by_role("button", name="Cancel run")).to_have_count(0)


def test_keyboard_moves_between_calls_and_every_control_has_a_name(page, server, recorded):
    _, runs = recorded
    run_id = runs["refund_agent"]
    calls = _get(server.base, f"/graphtape/runs/{run_id}/calls")["calls"]
    _open_run(page, server, run_id)
    expect(page.get_by_role("tree", name="Timeline").locator("[data-call-id]").first).to_be_visible()
    page.locator("body").press("j")
    page.wait_for_url(f"**call={calls[0]['call_id']}")
    page.locator("body").press("j")
    page.wait_for_url(f"**call={calls[1]['call_id']}")
    page.locator("body").press("k")
    page.wait_for_url(f"**call={calls[0]['call_id']}")
    page.locator("body").press("Escape")
    expect(page.get_by_role("complementary", name="Call detail")).to_have_count(0)
    page.locator("body").press("s")
    expect(page.get_by_role("tab", name="State")).to_have_attribute("aria-selected", "true")
    for tab in ("timeline", "state", "debugger"):
        page.goto(f"{server.base}/ui/runs/{run_id}?tab={tab}&call={calls[0]['call_id']}")
        expect(page.get_by_role("complementary", name="Call detail")).to_be_visible()
        unnamed = page.evaluate(
            """() => [...document.querySelectorAll('button, select, input, textarea, a[href]')]
                .filter(el => !(el.getAttribute('aria-label') || el.textContent.trim() || el.labels?.length
                               || el.getAttribute('title') || el.closest('.react-flow__panel')))
                .map(el => el.outerHTML.slice(0, 120))"""
        )
        assert unnamed == [], unnamed


def test_subgraphs_expand_on_the_diagram(page, server, recorded):
    _, runs = recorded
    run_id = runs["doc_pipeline"]
    inner = [n["id"] for n in _get(server.base, "/assistants/doc_pipeline/graph?xray=true")["nodes"] if ":" in n["id"]]
    assert inner, "the document pipeline has a subgraph"
    _open_run(page, server, run_id, "?tab=graph")
    expect(page.locator('.react-flow__node[data-id="analyze"]')).to_be_visible()
    page.get_by_role("button", name="Expand subgraphs").click()
    for node in inner:
        expect(page.locator(f'.react-flow__node[data-id="{node}"] .gnode.sub')).to_be_visible()
    expect(page.locator('.react-flow__node[data-id="analyze"]')).to_have_count(0)
    page.get_by_role("button", name="Collapse subgraphs").click()
    expect(page.locator('.react-flow__node[data-id="analyze"]')).to_be_visible()


def test_a_crashed_run_links_to_the_recovery_that_finished_it(page, tmp_path):
    from tests.test_recovery import worker

    url = f"sqlite:///{tmp_path / 'crash.db'}"
    assert worker(url, tmp_path / "ledger", "t-crash", "after-draft-llm").returncode == -9
    time.sleep(0.7)  # the killed process's lease expires
    recovered = worker(url, tmp_path / "ledger", "t-crash", mode="recover")
    assert recovered.returncode == 0, recovered.stderr
    (result,) = json.loads(recovered.stdout)
    srv = Server(url, _free_port(), tmp_path / "server.log")
    srv.start()
    try:
        _open_run(page, srv, result["crashed_run_id"])
        note = page.get_by_role("note").filter(has_text="finished by its recovery")
        expect(note).to_be_visible()
        note.get_by_role("link").click()
        page.wait_for_url(f"**/ui/runs/{result['run_id']}")
        expect(page.get_by_role("region", name="Run")).to_contain_text("recovery")
    finally:
        srv.stop()


AXE = ROOT / "web" / "node_modules" / "axe-core" / "axe.min.js"


def _steps_calls(timeline: dict[str, Any]) -> list[dict[str, Any]]:
    def walk(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [c for t in tasks for c in [*t["calls"], *walk(t.get("subtasks", []))]]

    return [c for s in timeline["steps"] for c in walk(s["tasks"])]


def test_timeline_rows_name_nodes_tools_and_preview_answers(page, server, recorded, shots):
    _, runs = recorded
    run_id = runs["refund_agent"]
    _open_run(page, server, run_id)
    timeline = page.get_by_role("tree", name="Timeline")
    # the input and loop checkpoints say what they are: no empty "step -1" / "step 0" rows
    expect(timeline.locator(".wf-checkpoint").first).to_contain_text("input")
    expect(timeline.locator(".wf-checkpoint").nth(1)).to_contain_text("input applied")
    expect(timeline).not_to_contain_text("step -1")
    expect(timeline).not_to_contain_text("step 0")
    expect(timeline.locator(".wf-step").first).to_contain_text("step 1 · classify")
    calls = _steps_calls(_get(server.base, f"/graphtape/runs/{run_id}/timeline"))
    tool = next(c for c in calls if c["name"] == "lookup_order")
    row = timeline.locator(f'[data-call-id="{tool["call_id"]}"]')
    # a tool row: the tool and its arguments, a preview of its result, the source badge
    expect(row).to_contain_text('lookup_order(order_id="A-1001")')
    expect(row.locator(".wf-detail")).to_contain_text('"item": "blender"')
    expect(row).to_contain_text("recorded")
    # a model row: the model and the last message it was sent, the answer, tokens in and out, latency
    model = calls[0]
    row = timeline.locator(f'[data-call-id="{model["call_id"]}"]')
    expect(row).to_contain_text("fake-support-1 ← [human] Hi, my blender")
    expect(row.locator(".wf-detail")).to_have_text("→ refund")
    preview = model["preview"]
    expect(row.locator(".wf-tokens")).to_have_text(f"{preview['input_tokens']} in · {preview['output_tokens']} out")
    expect(row.locator(".wf-dur")).not_to_have_text("–")
    page.screenshot(path=str(shots / "timeline-rows.png"))
    # a subgraph's tasks are rows of their own, nested under the task that ran the subgraph
    _open_run(page, server, runs["doc_pipeline"])
    timeline = page.get_by_role("tree", name="Timeline")
    parent = timeline.locator(".wf-task", has_text="analyze").first
    inner = timeline.locator(".wf-task", has_text="summarize")
    expect(inner).to_have_attribute("aria-level", "3")
    expect(parent).to_have_attribute("aria-level", "2")
    summary = next(
        c
        for c in _steps_calls(_get(server.base, f"/graphtape/runs/{runs['doc_pipeline']}/timeline"))
        if c["node_path"] == "analyze/summarize"
    )
    expect(timeline.locator(f'[data-call-id="{summary["call_id"]}"]')).to_have_attribute("aria-level", "4")


def test_figures_say_only_what_is_true(page, server, recorded, tmp_path):
    from langchain_core.messages import HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    import graphtape
    from graphtape.testing.models import SeededChatModel

    _, runs = recorded
    # a recording: every call was made live, so the header does not count "served" and "live"
    _open_run(page, server, runs["refund_agent"])
    facts = page.get_by_role("region", name="Run").locator(".facts")
    expect(facts).to_contain_text("llm ·")
    expect(facts).not_to_contain_text("served")
    # the call detail: input and output tokens in view (not under a collapsed "Usage")
    first = _get(server.base, f"/graphtape/runs/{runs['refund_agent']}/calls")["calls"][0]
    detail = _get(server.base, f"/graphtape/runs/{runs['refund_agent']}/calls/{first['call_id']}")
    _open_run(page, server, runs["refund_agent"], f"?call={first['call_id']}")
    panel = page.get_by_role("complementary", name="Call detail")
    usage = detail["usage"]
    expect(panel.get_by_label("tokens", exact=True)).to_have_text(
        f"{usage['input_tokens']} in · {usage['output_tokens']} out · {first['tokens']} total"
    )
    expect(panel.locator("summary", has_text="Usage")).to_have_count(0)
    # the runs list: the calls column says what its three numbers count
    page.goto(f"{server.base}/ui")
    expect(page.locator(".table-head")).to_contain_text("llm / tool / effect")
    # a model without a price: cost "–" says why and how to set a price table
    tape = graphtape.connect(recorded[0])
    try:
        model = SeededChatModel(model_name="house-model-7", seed=3)
        g = StateGraph(MessagesState)
        g.add_node("ask", lambda s: {"messages": [model.invoke(s["messages"])]})
        g.add_edge(START, "ask")
        rec = tape.record(g.compile(), name="unpriced")
        rec.invoke({"messages": [HumanMessage("hello")]})
        run_id = rec.last_run_id
    finally:
        tape.close()
    (call,) = _get(server.base, f"/graphtape/runs/{run_id}/calls")["calls"]
    assert call["cost"] is None and call["tokens"]
    _open_run(page, server, run_id, f"?call={call['call_id']}")
    cost = page.get_by_role("complementary", name="Call detail").locator(".no-price")
    expect(cost).to_contain_text("no price known")
    expect(cost).to_have_attribute("title", re.compile(r"house-model-7.*graphtape\.connect\(url, prices="))


def test_a_long_label_does_not_overlap_the_next_run(page, server, recorded):
    _, runs = recorded
    run_id = runs["doc_pipeline"]
    label = "a long label " * 30
    req = urllib.request.Request(
        f"{server.base}/graphtape/runs/{run_id}/label",
        data=json.dumps({"label": label}).encode(),
        headers={"Content-Type": "application/json"},
        method="PUT",
    )
    try:
        urllib.request.urlopen(req, timeout=10).close()
        page.goto(f"{server.base}/ui")
        rows = page.get_by_role("list", name="Run list").locator("[data-run-id]")
        row = page.locator(f'[data-run-id="{run_id}"]')
        expect(row).to_contain_text("a long label")
        index = [r.get_attribute("data-run-id") for r in rows.all()].index(run_id)
        box = row.bounding_box()
        chip = row.locator(".label-chip").bounding_box()
        assert chip["y"] + chip["height"] <= box["y"] + box["height"] + 0.5, (chip, box)
        assert box["height"] > 40, "the row grew to hold its label"
        if index + 1 < rows.count():
            below = rows.nth(index + 1).bounding_box()
            assert below["y"] >= box["y"] + box["height"] - 0.5, (box, below)
    finally:
        req = urllib.request.Request(
            f"{server.base}/graphtape/runs/{run_id}/label",
            data=json.dumps({"label": None}).encode(),
            headers={"Content-Type": "application/json"},
            method="PUT",
        )
        urllib.request.urlopen(req, timeout=10).close()


def _axe(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is."""
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_no_serious_violation_on_the_runs_list_and_a_run(page, server, recorded, theme):
    if not AXE.exists():
        pytest.skip(f"axe-core is installed by `cd web && npm ci` ({AXE} is missing)")
    _, runs = recorded
    page.emulate_media(color_scheme=theme)
    page.goto(f"{server.base}/ui")
    expect(page.locator(f'[data-run-id="{runs["refund_agent"]}"]')).to_be_visible()
    found = {"runs list": _axe(page)}
    first = _get(server.base, f"/graphtape/runs/{runs['refund_agent']}/calls")["calls"][0]
    _open_run(page, server, runs["refund_agent"], f"?call={first['call_id']}")
    expect(
        page.get_by_role("complementary", name="Call detail").get_by_role("heading", name="Messages")
    ).to_be_visible()
    found["run view"] = _axe(page)
    assert not any(found.values()), found
