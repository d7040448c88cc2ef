"""The table registry (``store.schema.TABLES``): derived from the CREATE statements, so a table
added to the schema is registered (as canonical: its damage halts) without being named
elsewhere; and the per-session tables it lists are all emptied of a deleted session on both
backends (a table added with a ``session_id`` column and forgotten by ``sessions.delete``
fails here)."""

from __future__ import annotations

import pytest
from semantics_helpers import Store

from quill.store import schema


def test_registry_roles_come_from_the_ddl():
    ddl = schema.DDL + "\nCREATE TABLE IF NOT EXISTS later_table (id INTEGER PRIMARY KEY);\n"
    found = schema._registry(ddl)
    assert found["later_table"] == schema.CANONICAL
    assert list(found)[:-1] == list(schema.TABLES)
    fts = {t for t, r in schema.TABLES.items() if r == schema.FTS}
    assert fts == {"messages_fts", "messages_trigram"}
    assert len(schema.STORE_TABLES) == 15 and not set(schema.STORE_TABLES) & set(schema.FTS_TABLES)


def test_registry_refuses_a_missing_bookkeeping_table_and_an_fts_prefixed_table():
    with pytest.raises(RuntimeError, match="spool_cursor"):
        schema._registry(schema.DDL.replace("EXISTS spool_cursor", "EXISTS cursor2"))
    with pytest.raises(RuntimeError, match="messages_fts_extra"):
        schema._registry(schema.DDL + "\nCREATE TABLE IF NOT EXISTS messages_fts_extra (x TEXT);\n")


def _session_columns(store: Store) -> dict[str, str]:
    """``{table: column}`` for each registry table with a column naming a session."""
    out = {}
    for table in schema.STORE_TABLES:
        if store.kind == "postgres":
            cols = [
                r[0]
                for r in store.conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = ?",
                    (table,),
                ).fetchall()
            ]
        else:
            cols = [r[1] for r in store.conn.execute(f"PRAGMA table_info({table})").fetchall()]
        if table == "sessions":
            out[table] = "id"
        elif "session_id" in cols:
            out[table] = "session_id"
    return out


def test_a_deleted_session_leaves_no_row_in_any_per_session_table(tmp_path, backend):
    store = Store(tmp_path, backend)
    try:
        for sid in ("gone", "kept"):
            store.apply(
                "session.create",
                {
                    "session_id": sid,
                    "system_prompt": f"prompt of {sid}",
                    "tools": [{"name": f"tool-{sid}"}],
                },
            )
            usage = {"prompt_tokens": 2, "completion_tokens": 1}
            assert (
                store.apply(
                    "messages.append",
                    {
                        "session_id": sid,
                        "messages": [{"role": "assistant", "content": "hi", "usage": usage}],
                    },
                )
                == []
            )
        columns = _session_columns(store)
        per_session = {"sessions", "messages", "usage", "session_context", "session_deletions"}
        assert per_session <= set(columns)

        def rows(sid: str) -> dict[str, int]:
            return {
                t: store.conn.execute(f"SELECT count(*) FROM {t} WHERE {c} = ?", (sid,)).fetchone()[
                    0
                ]
                for t, c in columns.items()
                if t != "session_deletions"
            }

        assert all(rows("gone").values())  # every per-session table holds rows of it
        assert store.apply("sessions.delete", {"session_ids": ["gone"]}) == []
        assert rows("gone") == dict.fromkeys(rows("gone"), 0)
        assert all(rows("kept").values())
        assert (
            store.conn.execute(
                "SELECT deletions FROM session_deletions WHERE session_id = ?", ("gone",)
            ).fetchone()[0]
            == 1
        )
    finally:
        store.backend.close()
