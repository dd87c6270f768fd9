"""Servers on a real port of 127.0.0.1, for the tests that talk to a live server.

Several test modules serve the Studio (or another app) with uvicorn in a
background thread, or start ``graphtape dev``/the demo as a process; they
share this one way of picking a port, waiting for the server to answer and
stopping it, so that a change to how a server is started or stopped is made
once.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["SDK_KEY_VARS", "free_port", "interrupt", "serve_app", "without_sdk_keys"]

#: the variables ``langgraph-sdk`` reads an API key from (and would send to the server under test)
SDK_KEY_VARS = ("LANGGRAPH_API_KEY", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_app(app: Any, name: str = "test-uvicorn", **config: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread; yield its base URL; stop it (and check it stopped) on exit.

    ``config`` adds to or overrides the uvicorn settings (``lifespan="off"``, ...).
    """
    import uvicorn

    port = free_port()
    settings: dict[str, Any] = {"log_level": "error", "ws": "none", "access_log": False, **config}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **settings))
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
    assert not thread.is_alive(), "uvicorn did not stop"


def interrupt(proc: subprocess.Popen[str], timeout: float = 20) -> None:
    """Stop a server process as Ctrl-C would (killed if it takes longer than ``timeout``), and close its pipes."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def without_sdk_keys(monkeypatch: Any) -> None:
    """Unset :data:`SDK_KEY_VARS` for the test: the SDK client sends no key of the developer's."""
    for var in SDK_KEY_VARS:
        monkeypatch.delenv(var, raising=False)
