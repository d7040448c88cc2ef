"""Schema of ``state.db`` (v2: v1 + content-addressed blobs; v3: + usage, session keys and
placeholders; v4: + session_context; v12: batch ids stored once), its creation and migrations.

Rules the schema encodes (docs/architecture.md, "The store"; the measured facts it cites):
* ``messages.state`` is the single visibility state; rewinds and compactions flip it, never
  DELETE rows.
* FTS5 is *contentless* and filled in bulk per slice by the indexer, never by per-row
  triggers (per-row FTS triggers cost most of the insert time; a bulk ``INSERT … SELECT`` per
  chunk is faster). ``state_meta['fts_indexed_upto']`` is the highest message id indexed;
  search scans the small tail above it. ``contentless_delete=1`` lets prune delete by rowid.
* ``spool_cursor`` is written in the same transaction as the rows it covers.
* A second, trigram FTS5 table serves substring and CJK search. Its cost (a full
  trigram index slows ingest and more than doubles the file) makes it *scoped*: only
  ``user``/``assistant`` rows, only their text ``content``, only its first
  ``TRIGRAM_PREFIX_CHARS`` characters — except a text stored packed (``store.packed``), held
  whole whatever its role, so a search never unpacks a row only to reject it
  (``store.search.columns``; +95 B/msg on the synthetic store, bench/RESULTS.md). It is
  filled by the same bulk slices, under the same watermark, as ``messages_fts``. It keeps no
  positions (``detail=none``, layout 3: a sixth of the bytes of ``detail=full``,
  bench/disk.py): it finds the rows holding a term's trigrams, and search keeps those whose
  indexed text holds the term (store/search/candidates.py).
* ``messages.origin_id`` is explicit copy lineage written at copy time: a row copied by a
  compaction (carried tail, re-sequenced late rows, verbatim re-sent messages) points at the
  row it copies (always the first original, never a copy). ``messages.pos`` (the original's
  ``seq``) is the row's display position; the display projection keeps one row per position.
* ``messages.seq`` is transcript order within a session (by acknowledgement time, then spool
  position: store/apply/order.py); ids are arrival order, unique, never reused.
* Titles are unique among titled sessions (partial unique index; NULL = untitled).
* ``sessions.placeholder`` = 1 marks a row made by an op that arrived before the session's
  ``session.create``; the create completes it (its fields win) and clears the mark.
* Usage rows (store/apply/usage.py): one per model call, ``response_id`` unique (counted once).
"""

from __future__ import annotations

import re

import apsw

from quill.store.apply import batches, blobs, context, order, usage

SCHEMA_VERSION = 12

#: v11: the proof of a session owner's identity (``owner.boot_id``, ``owner.start_ticks``:
#: ``quill.home.process_identity``), so the orphan sweep tells a live owner from a dead one
#: exactly — the same boot, the same start tick — and leaves alone an owner of another boot
#: that shares the host name (a cloned machine), which it cannot check (``jobs.prune``).
OWNER_PROOF = """
ALTER TABLE sessions ADD COLUMN owner_boot TEXT;
ALTER TABLE sessions ADD COLUMN owner_ticks INTEGER;
"""

#: v5: each applied batch keeps the digest of its op and data, so a batch id reused with other
#: content is told from a retry (store/apply/chunk.py). NULL for batches applied before v5.
BATCH_DIGEST = """
ALTER TABLE applied_batches ADD COLUMN digest TEXT;
"""

#: v6: how many times each session id was deleted (``sessions.delete``, store/apply/deletes.py).
#: An importer's batch ids are derived from what it imports (ops/ingest.stable_batch_id), so a
#: session deleted and then imported again from the same file would get the ids its deleted
#: batches hold in ``applied_batches`` and be dropped as duplicates; the importer adds this
#: count to its ids (ops/transfer/import_spool.py). Written by ops only, so a rebuild has the
#: same rows.
SESSION_DELETIONS = """
CREATE TABLE IF NOT EXISTS session_deletions (
    session_id TEXT PRIMARY KEY,
    deletions  INTEGER NOT NULL
);
"""

#: v7: the proof kept with the spool cursor (``spool.cursor_proof``: where the last applied
#: entry starts and its digest; NULL for cursors written before v7), checked before a writer
#: resumes; and the claims of spool ids by live holders (``store.postgres.claims``). One
#: writer per file on SQLite, so ``spool_claims`` stays empty there; it exists on both
#: backends because both hold the same tables.
SPOOL_IDENTITY = """
ALTER TABLE spool_cursor ADD COLUMN proof_offset INTEGER;
ALTER TABLE spool_cursor ADD COLUMN proof TEXT;
CREATE TABLE IF NOT EXISTS spool_claims (
    spool_id   TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    host       TEXT NOT NULL,
    path       TEXT NOT NULL,
    pid        INTEGER,
    claimed_at REAL NOT NULL,
    deadline   REAL NOT NULL
);
"""

