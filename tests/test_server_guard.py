"""The Studio server's request guard, with real requests against a real uvicorn server.

A foreign ``Host`` (DNS rebinding) is refused on every kind of route; no
state-changing request a page of another site can send (a "simple" request:
``text/plain``, a form, multipart, no type, no body) reaches a route: every
POST/PUT/PATCH/DELETE route of the app is tried, taken from its route table so
that a new route is covered too, and the store is unchanged afterwards;
loopback and configured front ends still work, with CORS; the token opens
the UI once by ``?token=`` and a cookie, in a real browser (Debian's Chromium
driven by Playwright, resolving made-up names to 127.0.0.1 as a rebinding
attacker's DNS would); ``OPTIONS`` says which methods a route serves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx

import graphtape
from graphtape.server.studio import create_app
from graphtape.server.studio.guard import HostRule, allowed_hosts_setting, host_name
from tests.app_client import assert_error
from tests.live_server import free_port, interrupt, serve_app
from tests.studio_graphs import studio_graphs

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "tapes" / "linear.jsonl"
EVIL = "http://evil.example"
DOC_RUN = {"assistant_id": "doc", "input": {"topic": "pwned"}}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, Any]]:
    """(base URL, tape) of the Studio on a fresh SQLite store with the defaults, on a real port."""
    folder = tmp_path_factory.mktemp("guard")
    tape = graphtape.connect(f"sqlite:///{folder / 'tape.db'}")
    app = create_app(tape, studio_graphs(), heartbeat_seconds=0.05)
    try:
        with serve_app(app, name="guard-uvicorn") as url:
            yield url, tape
    finally:
        tape.close()


@pytest.fixture(scope="module")
def ids(served) -> dict[str, str]:
    """Real ids of every kind a route takes, so a refused request would have found its target."""
    base, _ = served
    with httpx.Client(base_url=base, timeout=30) as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        run = http.post(f"/threads/{tid}/runs", json={"assistant_id": "doc", "input": {"topic": "t"}}).json()
        http.get(f"/threads/{tid}/runs/{run['run_id']}/join")
        state = http.get(f"/threads/{tid}/state").json()
        calls = http.get(f"/graphtape/runs/{run['run_id']}/calls").json()["calls"]
        assistant = http.post("/assistants", json={"graph_id": "doc", "name": "mine"}).json()
        http.put("/store/items", json={"namespace": ["n"], "key": "k", "value": {"v": 1}})
        session = http.post("/graphtape/debug", json={"run_id": run["run_id"]}).json()
    return {
        "thread_id": tid,
        "run_id": run["run_id"],
        "checkpoint_id": state["checkpoint"]["checkpoint_id"],
        "call_id": calls[0]["call_id"],
        "assistant_id": assistant["assistant_id"],
        "session_id": session["session_id"],
        "graph_id": "doc",
    }


def snapshot(http: httpx.Client, ids: dict[str, str]) -> dict[str, Any]:
    """What a write anywhere would change: runs, threads, their history, assistants, store items, the debugger."""
    tid = ids["thread_id"]
    return {
        "runs": [(r["run_id"], r["status"], r["label"]) for r in http.get("/graphtape/runs?limit=500").json()["runs"]],
        "threads": http.post("/threads/search", json={"limit": 1000}).json(),
        "history": [
            c["checkpoint"]["checkpoint_id"] for c in http.post(f"/threads/{tid}/history", json={"limit": 100}).json()
        ],
        "thread_runs": http.get(f"/threads/{tid}/runs").json(),
        "assistants": http.post("/assistants/search", json={"limit": 100}).json(),
        "items": http.post("/store/items/search", json={"namespace_prefix": [], "limit": 100}).json(),
        "debug": http.get(f"/graphtape/debug/{ids['session_id']}").json(),
    }


def state_changing_routes(app: Any) -> list[tuple[str, str]]:
    """(method, path template) of every POST/PUT/PATCH/DELETE operation in the app's OpenAPI document."""
    paths = app.openapi()["paths"]
    return [(m.upper(), p) for p, ops in paths.items() for m in ops if m in ("post", "put", "patch", "delete")]


