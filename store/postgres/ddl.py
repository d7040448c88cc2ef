"""The PostgreSQL-only objects of a store (``PG_DDL``): SQLite compatibility functions, the
search functions and indexes, the per-spool cursor and batch tables, autovacuum settings.
``store/postgres/schema.py`` formats it (schema and extension names, index limits) and runs
it after the translated SQLite schema at every version or layout change."""

from __future__ import annotations

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

-- Every text a substring search looks in (text, tool text, reasoning), one per line: the
-- expression of the trigram index over the rows messages_trigram does not wholly cover
-- (store/postgres/scan_index.py). Each text is a substring of it and ILIKE lowercases one
-- character at a time, so a row whose text, tool text or reasoning holds a term ILIKE finds
-- holds it here too: the index finds a superset, which the per-text tests make exact.
-- COST: one call decodes the tool calls (~0.1-0.3 ms, thousands of operators), and the index's
-- recheck calls it on every row its bitmap holds; priced so, the planner ANDs the bitmap with
-- the primary key's id window (a scan reads a window) instead of rechecking every match of
-- the table and filtering the window after.
CREATE OR REPLACE FUNCTION {s}.quill_scan_text(
    content text, tool_calls text, reasoning text, role text, tool_name text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL UNSAFE COST 10000 SET search_path = pg_catalog AS $$
    SELECT concat_ws(E'\n', content, {s}.quill_tool_text(tool_calls, role, tool_name), reasoning)
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
-- Every row names its batch (store/apply/batches.py); SQLite's ADD COLUMN cannot say so.
ALTER TABLE messages ALTER COLUMN batch SET NOT NULL;
CREATE INDEX IF NOT EXISTS messages_trigram ON messages
    USING gin (left(content, {trigram_chars}) {trgm}.gin_trgm_ops)
    WHERE {trigram_scope};
-- A GIN index keeps new rows' entries in a pending list that every search through the index
-- reads whole; only VACUUM, autovacuum's ANALYZE or a full list merges it into the tree. At
-- the default limit (4 MB) a store the writer fills carries up to 512 pending pages: a rare
-- word's index scan read 428 of them, 0.04 -> 1.8 ms (bench/RESULTS.md). At 512 kB a scan
-- reads at most 64; the writer merges eight times as often (measured +12-33 % per insert).
ALTER INDEX messages_words SET (gin_pending_list_limit = {gin_pending_kb});
ALTER INDEX messages_trigram SET (gin_pending_list_limit = {gin_pending_kb});
-- The order-key index messages_ack is not here: on a store with rows it is built without
-- blocking writers, outside this transaction (store/postgres/order_index.py); so is the
-- substring index messages_scan (store/postgres/scan_index.py).
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