#: Cluster leadership (``store.postgres.election``): one row per role (``scheduler``), held by
#: the process named in ``holder`` until ``expires_at``. Times are the database server's clock
#: (epoch s), so hosts' clocks never compare with each other; ``term`` grows by one at every
#: change of holder. Used on a shared PostgreSQL store only (on SQLite one data dir's
#: scheduler lease decides); the table exists on both so both hold the same tables.
LEADER_LEASE = """
CREATE TABLE IF NOT EXISTS leader_lease (
    role        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,       -- host:pid:random token of the holding process
    term        INTEGER NOT NULL,
    acquired_at REAL NOT NULL,
    renewed_at  REAL NOT NULL,
    expires_at  REAL NOT NULL
) WITHOUT ROWID;
"""

#: The search indexes: derived data, rebuilt from ``messages`` when damaged (fts_repair.py).
FTS_DDL = """
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, tools, reasoning, content='', contentless_delete=1,
    tokenize='unicode61 remove_diacritics 2'
);

CREATE VIRTUAL TABLE IF NOT EXISTS messages_trigram USING fts5(
    text, content='', contentless_delete=1, detail=none, tokenize='trigram case_sensitive 0'
);
"""

#: v10: a listing's per-session figures from indexes alone (``store.read.listing``): the
#: latest message time (the ordering key, read for every session) and the counts by state.
#: Read from the rows they would walk a large message's overflow pages (``ts`` and ``state``
#: are stored after ``content``), so one 50 MB message would slow every listing.
MESSAGES_SESSION_TS = """
CREATE INDEX IF NOT EXISTS messages_session_ts ON messages(session_id, ts);
CREATE INDEX IF NOT EXISTS messages_session_state
    ON messages(session_id, pos, state, seq);
"""

DDL = (
    FTS_DDL
    + """
CREATE TABLE IF NOT EXISTS state_meta (
    key   TEXT PRIMARY KEY,
    value TEXT
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS sessions (
    id           TEXT PRIMARY KEY,
    source       TEXT,
    model        TEXT,
    title        TEXT,
    cwd          TEXT,
    parent_id    TEXT,
    parent_kind  TEXT CHECK (parent_kind IN ('compression','branch','reset','delegate')),
    started_at   REAL,
    ended_at     REAL,
    end_reason   TEXT,
    archived     INTEGER NOT NULL DEFAULT 0,
    pinned       INTEGER NOT NULL DEFAULT 0,
    hidden       INTEGER NOT NULL DEFAULT 0,
    last_read_id INTEGER,
    owner_host   TEXT,           -- the producing process, for the orphan sweep:
    owner_pid    INTEGER,        --   host name, pid and psutil create_time (epoch s), so a
    owner_started REAL,          --   recycled pid is never taken for the live owner
    meta         TEXT,           -- JSON object: anything else the producer sent
    created_at   REAL NOT NULL   -- arrival time of the first op for this session
    -- v3 adds key (conversation identity) and placeholder (1 until session.create): usage.MIGRATION
);
CREATE INDEX IF NOT EXISTS sessions_started ON sessions(started_at);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_id);
CREATE UNIQUE INDEX IF NOT EXISTS sessions_title ON sessions(title) WHERE title IS NOT NULL;

CREATE TABLE IF NOT EXISTS messages (
    id            INTEGER PRIMARY KEY,   -- insertion order is transcript order
    session_id    TEXT NOT NULL REFERENCES sessions(id),
    ext_id        TEXT,                  -- producer's message id: idempotency within a session
    role          TEXT NOT NULL,
    content       TEXT,                  -- text (for structured content: its text parts joined)
    parts         TEXT,                  -- JSON array when content was structured parts
    tool_calls    TEXT,                  -- JSON array, encoded exactly once
    tool_call_id  TEXT,
    tool_name     TEXT,
    reasoning     TEXT,
    finish_reason TEXT,
    ts            REAL,                  -- producer timestamp (epoch seconds), sanitised
    arrived_at    REAL NOT NULL,
    extra         TEXT,                  -- JSON object: unknown fields, verbatim
    state         TEXT NOT NULL DEFAULT 'live'
                  CHECK (state IN ('live','compacted','superseded','rewound')),
    batch_id      TEXT NOT NULL,         -- v12: messages.batch, a number (batches.MIGRATION)
    origin_id     INTEGER                -- the row this one is a copy of (compaction), else NULL
);
CREATE INDEX IF NOT EXISTS messages_session ON messages(session_id, id);
-- Not UNIQUE: a compaction may re-insert a carried message under its producer id.
-- messages.append skips ids the session already holds (idempotent re-import).
CREATE INDEX IF NOT EXISTS messages_ext
    ON messages(session_id, ext_id) WHERE ext_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_tool_result
    ON messages(session_id, tool_call_id) WHERE tool_call_id IS NOT NULL;


CREATE TABLE IF NOT EXISTS spool_cursor (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    segment    INTEGER NOT NULL,
    "offset"   INTEGER NOT NULL,
    updated_at REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS applied_batches (
    batch_id   TEXT PRIMARY KEY,
    position   TEXT NOT NULL,
    applied_at REAL NOT NULL
) WITHOUT ROWID;

-- Batches the writer refused (quarantined) for their data: decided, like applied ones, so a
-- replay never applies them against a later state. "unsupported-op" is not recorded here:
-- a newer Quill may apply it on replay.
CREATE TABLE IF NOT EXISTS rejected_batches (
    batch_id    TEXT PRIMARY KEY,
    position    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    rejected_at REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS job_runs (
    id          INTEGER PRIMARY KEY,
    job         TEXT NOT NULL,
    started_at  REAL NOT NULL,
    ended_at    REAL,
    outcome     TEXT,            -- ok | error
    figures     TEXT,            -- JSON object (rows pruned, bytes freed, WAL bytes ...)
    error       TEXT
);
CREATE INDEX IF NOT EXISTS job_runs_job ON job_runs(job, started_at);
"""
    + blobs.DDL
    + usage.MIGRATION
    + context.DDL
    + BATCH_DIGEST
    + SESSION_DELETIONS
    + SPOOL_IDENTITY
    + LEADER_LEASE
    + order.MIGRATION
    + MESSAGES_SESSION_TS
    + OWNER_PROOF
    + batches.MIGRATION
)