def _json_for(method: str, path: str, ids: dict[str, str]) -> bytes:
    """A body the route would act on if it got through: what a hostile page would send."""
    if path == "/graphtape/import":
        return GOLDEN.read_bytes()
    if path.endswith("/batch"):
        return json.dumps([DOC_RUN]).encode()
    if "/runs" in path and method == "POST" and not path.startswith("/graphtape"):
        return json.dumps({**DOC_RUN, "if_not_exists": "create"}).encode()
    bodies: dict[tuple[str, str], Any] = {
        ("PATCH", "/threads/{thread_id}"): {"metadata": {"pwned": 1}},
        ("POST", "/threads/{thread_id}/state"): {"values": {"topic": "pwned"}},
        ("PUT", "/store/items"): {"namespace": ["n"], "key": "k", "value": {"pwned": 1}},
        ("DELETE", "/store/items"): {"namespace": ["n"], "key": "k"},
        ("POST", "/assistants"): {"graph_id": "doc"},
        ("PATCH", "/assistants/{assistant_id}"): {"metadata": {"pwned": 1}},
        ("PUT", "/graphtape/runs/{run_id}/label"): {"label": "pwned"},
        ("POST", "/graphtape/runs/{run_id}/replay"): {"mode": "flight"},
        ("POST", "/graphtape/debug"): {"run_id": ids["run_id"]},
        ("PUT", "/graphtape/debug/{session_id}/breakpoints"): {"breakpoints": [{"node": "publish"}]},
    }
    return json.dumps(bodies.get((method, path), {"values": {"topic": "pwned"}, "mode": "flight"})).encode()


def _hostile_requests(body: bytes) -> list[tuple[str, dict[str, str], bytes, int]]:
    """(what, headers, body, the status it must get): what a page of another site can send with no preflight."""
    cross = {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}
    cases = [
        ("text/plain", {**cross, "Content-Type": "text/plain;charset=UTF-8"}, body, 403),
        ("form", {**cross, "Content-Type": "application/x-www-form-urlencoded"}, b"a=" + body, 403),
        ("multipart", {**cross, "Content-Type": "multipart/form-data; boundary=x"}, b"--x--\r\n", 403),
        ("no type", dict(cross), body, 403),
        ("no body", dict(cross), b"", 403),
        ("opaque origin", {"Origin": "null", "Content-Type": "text/plain"}, body, 403),
        ("no Origin, cross-site", {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}, body, 403),
        # a browser that sends no Origin and no Sec-Fetch-Site: the body type alone stops it
        ("old browser text/plain", {"Content-Type": "text/plain"}, body, 415),
        ("old browser, no type", {}, body, 415),
    ]
    return cases


