"""Shared fixtures: every store-backed test runs once per backend.

Tests never name a backend: they take ``tape``, ``store_url`` or
``new_store_url`` (a factory for more stores of the same backend). The
backends are SQLite (always), PostgreSQL and Redis. Point the suite at your
servers with ``GRAPHTAPE_TEST_POSTGRES_URL`` and ``GRAPHTAPE_TEST_REDIS_URL``
(defaults: the local servers of the project's machines). A server that
cannot be reached fails the run under CI (``CI`` set) and is skipped, with
the reason shown, elsewhere.
"""

from __future__ import annotations

import os
import signal
import uuid
from typing import Any

import pytest

import graphtape

BACKENDS = ["sqlite", "postgresql", "redis"]
POSTGRES_URL = os.environ.get("GRAPHTAPE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("GRAPHTAPE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

_reachable: dict[str, str | None] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Let the suite's children see a Ctrl-C even when the suite itself was started with SIGINT ignored.

    A job that a non-interactive shell starts in the background (``cmd &``, ``nohup``) has SIGINT
    ignored, and an ignored signal stays ignored across ``exec``: the CLI, ``graphtape dev`` and the
    demo, which tests stop with SIGINT, would then install no KeyboardInterrupt handler and never
    stop. A handled signal is reset to its default in a child, so handling it here is enough, with
    no ``preexec_fn`` (not safe in a process with threads) at each ``Popen``.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _unreachable_reason(backend: str) -> str | None:
    """None when the backend's server answers, else why not (cached per session)."""
    if backend in _reachable:
        return _reachable[backend]
    reason = None
    try:
        if backend == "postgresql":
            import psycopg

            with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        elif backend == "redis":
            import redis

            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except ImportError as exc:
        extra = backend.replace("postgresql", "postgres")
        reason = f"the {backend} client is not installed ({exc.name}); pip install 'graphtape[{extra}]'"
    except Exception as exc:
        url = POSTGRES_URL if backend == "postgresql" else REDIS_URL
        env = "GRAPHTAPE_TEST_POSTGRES_URL" if backend == "postgresql" else "GRAPHTAPE_TEST_REDIS_URL"
        reason = f"{backend} not reachable at {url} ({type(exc).__name__}); set {env} to your server"
    _reachable[backend] = reason
    return reason


def _drop(backend: str, name: str) -> None:
    if backend == "postgresql":
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    elif backend == "redis":
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{name}*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        client.close()


@pytest.fixture(params=BACKENDS)
def backend(request):
    reason = _unreachable_reason(request.param) if request.param != "sqlite" else None
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must test every backend: {reason}")
        pytest.skip(reason)
    return request.param


@pytest.fixture
def new_store_url(backend, tmp_path):
    """A factory of URLs of fresh, empty stores of the current backend, removed after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"gt_test_{uuid.uuid4().hex[:12]}"
        made.append(name)
        if backend == "sqlite":
            return f"sqlite:///{tmp_path}/{name}.db"
        if backend == "postgresql":
            sep = "&" if "?" in POSTGRES_URL else "?"
            return f"{POSTGRES_URL}{sep}schema={name}"
        sep = "&" if "?" in REDIS_URL else "?"
        return f"{REDIS_URL}{sep}prefix={name}:"

    yield make
    if backend != "sqlite":
        for name in made:
            _drop(backend, name)


@pytest.fixture
def store_url(new_store_url):
    return new_store_url()


@pytest.fixture
def tape(store_url):
    t = graphtape.connect(store_url)
    yield t
    t.close()


@pytest.fixture(autouse=True)
def _no_default_store(tmp_path, monkeypatch):
    """Tests must never write ``.graphtape/`` into the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRAPHTAPE_URL", raising=False)


# -- the fake OpenAI/Anthropic server (tests/providers.py) -------------------------------


@pytest.fixture(scope="session")
def _provider_server_session():
    from tests.providers import ProviderServer

    server = ProviderServer().start()
    yield server
    server.stop()


@pytest.fixture
def provider_server(_provider_server_session):
    """The fake provider server on 127.0.0.1, with a clean request log, script and failure queue."""
    _provider_server_session.reset()
    yield _provider_server_session
    _provider_server_session.reset()


@pytest.fixture
def listings(tape, monkeypatch) -> list[dict[str, Any]]:
    """The keyword arguments of every ``tape.store.list_runs`` call from now on (which runs a test made
    the recorder look up)."""
    calls: list[dict[str, Any]] = []
    real = tape.store.list_runs

    def counting(**kw: Any) -> Any:
        calls.append(kw)
        return real(**kw)

    monkeypatch.setattr(tape.store, "list_runs", counting)
    return calls
