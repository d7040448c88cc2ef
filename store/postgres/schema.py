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
  the text, tool names and arguments, split on non-alphanumerics like FTS5's unicode61,
  bounded by ``store.postgres.words`` so no message can pass tsvector's 1 MB limit and be
  refused) and a ``pg_trgm`` GIN index over the first ``TRIGRAM_PREFIX_CHARS`` of
  user/assistant text (the same scope as SQLite's trigram table).
* SQLite's scalar ``max(a, b)``/``min(a, b)`` exist as functions, so the shared op appliers
  run unchanged.

One schema, one migration list for both backends: the tables are SQLite's DDL
(``store.schema.DDL``) and a store at version v is migrated with SQLite's own
``store.schema.MIGRATIONS[v]``, both translated into PostgreSQL's dialect by ``translate_ddl``
(a fixed list of type spellings); ``PG_DDL`` adds what only PostgreSQL has. The version is
``state_meta['schema_version']``. ``create`` migrates in one transaction under a session
advisory lock, so several hosts starting at once migrate exactly once, and it refuses a store
written by a newer Quill.
Functions are created schema-qualified (``SET search_path`` on each), so index expressions
still resolve when ``pg_restore`` runs with an empty search_path.
"""

from __future__ import annotations

import re

from quill.store import schema as sqlite_schema
from quill.store.errors import CantOpenError
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.extensions import extension_schema
from quill.store.postgres.words import (
    WORD_FALLBACK_CHARS,
    WORD_INDEX_CHARS,
    WORD_SAFE_CHARS,
    punct_to_space,
)
from quill.store.search.columns import TOOL_RESULT_ROLES, TRIGRAM_PREFIX_CHARS, TRIGRAM_ROLES

#: Advisory lock key (session level) held while migrating: hashtext('quill-migrate').
_MIGRATE_LOCK_SQL = (
    "SELECT pg_advisory_lock(hashtextextended('quill-migrate:' || current_schema(), 0))"
)
_UNLOCK_SQL = "SELECT pg_advisory_unlock(hashtextextended('quill-migrate:' || current_schema(), 0))"

#: PostgreSQL-only objects, created idempotently after the translated schema at every version
#: change: SQLite compatibility functions, the search functions and indexes, the per-spool
#: cursor and batch tables, autovacuum settings.
PG_DDL = """
CREATE OR REPLACE FUNCTION {s}.max(a bigint, b bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT greatest(a, b)';
CREATE OR REPLACE FUNCTION {s}.min(a bigint, b bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT least(a, b)';
CREATE OR REPLACE FUNCTION {s}.max(a double precision, b double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT greatest(a, b)';
CREATE OR REPLACE FUNCTION {s}.min(a double precision, b double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT least(a, b)';

-- The searchable text of a message: content plus tool-call names and arguments (as SQLite's
-- SEARCH_TEXT_SQL). Malformed tool_calls contribute nothing instead of failing the insert.
-- PARALLEL UNSAFE here and in every function with an EXCEPTION block or calling one: a block
-- starts a subtransaction, which PostgreSQL refuses in parallel mode ("cannot start
-- subtransactions during a parallel operation", SQLSTATE 25000).
CREATE OR REPLACE FUNCTION {s}.quill_search_text(content text, tool_calls text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL UNSAFE SET search_path = pg_catalog AS $$
DECLARE extra text;
BEGIN
    IF tool_calls IS NULL THEN RETURN coalesce(content, ''); END IF;
    BEGIN
        SELECT string_agg(coalesce(t->'function'->>'name', '') || ' '
                          || coalesce(t->'function'->>'arguments', ''), ' ')
          INTO extra FROM jsonb_array_elements(tool_calls::jsonb) AS t;
    EXCEPTION WHEN others THEN extra := NULL;
    END;
    RETURN coalesce(content, '') || coalesce(' ' || extra, '');
END $$;

-- Every ASCII punctuation character becomes a space before the parser sees the text, so
-- "src/main.py", "a@b.com" or "chat-send" are plain words as in FTS5's unicode61 (the default
-- parser would keep them as one file/email/hyphenated token); non-ASCII punctuation is
-- already a separator for the parser. Nested replace() is several times cheaper
-- than regexp_replace('[^[:alnum:]]+') here (bench/RESULTS.md).
CREATE OR REPLACE FUNCTION {s}.quill_words(content text, tool_calls text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL UNSAFE SET search_path = pg_catalog AS $$
    SELECT to_tsvector('simple'::regconfig, {punct_to_space})
$$;

-- The tool-call text of a message (search kind "tool", as SQLite's tools column): each call's
-- name and its arguments' string and number values, the arguments decoded once more when
-- they are a JSON text (OpenAI's "arguments"), so words after an escaped newline or inside
-- escaped quotes are words. Malformed JSON contributes nothing instead of failing the insert.
CREATE OR REPLACE FUNCTION {s}.quill_tool_text(tool_calls text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL UNSAFE SET search_path = pg_catalog AS $$
DECLARE t jsonb; args jsonb; out text := '';
BEGIN
    IF tool_calls IS NULL THEN RETURN ''; END IF;
    BEGIN
        FOR t IN SELECT * FROM jsonb_array_elements(tool_calls::jsonb) LOOP
            out := out || ' ' || coalesce(t->'function'->>'name', '');
            args := t->'function'->'arguments';
            IF jsonb_typeof(args) = 'string' THEN
                BEGIN
                    args := (args #>> '{{}}')::jsonb;
                EXCEPTION WHEN others THEN NULL;  -- not JSON: the string itself
                END;
            END IF;
            IF args IS NOT NULL THEN
                out := out || ' ' || coalesce((SELECT string_agg(v #>> '{{}}', ' ')
                                               FROM jsonb_path_query(args, 'strict $.**') AS v
                                               WHERE jsonb_typeof(v) IN ('string', 'number')), '');
            END IF;
        END LOOP;
    EXCEPTION WHEN others THEN RETURN '';
    END;
    RETURN out;
END $$;

-- The tool text of a message as SQLite's tools column holds it: a tool result's tool name
-- (tool_name on a tool/function row: searching "Bash" finds the calls and their results)
-- before the tool-call text.
CREATE OR REPLACE FUNCTION {s}.quill_tool_text(tool_calls text, role text, tool_name text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL UNSAFE SET search_path = pg_catalog AS $$
    SELECT CASE WHEN role IN {tool_result_roles} AND tool_name IS NOT NULL
                THEN tool_name || ' ' ELSE '' END
           || {s}.quill_tool_text(tool_calls)
$$;

-- Diacritics folded as FTS5's remove_diacritics does ("café" is found by "cafe"), with the
-- unaccent extension's own dictionary named explicitly: unaccent() is only STABLE because
-- its default dictionary follows search_path; with the dictionary fixed it is immutable.
-- (unaccent also expands ligatures: "straße" is found by "strasse", which FTS5 does not do.)
CREATE OR REPLACE FUNCTION {s}.quill_unaccent(t text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$
    SELECT {ua}.unaccent('{ua}.unaccent'::regdictionary, t)
$$;

-- The word index document: text, tool calls and reasoning as weights A, B and C, so a query
-- restricted to search kinds matches only their lexemes (tsquery 'word':AB). Each part is
-- capped at WORD_INDEX_CHARS. A tsvector must stay under 1 MB (else SQLSTATE 54000, and the
-- message could never be stored): up to WORD_SAFE_CHARS folded characters in all it provably
-- does (WORD_BYTES_PER_CHAR); above, the full document is tried and, past the limit, each part
-- is cut to WORD_FALLBACK_CHARS, which provably fits. The message itself is stored whole.
-- Layout 5 added role and tool_name: the older signature goes (its column went first).
DROP FUNCTION IF EXISTS {s}.quill_words(text, text, text);
CREATE OR REPLACE FUNCTION {s}.quill_words(
    content text, tool_calls text, reasoning text, role text, tool_name text)
RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL UNSAFE SET search_path = pg_catalog AS $$
DECLARE
    c text := {s}.quill_unaccent({punct_content});
    t text := {s}.quill_unaccent({punct_tools});
    r text := {s}.quill_unaccent({punct_reasoning});
BEGIN
    IF char_length(c) + char_length(t) + char_length(r) > {word_safe_chars} THEN
        BEGIN
            RETURN setweight(to_tsvector('simple'::regconfig, c), 'A')
                || setweight(to_tsvector('simple'::regconfig, t), 'B')
                || setweight(to_tsvector('simple'::regconfig, r), 'C');
        EXCEPTION WHEN program_limit_exceeded THEN
            c := left(c, {word_fallback_chars});
            t := left(t, {word_fallback_chars});
            r := left(r, {word_fallback_chars});
        END;
    END IF;
    RETURN setweight(to_tsvector('simple'::regconfig, c), 'A')
        || setweight(to_tsvector('simple'::regconfig, t), 'B')
        || setweight(to_tsvector('simple'::regconfig, r), 'C');
END $$;


-- Stored, not an index expression: a search recheck or filter reads the vector instead of
-- re-parsing the text (an expression index makes a rare-word search re-run the function on
-- every row the planner walks).
ALTER TABLE messages ADD COLUMN IF NOT EXISTS words tsvector
    GENERATED ALWAYS AS ({s}.quill_words(content, tool_calls, reasoning, role, tool_name)) STORED;
CREATE INDEX IF NOT EXISTS messages_words ON messages USING gin (words);
CREATE INDEX IF NOT EXISTS messages_trigram ON messages
    USING gin (left(content, {trigram_chars}) {trgm}.gin_trgm_ops)
    WHERE {trigram_scope};
-- Where a late op goes (store/apply/order.py ``gaps``): a session's last row not later than
-- an order key, in one probe wherever the gap is (the seq index would read every later row).
CREATE INDEX IF NOT EXISTS messages_ack ON messages (session_id, ack_us, ack_tag, ack_at, seq);
-- Delete-heavy retention: vacuum after 2 % dead rows, not the default 20 %.
ALTER TABLE messages SET (autovacuum_vacuum_scale_factor = 0.02,
                          autovacuum_analyze_scale_factor = 0.02);

CREATE TABLE IF NOT EXISTS spool_cursor (
    spool_id   text PRIMARY KEY,
    segment    bigint NOT NULL,
    "offset"   bigint NOT NULL,
    updated_at double precision NOT NULL
);
ALTER TABLE spool_cursor ADD COLUMN IF NOT EXISTS proof_offset bigint;
ALTER TABLE spool_cursor ADD COLUMN IF NOT EXISTS proof text;
-- One live holder per spool id (store/postgres/claims.py); times are the server's epoch s.
CREATE TABLE IF NOT EXISTS spool_claims (
    spool_id   text PRIMARY KEY,
    holder     text NOT NULL,
    host       text NOT NULL,
    path       text NOT NULL,
    pid        bigint,
    claimed_at double precision NOT NULL,
    deadline   double precision NOT NULL
);
-- The clamped acknowledgement time of the spool's last applied record (store/apply/order.py).
ALTER TABLE spool_cursor ADD COLUMN IF NOT EXISTS ack_us bigint;
CREATE TABLE IF NOT EXISTS applied_batches (
    batch_id   text PRIMARY KEY,
    spool_id   text NOT NULL,
    position   text NOT NULL,
    applied_at double precision NOT NULL
);
ALTER TABLE applied_batches ADD COLUMN IF NOT EXISTS digest text;
CREATE TABLE IF NOT EXISTS rejected_batches (
    batch_id    text PRIMARY KEY,
    spool_id    text NOT NULL,
    position    text NOT NULL,
    reason      text NOT NULL,
    rejected_at double precision NOT NULL
);
"""

_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.I | re.M)
#: Tables whose PostgreSQL shape differs from SQLite's (per-spool cursor, store-wide batch
#: ids recorded with their spool): the ones ``PG_DDL`` creates, skipped when translating.
_OWN_TABLES = frozenset(_CREATE_TABLE.findall(PG_DDL))


_TYPES = (
    (
        re.compile(r"\bINTEGER\s+PRIMARY\s+KEY\b", re.I),
        "bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    ),
    (re.compile(r"\bINTEGER\b", re.I), "bigint"),
    (re.compile(r"\bREAL\b", re.I), "double precision"),
    (re.compile(r"\bBLOB\b", re.I), "bytea"),
    (re.compile(r"\)\s*WITHOUT\s+ROWID", re.I), ")"),
    (re.compile(r"\s+REFERENCES\s+\w+\s*\(\w+\)", re.I), ""),
)  # SQLite runs with foreign_keys=OFF
_TABLE_NAME = re.compile(
    r"^\s*(?:--[^\n]*\n\s*)*"
    r"(?:CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS|ALTER\s+TABLE)\s+"
    r"(\w+)(?:\s+ON\s+(\w+))?",
    re.I,
)


def translate_ddl(ddl: str) -> str:
    """SQLite DDL (store/schema.py, its MIGRATIONS) in PostgreSQL's dialect: column types
    (INTEGER PRIMARY KEY → identity, INTEGER → bigint, REAL → double precision, BLOB →
    bytea), no WITHOUT ROWID, no REFERENCES; FTS5 virtual tables and the tables PostgreSQL
    defines its own way (``_OWN_TABLES``) are dropped. Statements end with ``;`` + newline."""
    out = []
    for stmt in re.split(r";\s*\n", ddl):
        body = stmt.strip()
        if not body or re.match(r"^(--[^\n]*\n\s*)*CREATE\s+VIRTUAL\s+TABLE", body, re.I):
            continue
        named = _TABLE_NAME.match(body)
        if named and (named.group(2) or named.group(1)) in _OWN_TABLES:
            continue
        for pattern, repl in _TYPES:
            body = pattern.sub(repl, body)
        out.append(body + ";")
    return "\n".join(out)


def _registry() -> dict[str, str]:
    """``{table: role}`` for every table the PostgreSQL schema creates (the translated SQLite
    ``DDL`` plus ``PG_DDL``), in the order of SQLite's registry (``store.schema.TABLES``),
    with its roles. Raises ``RuntimeError`` unless those are exactly SQLite's ordinary tables
    (``STORE_TABLES``): both backends hold the same tables, only their shapes may differ."""
    created = set(_CREATE_TABLE.findall(translate_ddl(sqlite_schema.DDL) + PG_DDL))
    if created != set(sqlite_schema.STORE_TABLES):
        raise RuntimeError(
            f"PostgreSQL tables {sorted(created)} differ from SQLite's "
            f"{sorted(sqlite_schema.STORE_TABLES)}"
        )
    return {t: sqlite_schema.TABLES[t] for t in sqlite_schema.STORE_TABLES}


#: Every table of a PostgreSQL store → its role (``store.schema.CANONICAL``/``BOOKKEEPING``;
#: no ``FTS`` tables: search indexes live on ``messages``), derived from the DDL it runs. The
#: maintenance jobs (ANALYZE, amcheck's ``verify_heapam``) and the size figures walk it.
TABLES: dict[str, str] = _registry()


#: SQL condition (row aliased ``m`` or bare) for rows the trigram index covers; a query must
#: repeat it for the planner to use the partial index.
TRIGRAM_SCOPE = f"role IN {TRIGRAM_ROLES!r} AND content IS NOT NULL AND content <> ''"

SCHEMA_VERSION = sqlite_schema.SCHEMA_VERSION
#: Version of what only PostgreSQL has (``PG_DDL``: search functions, the word index
#: document). A store whose ``state_meta['pg_layout']`` differs gets ``PG_DDL`` again at
#: open (idempotent; its ``words`` column is rebuilt: one rewrite of ``messages``).
#: 2: search kinds (weights) and reasoning; 3: diacritics folded (unaccent); 4: a word
#: document over tsvector's 1 MB limit falls back to a shorter prefix instead of failing;
#: 5: the order-key index ``messages_ack``; 6: a tool result's tool name is in its tool text
#: (``quill_tool_text(tool_calls, role, tool_name)``, a new word document).
PG_LAYOUT = "6"
#: The layout whose word document (``quill_words``) is today's: a store at it or later keeps
#: its ``words`` column through a migration (no rewrite of ``messages``).
WORDS_LAYOUT = 6


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def version(conn: PgConnection) -> int:
    """The store's schema version (0 before creation)."""
    if conn.execute("SELECT to_regclass('state_meta')").fetchone()[0] is None:
        return 0
    row = conn.execute("SELECT value FROM state_meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def _layout(conn: PgConnection) -> str | None:
    row = conn.execute("SELECT value FROM state_meta WHERE key = 'pg_layout'").fetchone()
    return row[0] if row else None


def create(conn: PgConnection) -> None:
    """Bring the store's schema (in the connection's current schema) to ``SCHEMA_VERSION``.

    Needs the ``pg_trgm`` and ``unaccent`` extensions (created if missing: both are trusted
    extensions from PostgreSQL 13). Raises ``CantOpenError`` for a store written by a newer
    Quill and the store error tree on failure (the migration transaction is then rolled back
    whole).
    """
    conn.execute(_MIGRATE_LOCK_SQL)
    try:
        current = version(conn)
        if current > SCHEMA_VERSION:
            raise CantOpenError(
                f"the PostgreSQL store has schema v{current}; "
                f"this Quill knows up to v{SCHEMA_VERSION}"
            )
        layout = _layout(conn) if current else None
        if current == SCHEMA_VERSION and layout == PG_LAYOUT:
            return
        trgm = extension_schema(conn, "pg_trgm")
        ua = extension_schema(conn, "unaccent")
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        conn.execute("BEGIN IMMEDIATE")
        try:
            steps = (
                [sqlite_schema.DDL]
                if current == 0
                else [sqlite_schema.MIGRATIONS[v] for v in range(current, SCHEMA_VERSION)]
            )  # none: layout only
            for step in steps:
                conn.execute_script(translate_ddl(step))
            words_kept = layout is not None and layout.isdigit() and int(layout) >= WORDS_LAYOUT
            if current and not words_kept:
                # an older layout's words column holds vectors of the old document
                conn.execute_script("ALTER TABLE messages DROP COLUMN IF EXISTS words")
            punct = punct_to_space(
                f"left({_quote_ident(schema)}.quill_search_text(content, tool_calls), "
                f"{WORD_INDEX_CHARS})"
            )
            parts = {
                name: punct_to_space(f"left({expr}, {WORD_INDEX_CHARS})")
                for name, expr in (
                    ("punct_content", "coalesce(content, '')"),
                    (
                        "punct_tools",
                        f"{_quote_ident(schema)}.quill_tool_text(tool_calls, role, tool_name)",
                    ),
                    ("punct_reasoning", "coalesce(reasoning, '')"),
                )
            }
            conn.execute_script(
                PG_DDL.format(
                    s=_quote_ident(schema),
                    trgm=_quote_ident(trgm),
                    ua=_quote_ident(ua),
                    punct_to_space=punct,
                    **parts,
                    word_chars=WORD_INDEX_CHARS,
                    word_safe_chars=WORD_SAFE_CHARS,
                    word_fallback_chars=WORD_FALLBACK_CHARS,
                    trigram_chars=TRIGRAM_PREFIX_CHARS,
                    trigram_scope=TRIGRAM_SCOPE,
                    tool_result_roles=repr(TOOL_RESULT_ROLES),
                )
            )
            conn.execute(
                "INSERT INTO state_meta(key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
            conn.execute(
                "INSERT INTO state_meta(key, value) VALUES ('pg_layout', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (PG_LAYOUT,),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        if not conn.closed:
            conn.execute(_UNLOCK_SQL)
