"""The PostgreSQL-only layout (``store.postgres.schema.PG_LAYOUT``): a store written with the
previous word index (one document per message, no reasoning, no kinds, no diacritic
folding) is brought to the current one when it is opened, and its existing rows become
searchable by kind and without diacritics. Real server."""

from __future__ import annotations

import psycopg
from semantics_helpers import Store, assistant, call, tool, user

from quill.store.postgres import order_index
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.schema import PG_LAYOUT, WORDS_LAYOUT


def test_a_store_with_the_old_word_index_is_rebuilt_on_open_and_finds_reasoning(
    tmp_path, pg_store_url
):
    s = Store(tmp_path, pg_store_url)
    s.close()
    with psycopg.connect(
        pg_store_url, autocommit=True
    ) as conn:  # back to layout 1, as an older Quill left it
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        conn.execute("ALTER TABLE messages DROP COLUMN words")
        conn.execute(
            f"ALTER TABLE messages ADD COLUMN words tsvector GENERATED ALWAYS AS "
            f'("{schema}".quill_words(content, tool_calls)) STORED'
        )
        conn.execute("CREATE INDEX messages_words ON messages USING gin (words)")
        conn.execute("DELETE FROM state_meta WHERE key = 'pg_layout'")
        conn.execute(
            "INSERT INTO sessions (id, source, created_at, started_at) VALUES ('old', 'cli', 1, 1)"
        )
        conn.execute("INSERT INTO batches (batch_id) VALUES ('b-old')")
        conn.execute(
            "INSERT INTO messages "
            "(session_id, role, content, reasoning, arrived_at, batch, state) "
            "VALUES ('old', 'assistant', 'the answer at the café', 'pondering quaggas', 1, "
            "(SELECT id FROM batches WHERE batch_id = 'b-old'), 'live')"
        )
    s = Store(tmp_path, pg_store_url)  # opening migrates the layout
    try:
        s.apply(
            "messages.append",
            {
                "session_id": "new",
                "messages": [
                    user("question about zebras"),
                    assistant("zebras answer", reasoning="more quaggas"),
                ],
            },
        )
        with s.reader() as r:
            assert sorted(h["session_id"] for h in r.search("quaggas")) == ["new", "old"]
            assert {h["matched_in"] for h in r.search("quaggas")} == {"reasoning"}
            assert r.search("quaggas", kinds=["text", "tool"]) == []
            assert [h["role"] for h in r.search("zebras", kinds=["text"], session_id="new")] == [
                "assistant",
                "user",
            ]
            assert [h["session_id"] for h in r.search("pondering")] == ["old"]
            assert [h["session_id"] for h in r.search("cafe")] == [
                "old"
            ]  # diacritics folded (layout 3)
        layout = s.conn.execute("SELECT value FROM state_meta WHERE key = 'pg_layout'").fetchone()[
            0
        ]
        assert layout == PG_LAYOUT
    finally:
        s.close()


def test_dropping_one_stores_schema_leaves_the_others_search_working(tmp_path, pg_schemas):
    """Extensions are database-wide but live in a schema: created in the first store's own
    schema, a DROP SCHEMA … CASCADE of that store took unaccent/pg_trgm away from every other
    store in the database (seen as 'schema t_… does not exist' in another store's search)."""
    first, second = pg_schemas(), pg_schemas()
    stores = [Store(tmp_path / "a", first), Store(tmp_path / "b", second)]
    try:
        for s in stores:
            s.apply("messages.append", {"session_id": "s", "messages": [user("the café opens")]})
    finally:
        for s in stores:
            s.close()
    with psycopg.connect(first, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        where = {
            r[0]: r[1]
            for r in conn.execute(
                "SELECT e.extname, n.nspname FROM pg_extension e "
                "JOIN pg_namespace n ON n.oid = e.extnamespace"
            )
        }
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert schema not in where.values()
    s = Store(tmp_path / "b", second)
    try:
        with s.reader() as r:
            assert [h["session_id"] for h in r.search("cafe")] == ["s"]
    finally:
        s.close()


def test_a_layout_4_store_gains_the_order_key_index_and_the_current_word_document(
    tmp_path, pg_store_url
):
    """Layout 5 adds ``messages_ack`` (late ops: store/apply/order.py ``gaps``); layout 6 puts a
    tool result's tool name into the word document. A store at layout 4 gets the word document
    on open (its ``words`` column is rebuilt: it is older than ``WORDS_LAYOUT``) and the index
    from ``order_index.ensure``, outside the migration (a writer runs it concurrently)."""
    s = Store(tmp_path, pg_store_url)
    s.apply("messages.append", {"session_id": "s", "messages": [user("zebras at dawn")]})
    s.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                assistant(None, tool_calls=[call("c1", "Gazelle", "{}")]),
                tool("c1", "ok", name="Gazelle"),
            ],
        },
    )
    s.close()
    column = (
        "SELECT attnum FROM pg_attribute WHERE attrelid = 'messages'::regclass AND attname = %s"
    )
    assert WORDS_LAYOUT > 4
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        conn.execute("DROP INDEX messages_ack")
        conn.execute("UPDATE state_meta SET value = '4' WHERE key = 'pg_layout'")
        words_at = conn.execute(column, ("words",)).fetchone()[0]
    s = Store(tmp_path, pg_store_url)  # opening migrates the layout
    try:
        with s.reader() as r:
            assert [h["session_id"] for h in r.search("zebras")] == ["s"]
            assert sorted(h["role"] for h in r.search("Gazelle")) == ["assistant", "tool"]
    finally:
        s.close()
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        assert conn.execute(column, ("words",)).fetchone()[0] != words_at  # rebuilt
        # not in the migration's transaction: on a store with rows a writer builds it
        # concurrently (tests/test_pg_order_index.py)
        assert conn.execute("SELECT to_regclass('messages_ack')").fetchone()[0] is None
    built = PgConnection(pg_store_url)
    try:
        assert order_index.ensure(built)["outcome"] == "built"
    finally:
        built.close()
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('messages_ack')").fetchone()[0] is not None
        layout = conn.execute("SELECT value FROM state_meta WHERE key = 'pg_layout'").fetchone()
        assert layout == (PG_LAYOUT,)
