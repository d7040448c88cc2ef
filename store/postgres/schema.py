"""The PostgreSQL store schema: the same tables and visibility column as SQLite's schema v1
(store/schema.py), with the differences a shared, multi-writer store needs.

* ``spool_cursor`` has one row per spool (``spool_id``, the stable id in each data dir), so
  every host's writer commits its own cursor with its rows.
* ``applied_batches``/``rejected_batches`` are keyed by batch id store-wide.
* ``messages.id`` is an identity column. Ids are unique, and within one session they follow
  commit order, because every op on a session runs under that session's transaction lock
  (``store.postgres.apply``); across sessions they need not follow commit order, which is why
  search needs no watermark here: indexes are maintained by the server in the transaction.
* Search: a GIN index over ``quill_words(content, tool_calls)`` (a ``simple`` tsvector of
  the text, tool names and arguments, split on non-alphanumerics like FTS5's unicode61, capped
  at ``WORD_INDEX_CHARS`` so one huge tool output can never exceed tsvector's 1 MB limit and
  abort a chunk) and a ``pg_trgm`` GIN index over the first ``TRIGRAM_PREFIX_CHARS`` of
  user/assistant text (the same scope as SQLite's trigram table).
* SQLite's scalar ``max(a, b)``/``min(a, b)`` exist as functions, so the shared op appliers
  run unchanged.

Migrations: ``MIGRATIONS`` is an ordered list; ``quill_meta['schema_version']`` holds how many
have run. ``create`` runs the missing ones in one transaction under a session advisory lock,
so several hosts starting at once migrate exactly once, and refuses a newer schema.
Functions are created schema-qualified (``SET search_path`` on each), so index expressions
still resolve when ``pg_restore`` runs with an empty search_path.
"""
from __future__ import annotations

from ..errors import CantOpenError
from ..schema import TRIGRAM_PREFIX_CHARS, TRIGRAM_ROLES
from .connection import PgConnection

#: Characters of a message's searchable text that enter the word index (see module doc).
WORD_INDEX_CHARS = 100_000
#: Advisory lock key (session level) held while migrating: hashtext('quill-migrate').
_MIGRATE_LOCK_SQL = "SELECT pg_advisory_lock(hashtextextended('quill-migrate:' || current_schema(), 0))"
_UNLOCK_SQL = "SELECT pg_advisory_unlock(hashtextextended('quill-migrate:' || current_schema(), 0))"

