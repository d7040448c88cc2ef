"""The PostgreSQL extensions a store needs (``pg_trgm``, ``unaccent``, ``amcheck``): where
they live (``EXTENSION_SCHEMA``, shared by every store of the database) and their creation.
"""

from __future__ import annotations

from quill.store.postgres.connection import PgConnection

#: Where Quill creates the extensions it needs. Extensions are database-wide, but CREATE
#: EXTENSION puts their objects in the current schema: in a store's own schema, dropping that
#: store (DROP SCHEMA … CASCADE) would drop them under every other store of the database.
EXTENSION_SCHEMA = "quill_ext"
_EXT_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended('quill-extensions', 0))"


def extension_schema(conn: PgConnection, name: str) -> str:
    """The schema holding extension ``name``, creating it in ``EXTENSION_SCHEMA`` if the
    database lacks it (an extension installed elsewhere before is used where it is).

    Concurrent first opens of stores in one database serialize on a database-wide advisory
    lock (two ``CREATE EXTENSION IF NOT EXISTS`` at once can fail on the catalog's unique
    index). Raises the store error tree (e.g. a role that may not create the extension)."""
    find = (
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = ?"
    )
    row = conn.execute(find, (name,)).fetchone()
    if row:
        return row[0]
    conn.execute("BEGIN")
    try:
        conn.execute(_EXT_LOCK_SQL)
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{EXTENSION_SCHEMA}"')
        conn.execute(f'CREATE EXTENSION IF NOT EXISTS {name} SCHEMA "{EXTENSION_SCHEMA}"')
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return conn.execute(find, (name,)).fetchone()[0]
