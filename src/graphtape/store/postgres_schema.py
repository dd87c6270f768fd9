"""What the PostgreSQL store keeps on the server, and how its values are encoded there.

:mod:`graphtape.store.postgres` keeps the store itself
(:class:`~graphtape.store.postgres.PostgresTapeStore`: the pool, migrating,
transactions and retries, every read and write); this module holds what that
store's statements are made of, so the format can be read in one place and
the store class stays short:

* the schema: :data:`MIGRATIONS` (the tables and the ``gt_check_fence``
  function), :data:`FENCE_SQLSTATE`, the migration lock key
  :data:`MIGRATION_LOCK`, and :data:`COMPRESS_OVER` (which blobs are stored
  deflated),
* SQL text shared by several statements: the column lists
  (``CHECKPOINT_COLUMNS``, ``CHECKPOINT_COLUMNS_IN``, ``WRITE_COLUMNS``)
  and the lease upsert ``ACQUIRE_LEASE``,
* the pure encode/decode helpers: strings PostgreSQL cannot hold
  (``encode``, ``decode``, ``encode_params``, ``as_columns``), the jsonb copy of
  metadata (``jsonb_text``) and nullable floats (``nullable_float``),
* :func:`parse_url`, which takes graphtape's ``schema`` out of a store URL,
  and ``one_line`` for error messages.

Nothing here talks to a server. Why the schema looks the way it does is in the
docstring of :mod:`graphtape.store.postgres`. It is imported by that module
only, after it has checked that psycopg is installed.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from graphtape.errors import StoreError
from graphtape.store.codec import dump_meta

DEFAULT_SCHEMA = "graphtape"

#: Key of the transaction-scoped advisory lock held while migrating ("gtmigrat").
MIGRATION_LOCK = 0x67746D6967726174

#: Blobs larger than this are stored zlib-compressed at level 1, as in SQLite.
COMPRESS_OVER = 1024

MIGRATIONS: list[str] = [
    # 1: the initial schema
    """
    CREATE TABLE gt_runs (
        run_id text COLLATE "C" PRIMARY KEY,
        thread_id text COLLATE "C" NOT NULL,
        graph text NOT NULL,
        status text NOT NULL,
        started_at double precision NOT NULL,
        ended_at double precision,
        parent_run_id text COLLATE "C",
        replay_of text COLLATE "C",
        mode text NOT NULL,
        llm_calls bigint NOT NULL DEFAULT 0,
        tool_calls bigint NOT NULL DEFAULT 0,
        effect_calls bigint NOT NULL DEFAULT 0,
        served_calls bigint NOT NULL DEFAULT 0,
        live_calls bigint NOT NULL DEFAULT 0,
        tokens bigint NOT NULL DEFAULT 0,
        error text,
        meta text NOT NULL DEFAULT '{}'
    );
    CREATE INDEX gt_runs_started ON gt_runs(started_at);
    CREATE INDEX gt_runs_thread ON gt_runs(thread_id, started_at);
    CREATE TABLE gt_events (
        run_id text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        kind text NOT NULL,
        ts double precision NOT NULL,
        data bytea NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    ALTER TABLE gt_events ALTER COLUMN data SET STORAGE EXTERNAL;
    CREATE TABLE gt_blobs (
        hash text COLLATE "C" PRIMARY KEY,
        enc text NOT NULL,
        data bytea NOT NULL
    );
    ALTER TABLE gt_blobs ALTER COLUMN data SET STORAGE EXTERNAL;
    CREATE TABLE gt_chains (
        id text COLLATE "C" PRIMARY KEY,
        parent text COLLATE "C",
        item text COLLATE "C" NOT NULL
    );
    """,
    # 2: graphtape's own LangGraph checkpoint saver
    """
    CREATE TABLE gt_checkpoints (
        thread_id text COLLATE "C" NOT NULL,
        checkpoint_ns text COLLATE "C" NOT NULL,
        checkpoint_id text COLLATE "C" NOT NULL,
        parent_id text COLLATE "C",
        run_id text COLLATE "C",
        step bigint,
        source text,
        created_at text NOT NULL,
        metadata_text text NOT NULL,
        metadata jsonb NOT NULL,
        body bytea NOT NULL,
        channel_values text NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    );
    ALTER TABLE gt_checkpoints ALTER COLUMN body SET STORAGE EXTERNAL;
    CREATE INDEX gt_checkpoints_run ON gt_checkpoints(run_id);
    CREATE TABLE gt_writes (
        thread_id text COLLATE "C" NOT NULL,
        checkpoint_ns text COLLATE "C" NOT NULL,
        checkpoint_id text COLLATE "C" NOT NULL,
        task_id text COLLATE "C" NOT NULL,
        idx integer NOT NULL,
        task_path text NOT NULL,
        channel text NOT NULL,
        value text COLLATE "C" NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    );
    """,
    # 3: leases (one writer per thread) with fencing tokens
    """
    CREATE TABLE gt_leases (
        name text COLLATE "C" PRIMARY KEY,
        owner text,
        expires_at double precision NOT NULL,
        token bigint NOT NULL
    );
    -- The fence of a write, checked on the server so that a whole batch is
    -- one statement: it locks the lease row FOR SHARE (a takeover waits for
    -- the write) and fails the statement, before any row is written, if the
    -- token moved on. The message is the current token.
    CREATE FUNCTION gt_check_fence(lease text, expected bigint) RETURNS void
    LANGUAGE plpgsql AS $$
    DECLARE
        current_token bigint;
    BEGIN
        SELECT token INTO current_token FROM gt_leases WHERE name = lease FOR SHARE;
        IF current_token IS DISTINCT FROM expected THEN
            RAISE EXCEPTION USING ERRCODE = 'GTL01', MESSAGE = coalesce(current_token::text, 'none');
        END IF;
    END
    $$;
    """,
    # 4: the writers of each checkpoint and the calls of its step, known when it is written
    # (see CheckpointRow.writers and .calls)
    """
    ALTER TABLE gt_checkpoints ADD COLUMN writers text, ADD COLUMN calls text;
    """,
    # 5: the index of archived threads (graphtape archive): where each went
    """
    CREATE TABLE gt_archives (
        thread_id text COLLATE "C" PRIMARY KEY,
        file text NOT NULL,
        archived_at double precision NOT NULL,
        size bigint NOT NULL,
        digest text NOT NULL,
        runs integer NOT NULL
    );
    """,
    # 6: checkpoint bodies compressed by the server. A body holds every
    # channel's version and every node's versions seen, so it grows with the
    # graph (7 KB at step 50 of a 50-node line); stored EXTERNAL it went out
    # of line uncompressed, in 2 KB TOAST chunks: 7.3 KB of WAL per super-step
    # against 4.6 KB compressed. lz4 where the server has it (PostgreSQL 14+
    # built with it), else pglz. Rows already written stay as they are, and
    # readers see the same bytes either way.
    """
    ALTER TABLE gt_checkpoints ALTER COLUMN body SET STORAGE EXTENDED;
    DO $$
    BEGIN
        ALTER TABLE gt_checkpoints ALTER COLUMN body SET COMPRESSION lz4;
    EXCEPTION WHEN OTHERS THEN
        NULL;  -- no lz4 in this server, or no SET COMPRESSION before PostgreSQL 14: pglz, the default
    END
    $$;
    """,
    # v7: no table changes. A checkpoint's channel value may now be a chained message list (see
    # graphtape.runtime.saver_values), which a graphtape that knows v6 would misread: the version
    # makes it refuse the store instead of failing on the first such value.
    """
    SELECT 1;
    """,
    # 8: the runs list answered from indexes, whatever the store's size: the listing's order
    # (started_at DESC, run_id) as one index, so a page, an OFFSET and a keyset cursor read only
    # their rows, and a filter by status or graph starts at its runs. The listing index serves
    # started_at ranges as the one on started_at alone did.
    """
    DROP INDEX gt_runs_started;
    CREATE INDEX gt_runs_listing ON gt_runs(started_at DESC, run_id);
    CREATE INDEX gt_runs_status ON gt_runs(status, started_at);
    CREATE INDEX gt_runs_graph ON gt_runs(graph, started_at);
    """,
]

#: SQLSTATE raised by ``gt_check_fence`` when the lease changed hands.
FENCE_SQLSTATE = "GTL01"

CHECKPOINT_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source, created_at, "
    "metadata_text, body, channel_values, writers, calls"
)
CHECKPOINT_COLUMNS_IN = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source, created_at, "
    "metadata_text, metadata, body, channel_values, writers, calls"
)
WRITE_COLUMNS = "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, value"

#: One statement per lease operation; the server's clock is read once (``c.now``). The statement
#: is its own transaction and sets ``synchronous_commit`` for it alone (``set_config(..., true)``
#: in ``c``, which the insert reads, so it is evaluated): a lease is committed synchronously
#: whatever the URL says (see ``acquire_lease``), in one round trip, not BEGIN/SET/upsert/COMMIT.
ACQUIRE_LEASE = """
WITH c AS (
    SELECT extract(epoch FROM clock_timestamp())::double precision AS now,
           set_config('synchronous_commit', 'on', true) AS sync
)
INSERT INTO gt_leases AS l (name, owner, expires_at, token)
SELECT %(name)s, %(owner)s, c.now + %(ttl)s, 1 FROM c
ON CONFLICT (name) DO UPDATE SET
    owner = EXCLUDED.owner,
    expires_at = EXCLUDED.expires_at,
    token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > (SELECT now FROM c)
                 THEN l.token ELSE l.token + 1 END
WHERE l.owner IS NULL OR l.owner = EXCLUDED.owner OR l.expires_at <= (SELECT now FROM c)
RETURNING token
"""


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


#: Marks a stored string that PostgreSQL could not hold as it is (see the docstring of
#: :mod:`graphtape.store.postgres`, "Any Python string fits").
MARK = "\ufdd0"


def encode(value: Any) -> Any:
    """A value as stored: strings with NUL (or starting with the marker) become marker + JSON."""
    if type(value) is str and ("\x00" in value or value.startswith(MARK)):
        return MARK + json.dumps(value)
    return value


def decode(value: Any) -> Any:
    if type(value) is str and value.startswith(MARK):
        return json.loads(value[1:])
    return value


def encode_params(params: Any) -> Any:
    """Query parameters as stored: strings encoded, also inside lists (``= ANY(%s)``)."""
    if params is None:
        return None
    if isinstance(params, dict):
        return {k: encode_params(v) if isinstance(v, list) else encode(v) for k, v in params.items()}
    return [encode_params(v) if isinstance(v, list) else encode(v) for v in params]


def as_columns(rows: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """Rows as one list per column (strings encoded): each becomes one array parameter of an ``unnest`` insert."""
    return [encode_column(column) for column in zip(*rows)]


def encode_column(column: Sequence[Any]) -> list[Any]:
    """``[encode(v) for v in column]``, with one C-level scan for a column of strings that need nothing.

    A step's batch has about 50 values, nearly all plain strings: testing
    them one by one in Python was a tenth of the batch's client time.
    """
    try:
        text = "".join(column)  # TypeError at the first value that is not a str (None, a number, bytes)
    except TypeError:
        return [encode(v) for v in column]
    if "\x00" in text or MARK in text:  # a marker anywhere (not only first): rare, checked value by value
        return [encode(v) for v in column]
    return list(column)


def jsonb_text(obj: Any, text: str | None = None) -> str:
    """JSON for the jsonb copy of metadata, which cannot hold NUL: there it becomes U+FFFD.

    ``text``: ``dump_meta(obj)`` when the caller has it already (the copy is then that same text).
    """
    if text is None:
        text = dump_meta(obj)
    if "\\u0000" not in text:
        return text

    def clean(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace("\x00", "\ufffd")
        if isinstance(v, dict):
            return {clean(k): clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return dump_meta(clean(json.loads(text)))


def nullable_float(value: Any) -> float | None:
    return None if value is None else float(value)


def parse_url(url: str) -> tuple[str, str, str]:
    """Split a store URL into ``(conninfo for libpq, schema, url without secrets)``.

    The ``schema`` parameter is graphtape's and is removed before libpq sees
    the URL (libpq refuses parameters it does not know). The display URL
    drops the password, from the user info and from a ``password=``
    parameter, and always names the schema, so ``open_store(store.url)``
    reopens the same store (with the password from ``PGPASSWORD`` or
    ``~/.pgpass``).
    """
    usage = "use postgresql://user@host:5432/dbname?schema=graphtape"
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise StoreError(f"cannot read the PostgreSQL URL: {one_line(exc)}; {usage}") from None
    if parts.scheme.lower() not in ("postgresql", "postgres"):
        raise StoreError(f"not a PostgreSQL URL (scheme {parts.scheme!r}); {usage}")
    # The query is split by hand and passed on byte for byte: libpq decodes
    # only %XX (a "+" stays a "+"), which the urllib helpers would not respect.
    schema = DEFAULT_SCHEMA
    rest: list[str] = []
    for item in filter(None, parts.query.split("&")):
        key, _, value = item.partition("=")
        if urllib.parse.unquote(key) == "schema":
            schema = urllib.parse.unquote(value)
        else:
            rest.append(item)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    safe_netloc = (userinfo.partition(":")[0] + "@" if at else "") + hostport
    safe_query = [i for i in rest if urllib.parse.unquote(i.partition("=")[0]) != "password"]
    safe_query.append("schema=" + urllib.parse.quote(schema, safe=""))
    # (built by hand: urlunsplit drops the empty host of postgresql:///db?host=/socket/dir)
    safe = f"{parts.scheme}://{safe_netloc}{parts.path}?{'&'.join(safe_query)}"
    if not schema:
        raise StoreError(f"empty schema name in {safe}; {usage}")
    conninfo = f"{parts.scheme}://{parts.netloc}{parts.path}" + ("?" + "&".join(rest) if rest else "")
    try:
        conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise StoreError(f"invalid PostgreSQL URL {safe}: {one_line(exc)}; {usage}") from None
    return conninfo, schema, safe