#: Roles of the store's tables (``TABLES``), which decide what damage to a table means:
#: * ``CANONICAL``: the transcripts themselves (sessions, messages, blobs, usage, context,
#:   deletion counts), written only by applying spool ops; damage halts the writer.
#: * ``BOOKKEEPING``: the writer's and the jobs' own records (the spool cursor, batch
#:   decisions, job runs, ``state_meta``); replay is exact only while they are intact, so
#:   damage halts the writer too.
#: * ``FTS``: the FTS5 search indexes (with their shadow tables ``<name>_data`` …), derived
#:   from ``messages``; damage confined to them detaches and rebuilds them (fts_repair.py).
CANONICAL, BOOKKEEPING, FTS = "canonical", "bookkeeping", "fts"

#: The tables that are bookkeeping; every other ordinary table of ``DDL`` is canonical, so a
#: table added to ``DDL`` is canonical (its damage halts) without being named anywhere else.
_BOOKKEEPING = frozenset(
    {
        "state_meta",
        "spool_cursor",
        "applied_batches",
        "rejected_batches",
        "job_runs",
        "spool_claims",
        "leader_lease",
    }
)

_CREATE_TABLE = re.compile(
    r"^\s*CREATE\s+(VIRTUAL\s+)?TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.I | re.M
)


def _registry(ddl: str) -> dict[str, str]:
    """``{table: role}`` for every ``CREATE [VIRTUAL] TABLE`` of ``ddl``, in ``ddl`` order:
    virtual tables are ``FTS``, the ``_BOOKKEEPING`` ones ``BOOKKEEPING``, the rest
    ``CANONICAL``. Raises ``RuntimeError`` when ``_BOOKKEEPING`` names a table ``ddl`` lacks
    (a renamed table must not silently turn canonical) or a table's name starts with an FTS
    table's name and ``_``."""
    found = {
        name: FTS if virtual else BOOKKEEPING if name in _BOOKKEEPING else CANONICAL
        for virtual, name in _CREATE_TABLE.findall(ddl)
    }
    if _BOOKKEEPING - found.keys():
        missing = sorted(_BOOKKEEPING - found.keys())
        raise RuntimeError(f"bookkeeping tables missing from the schema: {missing}")
    # fts_repair.rebuild may discard an FTS table's objects by name (``<fts>_*``): no other
    # table may share that prefix, or a rebuild would discard it too.
    fts = [t for t, role in found.items() if role == FTS]
    clash = [t for t in found if any(t.startswith(f + "_") for f in fts)]
    if clash:
        raise RuntimeError(f"tables named like an FTS table's shadow tables: {clash}")
    return found