def test_a_foreign_host_is_refused_on_a_get_a_stream_and_a_post(served, ids):
    base, _ = served
    port = base.rsplit(":", 1)[1]
    tid, rid = ids["thread_id"], ids["run_id"]
    with httpx.Client(base_url=base, timeout=30) as http:
        before = snapshot(http, ids)
        for host in (
            f"evil.example:{port}",
            "evil.example",
            f"127.0.0.1.nip.io:{port}",
            f"localhost.evil:{port}",
            "x y",
        ):
            h = {"Host": host}
            assert_error(http.get("/graphtape/runs", headers=h), 403, "--allowed-host", "GRAPHTAPE_ALLOWED_HOSTS")
            assert_error(http.get(f"/threads/{tid}/runs/{rid}/stream", headers=h), 403, "--allowed-host")
            assert_error(http.get(f"/graphtape/runs/{rid}/stream", headers=h), 403, "--allowed-host")
            assert_error(http.get("/", headers={**h, "Accept": "text/html"}), 403, "--allowed-host")
            assert_error(http.post("/threads", json={}, headers=h), 403, "--allowed-host")
            assert_error(http.post(f"/threads/{tid}/runs/wait", json=DOC_RUN, headers=h), 403)
        assert snapshot(http, ids) == before
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "127.0.0.2", "LOCALHOST."):
            assert http.get("/graphtape/runs", headers={"Host": host}).status_code == 200, host
        with http.stream("GET", f"/graphtape/runs/{rid}/stream", headers={"Host": f"localhost:{port}"}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")


def test_allowed_hosts_open_names_for_a_reverse_proxy(tmp_path):
    tape = graphtape.connect(f"sqlite:///{tmp_path / 'tape.db'}")
    try:
        app = create_app(tape, studio_graphs(), allowed_hosts=["proxy.example", ".corp.example"])
        with serve_app(app) as base, httpx.Client(base_url=base, timeout=30) as http:
            for host in ("proxy.example", "PROXY.example:443", "corp.example", "a.b.corp.example:8080"):
                assert http.get("/info", headers={"Host": host}).status_code == 200, host
            for host in ("evil.example", "proxy.example.evil", "xcorp.example", "192.168.1.5"):
                assert_error(http.get("/info", headers={"Host": host}), 403, "--allowed-host")
        with serve_app(create_app(tape, studio_graphs(), allowed_hosts=["*"])) as base:
            assert httpx.get(base + "/info", headers={"Host": "anything.example"}).status_code == 200
    finally:
        tape.close()


def test_the_default_hosts_follow_the_bind():
    loopback = HostRule("127.0.0.1")
    assert [loopback.allows(host_name(h)) for h in ("localhost:2024", "[::1]", "127.0.0.9", "192.0.2.1")] == [
        True,
        True,
        True,
        False,
    ]
    named = HostRule("studio.lan")
    assert named.allows(host_name("studio.lan:2024")) and not named.allows(host_name("other.lan"))
    # on every interface: any IP address (a rebinding page needs a name its author controls) and the machine's names
    everywhere = HostRule("0.0.0.0")
    import socket

    assert everywhere.allows(host_name("192.0.2.1:2024")) and everywhere.allows(host_name("[fd00::2]:2024"))
    assert everywhere.allows(host_name(socket.gethostname())) and not everywhere.allows(host_name("evil.example"))
    assert HostRule("::").allows(host_name("10.0.0.1"))
    assert allowed_hosts_setting([" a.example "], {"GRAPHTAPE_ALLOWED_HOSTS": "b.example, .c.example,,"}) == [
        "a.example",
        "b.example",
        ".c.example",
    ]


def test_no_cross_site_simple_request_changes_anything(served, ids):
    base, tape = served
    routes = state_changing_routes(create_app(tape, studio_graphs()))
    # the routes are read from the document, not listed here: every write route is covered
    paths = {p for _, p in routes}
    assert {"/graphtape/import", "/agui/{graph_id}", "/graphtape/debug/{session_id}/step", "/threads"} <= paths
    assert len(routes) >= 40
    refused: list[str] = []
    with httpx.Client(base_url=base, timeout=30) as http:
        before = snapshot(http, ids)
        for method, template in routes:
            path = template.format(**ids)
            for what, headers, body, status in _hostile_requests(_json_for(method, template, ids)):
                r = http.request(method, path, headers=headers, content=body)
                if r.status_code != status or r.json().get("status") != status:
                    refused.append(f"{method} {template} ({what}): {r.status_code} {r.text[:120]}")
        assert not refused, "\n".join(refused)
        assert snapshot(http, ids) == before
    assert [r.run_id for r in tape.runs()] == [r[0] for r in before["runs"]]


def test_loopback_own_and_configured_origins_may_write_with_cors(served, tmp_path):
    base, _ = served
    port = base.rsplit(":", 1)[1]
    with httpx.Client(base_url=base, timeout=30) as http:
        for origin in (
            "http://localhost:3000",
            "http://127.0.0.1:5173",
            "http://[::1]:8080",
            f"http://127.0.0.1:{port}",
        ):
            r = http.post("/threads", json={}, headers={"Origin": origin, "Sec-Fetch-Site": "same-site"})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin, origin
        # a front end on another port: its preflight is answered, no option needed
        pre = http.options(
            "/threads",
            headers={
                "Origin": "http://localhost:3000",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-api-key",
            },
        )
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "http://localhost:3000"
        foreign = http.options("/threads", headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"})
        assert foreign.status_code == 400 and "access-control-allow-origin" not in foreign.headers
        assert "access-control-allow-origin" not in http.get("/ok", headers={"Origin": EVIL}).headers
        # the import takes a tape file's types only, and says which
        assert_error(
            http.post("/graphtape/import", content=b"x", headers={"Content-Type": "text/plain"}),
            415,
            "application/octet-stream",
            "application/x-ndjson",
        )
        plain = http.post("/threads", content=b"{}", headers={"Content-Type": "text/plain"})
        assert_error(plain, 415, "application/json")
        imported = http.post(
            "/graphtape/import",
            content=(ROOT / "tests" / "tapes" / "fanout.jsonl").read_bytes(),
            headers={"Content-Type": "application/x-ndjson", "Origin": "http://localhost:5173"},
        )
        assert imported.status_code == 200 and imported.json()["run_ids"], imported.text
    tape = graphtape.connect(f"sqlite:///{tmp_path / 'tape.db'}")
    try:
        with serve_app(create_app(tape, studio_graphs(), cors_origins=["https://ui.example"])) as other:
            cross = {"Origin": "https://ui.example", "Sec-Fetch-Site": "cross-site"}
            r = httpx.post(other + "/threads", json={}, headers=cross)
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://ui.example"
            assert_error(httpx.post(other + "/threads", json={}, headers={"Origin": EVIL}), 403, "--cors-origin")
    finally:
        tape.close()


def test_a_refusal_carries_cors_headers_for_a_front_end_cors_allows(tmp_path):
    """A loopback or configured front end reads why it was refused (token, body type, size); a
    page of another origin is refused without them and reads nothing."""
    tape = graphtape.connect(f"sqlite:///{tmp_path / 'tape.db'}")
    try:
        app = create_app(tape, studio_graphs(), token="tok", cors_origins=["https://ui.example"], max_body_bytes=1024)
        with serve_app(app) as base, httpx.Client(base_url=base, timeout=30) as http:
            for origin in ("http://localhost:3000", "http://127.0.0.1:5173", "https://ui.example"):
                r = http.get("/info", headers={"Origin": origin})
                assert_error(r, 401, "missing or wrong token")
                assert r.headers["access-control-allow-origin"] == origin and "Origin" in r.headers["vary"]
            front = {"Origin": "http://localhost:3000", "x-api-key": "tok"}
            r = http.post("/threads", content=b"{}", headers={**front, "Content-Type": "text/plain"})
            assert_error(r, 415, "application/json")
            assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
            r = http.post("/threads", json={"metadata": {"big": "x" * 2000}}, headers=front)
            assert_error(r, 413, "larger than 1024 bytes")
            assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
            # a page of another origin: refused, and its script may not read why
            for r in (
                http.get("/info", headers={"Origin": EVIL}),
                http.post("/threads", json={}, headers={"Origin": EVIL, "x-api-key": "tok"}),
                http.get("/info", headers={"Origin": "http://localhost:3000", "Host": "evil.example"}),
            ):
                assert r.status_code in (401, 403)
                if r.request.headers.get("origin") == EVIL:
                    assert "access-control-allow-origin" not in r.headers
            assert http.get("/info", headers={"x-api-key": "tok"}).status_code == 200
            if Path(CHROMIUM).exists():
                _a_loopback_page_reads_the_refusals(base)
    finally:
        tape.close()


def _a_loopback_page_reads_the_refusals(base: str) -> None:
    """In a real browser: a page served on another port of localhost (as Agent Chat UI would be)
    calls the server with fetch, and reads each refusal's JSON message (no CORS error)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    async def front_page(request: Any) -> HTMLResponse:
        return HTMLResponse("<p>front end</p>")

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    front = Starlette(routes=[Route("/", front_page)])
    with serve_app(front, name="front-page-uvicorn") as page_url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_page()
            page.goto(page_url.replace("127.0.0.1", "localhost") + "/")
            read = """async ([url, init]) => {
                const r = await fetch(url, init);
                return [r.status, (await r.json()).detail];
            }"""
            status, detail = page.evaluate(read, [base + "/info", {}])
            assert status == 401 and "missing or wrong token" in detail
            json_post = {"method": "POST", "body": "{}", "headers": {"Content-Type": "application/json"}}
            status, detail = page.evaluate(read, [base + "/threads", json_post])  # after its preflight
            assert status == 401 and "x-api-key" in detail
            plain = {"method": "POST", "body": "{}", "headers": {"Content-Type": "text/plain", "x-api-key": "tok"}}
            status, detail = page.evaluate(read, [base + "/threads", plain])
            assert status == 415 and "application/json" in detail
        finally:
            browser.close()


def test_options_says_which_methods_a_route_serves(served, ids):
    base, _ = served
    with httpx.Client(base_url=base, timeout=30) as http:
        r = http.options("/threads")
        assert r.status_code == 204 and r.headers["allow"] == "OPTIONS, POST"
        r = http.options(f"/threads/{ids['thread_id']}")
        assert r.status_code == 204 and r.headers["allow"] == "DELETE, GET, OPTIONS, PATCH"
        r = http.options("/ui-assets/app.js")
        assert r.status_code == 204 and r.headers["allow"] == "GET, HEAD, OPTIONS"
        assert_error(http.options("/nowhere"), 404, "/docs")
        # the 405 names every method served at the path (/threads/{thread_id} takes "search" too)
        r = http.put("/threads/search", json={})
        assert_error(r, 405, "use DELETE, GET, OPTIONS, PATCH, POST")
        assert r.headers["allow"] == "DELETE, GET, OPTIONS, PATCH, POST"


def test_the_token_opens_the_ui_by_a_cookie_and_a_wrong_one_says_how_to_get_in(tmp_path):
    tape = graphtape.connect(f"sqlite:///{tmp_path / 'tape.db'}")
    try:
        app = create_app(tape, studio_graphs(), token="s3cr/et+", heartbeat_seconds=0.05)
        with serve_app(app) as base, httpx.Client(base_url=base, timeout=30) as http:
            port = base.rsplit(":", 1)[1]
            page = http.get("/ui/runs", headers={"Accept": "text/html"})
            assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
            assert f"{base}/ui/runs?token=" in page.text and "GRAPHTAPE_TOKEN" in page.text
            assert_error(http.get("/info"), 401, "Bearer", "?token=")
            assert http.get("/ok").status_code == 200
            assert_error(http.get("/ui?token=wrong"), 401, "not this server's")
            opened = http.get("/ui/runs?q=a%20b&token=s3cr%2Fet%2B", headers={"Accept": "text/html"})
            assert opened.status_code == 303 and opened.headers["location"] == "/ui/runs?q=a+b"
            cookie = opened.headers["set-cookie"]
            assert cookie.startswith(f"graphtape-token-{port}=") and "s3cr" not in opened.headers["location"]
            assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= {p.strip() for p in cookie.split(";")}
            # the client keeps the cookie: page, API and streams authenticate by it
            assert http.get("/ui/runs", headers={"Accept": "text/html"}).status_code == 200
            tid = http.post("/threads", json={}).json()["thread_id"]
            run = http.post(f"/threads/{tid}/runs", json={"assistant_id": "doc", "input": {"topic": "t"}}).json()
            with http.stream("GET", f"/threads/{tid}/runs/{run['run_id']}/stream") as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            # another server's cookie (another port) or a wrong one is not this token
            wrong = httpx.get(base + "/info", headers={"Cookie": f"graphtape-token-{port}=nope"})
            assert_error(wrong, 401, "token")
            assert_error(httpx.get(base + "/info", headers={"Cookie": "graphtape-token-1=s3cr%2Fet%2B"}), 401)
            assert httpx.get(base + "/info", headers={"Authorization": "Bearer s3cr/et+"}).status_code == 200
    finally:
        tape.close()


# -- in a real browser ------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"


def _dev(tmp_path: Path, port: int) -> tuple[subprocess.Popen[str], str]:
    """``graphtape dev --host 0.0.0.0``, a token, a proxy's name allowed: (process, the UI address it printed)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "GRAPHTAPE_TOKEN": "browser-token",
        "GRAPHTAPE_ALLOWED_HOSTS": "studio.test",
    }
    env.pop("GRAPHTAPE_URL", None)
    cmd = [sys.executable, "-c", "import sys; from graphtape.cli.app import main; sys.exit(main())", "dev"]
    cmd += ["--url", f"sqlite:///{tmp_path / 'dev.db'}", "--host", "0.0.0.0", "--port", str(port)]
    cmd += ["--no-browser", "--no-reload", "--graph", f"doc={ROOT / 'tests' / 'studio_graphs.py'}:build_doc"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    # read in a thread: a server that never prints the address must fail the test, not hang it
    threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True).start()
    deadline = time.monotonic() + 60
    while not any("?token=" in line for line in lines):
        assert time.monotonic() < deadline, f"graphtape dev printed no UI address: {''.join(lines)}"
        time.sleep(0.05)
    address = re.search(r"http://\S+\?token=\S+", "".join(lines))
    assert address, lines
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ok", timeout=5).status_code == 200:
                return proc, address.group(0)
        except httpx.TransportError:
            assert proc.poll() is None and time.monotonic() < deadline, "graphtape dev did not answer"
            time.sleep(0.1)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"the browser test needs Chromium at {CHROMIUM}")