_V1 = """
CREATE TABLE IF NOT EXISTS quill_meta (key text PRIMARY KEY, value text);

CREATE OR REPLACE FUNCTION {s}.max(a bigint, b bigint) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS 'SELECT greatest(a, b)';
CREATE OR REPLACE FUNCTION {s}.min(a bigint, b bigint) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS 'SELECT least(a, b)';
CREATE OR REPLACE FUNCTION {s}.max(a double precision, b double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT greatest(a, b)';
CREATE OR REPLACE FUNCTION {s}.min(a double precision, b double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT least(a, b)';

-- The searchable text of a message: content plus tool-call names and arguments (as SQLite's
-- SEARCH_TEXT_SQL). Malformed tool_calls contribute nothing instead of failing the insert.
CREATE OR REPLACE FUNCTION {s}.quill_search_text(content text, tool_calls text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$
DECLARE extra text;
BEGIN
    IF tool_calls IS NULL THEN RETURN coalesce(content, ''); END IF;
    BEGIN
        SELECT string_agg(coalesce(t->'function'->>'name', '') || ' ' || coalesce(t->'function'->>'arguments', ''), ' ')
          INTO extra FROM jsonb_array_elements(tool_calls::jsonb) AS t;
    EXCEPTION WHEN others THEN extra := NULL;
    END;
    RETURN coalesce(content, '') || coalesce(' ' || extra, '');
END $$;

CREATE OR REPLACE FUNCTION {s}.quill_words(content text, tool_calls text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$
    SELECT to_tsvector('simple'::regconfig, regexp_replace(
        lower(left({s}.quill_search_text(content, tool_calls), {word_chars})), '[^[:alnum:]]+', ' ', 'g'))
$$;

CREATE TABLE IF NOT EXISTS sessions (
    id            text PRIMARY KEY,
    source        text,
    model         text,
    title         text,
    cwd           text,
    parent_id     text,
    parent_kind   text CHECK (parent_kind IN ('compression','branch','reset','delegate')),
    started_at    double precision,
    ended_at      double precision,
    end_reason    text,
    archived      integer NOT NULL DEFAULT 0,
    pinned        integer NOT NULL DEFAULT 0,
    hidden        integer NOT NULL DEFAULT 0,
    last_read_id  bigint,
    owner_host    text,
    owner_pid     bigint,
    owner_started double precision,
    meta          text,
    created_at    double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_started ON sessions(started_at);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_id);
CREATE UNIQUE INDEX IF NOT EXISTS sessions_title ON sessions(title) WHERE title IS NOT NULL;

CREATE TABLE IF NOT EXISTS messages (
    id            bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    session_id    text NOT NULL,
    ext_id        text,
    role          text NOT NULL,
    content       text,
    parts         text,
    tool_calls    text,
    tool_call_id  text,
    tool_name     text,
    reasoning     text,
    finish_reason text,
    ts            double precision,
    arrived_at    double precision NOT NULL,
    extra         text,
    state         text NOT NULL DEFAULT 'live'
                  CHECK (state IN ('live','compacted','superseded','rewound')),
    batch_id      text NOT NULL,
    origin_id     bigint
);
CREATE INDEX IF NOT EXISTS messages_session ON messages(session_id, id);
CREATE INDEX IF NOT EXISTS messages_ext ON messages(session_id, ext_id) WHERE ext_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_display ON messages(session_id, coalesce(origin_id, id));
CREATE INDEX IF NOT EXISTS messages_tool_result ON messages(session_id, tool_call_id) WHERE tool_call_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_words ON messages USING gin ({s}.quill_words(content, tool_calls));
CREATE INDEX IF NOT EXISTS messages_trigram ON messages USING gin (left(content, {trigram_chars}) {trgm}.gin_trgm_ops)
    WHERE {trigram_scope};
-- Delete-heavy retention: vacuum after 2 % dead rows, not the default 20 %.
ALTER TABLE messages SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

CREATE TABLE IF NOT EXISTS spool_cursor (
    spool_id   text PRIMARY KEY,
    segment    bigint NOT NULL,
    "offset"   bigint NOT NULL,
    updated_at double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS applied_batches (
    batch_id   text PRIMARY KEY,
    spool_id   text NOT NULL,
    position   text NOT NULL,
    applied_at double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS rejected_batches (
    batch_id    text PRIMARY KEY,
    spool_id    text NOT NULL,
    position    text NOT NULL,
    reason      text NOT NULL,
    rejected_at double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS job_runs (
    id          bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    job         text NOT NULL,
    started_at  double precision NOT NULL,
    ended_at    double precision,
    outcome     text,
    figures     text,
    error       text,
    host        text
);
CREATE INDEX IF NOT EXISTS job_runs_job ON job_runs(job, started_at);
"""

#: SQL condition (row aliased ``m`` or bare) for rows the trigram index covers; a query must
#: repeat it for the planner to use the partial index.
TRIGRAM_SCOPE = (f"role IN {TRIGRAM_ROLES!r} AND content IS NOT NULL AND content <> ''")

#: The ordered migrations; index + 1 is the schema version it brings the store to.
MIGRATIONS: tuple[str, ...] = (_V1,)
SCHEMA_VERSION = len(MIGRATIONS)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def version(conn: PgConnection) -> int:
    """The store's schema version (0 before creation)."""
    if conn.execute("SELECT to_regclass('quill_meta')").fetchone()[0] is None:
        return 0
    row = conn.execute("SELECT value FROM quill_meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def create(conn: PgConnection) -> None:
    """Bring the store's schema (in the connection's current schema) to ``SCHEMA_VERSION``.

    Needs the ``pg_trgm`` extension (created if missing: it is a trusted extension from
    PostgreSQL 13). Raises ``CantOpenError`` for a store written by a newer Quill and the store
    error tree on failure (the migration transaction is then rolled back whole).
    """
    conn.execute(_MIGRATE_LOCK_SQL)
    try:
        current = version(conn)
        if current > SCHEMA_VERSION:
            raise CantOpenError(f"the PostgreSQL store has schema v{current}; this Quill knows up to v{SCHEMA_VERSION}")
        if current == SCHEMA_VERSION:
            return
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        trgm = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                            "WHERE e.extname = 'pg_trgm'").fetchone()[0]
        conn.execute("BEGIN IMMEDIATE")
        try:
            for step in MIGRATIONS[current:]:
                conn.raw.execute(step.format(s=_quote_ident(schema), trgm=_quote_ident(trgm),
                                             word_chars=WORD_INDEX_CHARS, trigram_chars=TRIGRAM_PREFIX_CHARS,
                                             trigram_scope=TRIGRAM_SCOPE).encode())
            conn.execute("INSERT INTO quill_meta(key, value) VALUES ('schema_version', ?) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION),))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        if not conn.closed:
            conn.execute(_UNLOCK_SQL)
