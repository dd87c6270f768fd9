"""A LangGraph front end in a real browser against ``graphtape dev`` (docs/server.md, Front ends).

The page (``e2e/front_end``) is a small chat built the way Agent Chat UI is,
on ``@langchain/langgraph-sdk``: React's ``useStream`` for the conversation
and ``threads.search`` for the thread history. Served from its own loopback
origin, it talks to a ``graphtape dev`` process serving ``e2e/front_end/desk.py``
(a tool call approved through an interrupt). The test sends a message, sees
the answer stream, accepts one tool call and edits another, finds both
threads listed by their first message (by graph name and by assistant UUID),
then replays every recorded run strictly with no live call.

Needs the page built (``make front-end-e2e`` does it: npm install, esbuild),
Chromium at /usr/bin/chromium and Playwright; skipped otherwise.
"""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "e2e" / "front_end"
CHROMIUM = "/usr/bin/chromium"
if not (PAGE / "dist" / "app.js").exists():
    pytest.skip("the front-end page is not built: run `make front-end-e2e`", allow_module_level=True)
if not Path(CHROMIUM).exists():
    pytest.skip(f"the browser test needs Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the browser test needs playwright (pip install it)")
httpx = pytest.importorskip("httpx")

import graphtape  # noqa: E402
from graphtape.server.studio.assistants import assistant_id_for  # noqa: E402
from tests.live_server import free_port, interrupt  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
sync_api.expect.set_options(timeout=20_000)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def page_origin() -> Iterator[str]:
    """The built page on its own loopback origin (a front end is never served by the API server)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(PAGE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def dev(tmp_path, page_origin) -> Iterator[tuple[str, str]]:
    """``graphtape dev`` serving the desk graph; yields its URL and its store's URL."""
    port, store = free_port(), f"sqlite:///{tmp_path}/front.db"
    cmd = [sys.executable, "-c", "from graphtape.cli import main; main()", "--url", store, "dev"]
    cmd += ["--graph", f"desk={PAGE / 'desk.py'}:graph", "--port", str(port), "--no-browser", "--no-reload"]
    cmd += ["--cors-origin", page_origin]  # also where the loopback default does not apply
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/ok", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else "graphtape dev exited"
                assert time.monotonic() < deadline, "graphtape dev did not answer"
                time.sleep(0.1)
        yield url, store
    finally:
        interrupt(proc)


def _open(browser, page_origin: str, api: str, assistant: str):
    page = browser.new_page()
    page.goto(f"{page_origin}/index.html?" + urllib.parse.urlencode({"apiUrl": api, "assistantId": assistant}))
    return page


def _ask(page, question: str) -> None:
    page.fill("#draft", question)
    page.click("#send")
    sync_api.expect(page.locator("#interrupt")).to_be_visible()


def test_a_use_stream_chat_streams_approves_edits_and_lists_threads_then_every_run_replays_strictly(dev, page_origin):
    api, store = dev
    expect = sync_api.expect
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = _open(browser, page_origin, api, "desk")
            # a message, a tool call waiting for approval, accepted; the answer streams in
            _ask(page, "Where is my order A-1001?")
            expect(page.locator(".tool-call")).to_contain_text('lookup_order({"order_id":"A-1001"})')
            expect(page.locator("#interrupt")).to_contain_text("Run lookup_order")
            page.click("#accept")
            answer = page.locator(".msg-ai").last
            expect(answer).to_contain_text("order A-1001 left the warehouse")
            expect(page.locator("#messages")).to_have_attribute("data-loading", "false")
            final = answer.inner_text()
            seen = page.evaluate("window.__seen")
            assert any(0 < len(s) < len(final) and final.startswith(s) for s in seen), seen  # streamed, not at once
            first_thread = page.locator("#messages").get_attribute("data-thread")

            # a second thread, its tool call edited before it runs
            page.click("#new-thread")
            _ask(page, "And order B-2?")
            page.fill("#edit-args", json.dumps({"order_id": "B-22"}))
            page.click("#edit")
            expect(page.locator(".msg-ai").last).to_contain_text("order B-22 left the warehouse")
            expect(page.locator("#messages")).to_have_attribute("data-loading", "false")
            expect(page.locator(".tool-call")).to_contain_text('lookup_order({"order_id":"B-22"})')

            # the history lists both threads by their first message, by graph name and by assistant UUID
            for assistant in ("desk", assistant_id_for("desk")):
                listed = _open(browser, page_origin, api, assistant).locator("#threads li")
                expect(listed).to_have_text(["And order B-2?", "Where is my order A-1001?"])
            # picking a thread from the history shows its conversation
            page.locator(f'#threads li[data-thread="{first_thread}"]').click()
            expect(page.locator(".msg-human").first).to_have_text("Where is my order A-1001?")
        finally:
            browser.close()

    tape = graphtape.connect(store)
    try:
        runs = [r for r in tape.runs(limit=50) if r.graph == "desk"]
        assert len(runs) == 4 and {r.status for r in runs} == {"interrupted", "finished"}
        from e2e.front_end.desk import graph

        for run in runs:
            result = tape.replay(run.run_id, graph(), mode="strict")
            assert result.divergence is None and result.live == 0 and result.served > 0, result
    finally:
        tape.close()