def test_a_browser_opens_the_ui_by_token_on_a_bind_beyond_loopback(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    port = free_port()
    proc, printed = _dev(tmp_path, port)
    try:
        assert printed == f"http://0.0.0.0:{port}/?token=browser-token"
        bearer = {"Authorization": "Bearer browser-token"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=bearer, timeout=30) as http:
            tid = http.post("/threads", json={}).json()["thread_id"]
            http.post(f"/threads/{tid}/runs/wait", json=DOC_RUN)
            (run_id,) = [r["run_id"] for r in http.get("/graphtape/runs").json()["runs"]]
        # the browser reaches the server by a proxy's name (allowed) and by an attacker's (refused)
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
        args.append("--host-resolver-rules=MAP *.test 127.0.0.1")
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
            try:
                context = browser.new_context()
                page = context.new_page()
                seen: list[tuple[int, str]] = []
                page.on("response", lambda r: seen.append((r.status, r.url)))
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                origin = f"http://studio.test:{port}"
                page.goto(printed.replace("0.0.0.0", "studio.test"))
                page.wait_for_url(f"{origin}/ui")
                rows = page.get_by_role("list", name="Run list")
                sync_api.expect(rows.locator(f'[data-run-id="{run_id}"]')).to_be_visible(timeout=15_000)
                (cookie,) = context.cookies()
                assert cookie["name"] == f"graphtape-token-{port}" and cookie["httpOnly"]
                assert cookie["sameSite"] == "Strict" and cookie["path"] == "/"
                # a write from the UI (its own origin, not a loopback one) by the cookie, then the new run's stream
                page.goto(f"{origin}/ui/runs/{run_id}")
                sync_api.expect(page.get_by_role("region", name="Run")).to_be_visible(timeout=15_000)
                page.get_by_role("button", name="Replay flight").click()
                page.wait_for_url(lambda url: "/ui/runs/" in url and run_id not in url, timeout=15_000)
                sync_api.expect(page.get_by_label("Savings")).to_contain_text(
                    "calls served from the tape", timeout=15_000
                )
                failed = [(s, u) for s, u in seen if s >= 400]
                assert not failed, failed
                assert [u for _, u in seen[1:] if "token=" in u] == []
                assert any("/stream" in u for _, u in seen), seen
                assert not errors, errors
                # without the cookie: a page that says how to get in
                fresh = browser.new_context().new_page()
                answer = fresh.goto(f"{origin}/ui")
                assert answer is not None and answer.status == 401
                assert "?token=" in fresh.content() and "GRAPHTAPE_TOKEN" in fresh.content()
                # DNS rebinding: a page of evil.test whose name now points to 127.0.0.1
                rebound = fresh.goto(f"http://evil.test:{port}/ui")
                assert rebound is not None and rebound.status == 403 and "--allowed-host" in fresh.content()
            finally:
                browser.close()
    finally:
        interrupt(proc)