#: Every table of the current schema → its role (``CANONICAL``, ``BOOKKEEPING``, ``FTS``),
#: derived from ``DDL``: the one registry every table list in Quill is taken from.
TABLES: dict[str, str] = _registry(DDL)
#: The FTS5 search indexes (virtual tables), in ``DDL`` order.
FTS_TABLES: tuple[str, ...] = tuple(t for t, role in TABLES.items() if role == FTS)
#: The ordinary tables (canonical and bookkeeping): every table but the search indexes.
#: Damage in any of them halts the writer; each is a heap of the PostgreSQL store as well.
STORE_TABLES: tuple[str, ...] = tuple(t for t, role in TABLES.items() if role != FTS)

#: Migrations: ``MIGRATIONS[v]`` takes a store from schema v to v + 1 (run in one transaction).
MIGRATIONS: dict[int, str] = {
    1: blobs.DDL,  # v2: content-addressed blobs (store/apply/blobs.py)
    # v3: usage rows, sessions.key and sessions.placeholder (store/apply/usage.py)
    2: usage.MIGRATION,
    # v4: system prompts and tool arrays referenced by sessions (store/apply/context.py)
    3: context.DDL,
    4: BATCH_DIGEST,  # v5: the content digest a batch was applied with (store.apply.op_digest)
    5: SESSION_DELETIONS,  # v6: deletions per session id (re-import after a delete)
    6: SPOOL_IDENTITY,  # v7: the cursor's proof and the spool id claims
    7: LEADER_LEASE,  # v8: cluster leadership with an expiry (store.postgres.election)
    8: order.MIGRATION,  # v9: transcript order by acknowledgement (store/apply/order.py)
    9: MESSAGES_SESSION_TS,  # v10: a listing's per-session figures from indexes
    10: OWNER_PROOF,  # v11: the owner's boot id and start ticks (the orphan sweep's proof)
    11: batches.MIGRATION,  # v12: messages.batch numbers batch ids; messages_pos goes
}

#: Version of the index layout (columns, tokenizers, the expressions above). The indexes are
#: derived data: a store whose ``state_meta['fts_layout']`` differs is re-indexed from
#: ``messages`` when the writer opens it (``ensure_fts_layout``), and readers treat its
#: indexes as stale until then. Independent of ``SCHEMA_VERSION`` (no canonical row changes).
FTS_LAYOUT = "5"  # 5: a packed text whole in messages_trigram, whatever its role


def create(conn: apsw.Connection) -> None:
    """Create the current schema on an empty database, migrate an older one step by step
    (``MIGRATIONS``), or accept a current one.

    Raises ``RuntimeError`` for a database written by a newer schema version.
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RuntimeError(
            f"state.db has schema v{version}; this Quill knows up to v{SCHEMA_VERSION}"
        )
    if version == SCHEMA_VERSION:
        ensure_fts_layout(conn)
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if version == 0:
            conn.execute(DDL)
            conn.execute(
                "INSERT OR REPLACE INTO state_meta(key, value) VALUES ('fts_layout', ?)",
                (FTS_LAYOUT,),
            )
        else:
            for step in range(version, SCHEMA_VERSION):
                conn.execute(MIGRATIONS[step])
        conn.execute(
            "INSERT OR IGNORE INTO state_meta(key, value) VALUES ('fts_indexed_upto', '0')"
        )
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    ensure_fts_layout(conn)  # a migrated store keeps its old indexes until re-created here


def fts_layout(conn: apsw.Connection) -> str | None:
    """The index layout a store's FTS tables were built with (None: before layouts were named)."""
    row = conn.execute("SELECT value FROM state_meta WHERE key = 'fts_layout'").fetchone()
    return row[0] if row else None


def ensure_fts_layout(conn: apsw.Connection) -> bool:
    """Re-create the FTS tables empty (watermark 0) when they were built with another layout;
    the writer's indexer then refills them and search scans the unindexed rows meanwhile.
    Returns True when it re-created them. Writer connections only."""
    if fts_layout(conn) == FTS_LAYOUT:
        return False
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table in FTS_TABLES:  # names from the registry, derived from FTS_DDL
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(FTS_DDL)
        conn.execute("UPDATE state_meta SET value = '0' WHERE key = 'fts_indexed_upto'")
        conn.execute(
            "INSERT OR REPLACE INTO state_meta(key, value) VALUES ('fts_layout', ?)", (FTS_LAYOUT,)
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return True
