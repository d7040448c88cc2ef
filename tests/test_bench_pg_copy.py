"""``bench.pg_copy load`` copies an SQLite store into a PostgreSQL schema for the search
benchmark: a message text the SQLite store keeps packed (a Zstandard BLOB, ``store.packed``)
arrives as its text, so both backends search the same texts. Before, the BLOB was copied as
the text (``\\x28b52ffd…``): the copy's word search missed every packed message and the
benchmark compared different hits."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from semantics_helpers import Store, user

from quill.bench import pg_copy
from quill.spool import Spool
from quill.store.factory import open_url

LONG = " ".join(f"line {i} of the build log with a quokka" for i in range(200))


@pytest.fixture
def schema(request):
    from run_resources import require

    pg_url = require(request, "postgres")["url"]
    name = "t_" + uuid.uuid4().hex[:12]
    yield pg_url, name
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_a_packed_text_is_copied_as_its_text(tmp_path, schema):
    pg_url, name = schema
    s = Store.__new__(Store)
    s.root, s.spool = tmp_path, Spool(tmp_path / "spool")
    s.backend = open_url(None, tmp_path / "state.db", "test-spool", pack_min_bytes=0)
    s.kind, s.conn = s.backend.kind, s.backend.conn
    msgs = [user(LONG, id="u1", timestamp=1_700_000_000), user("short", id="u2")]
    assert s.apply("messages.append", {"session_id": "s1", "messages": msgs}) == []
    assert s.conn.execute("SELECT typeof(content) FROM messages ORDER BY id").fetchall() == [
        ("blob",),
        ("blob",),
    ]  # packed in the SQLite file
    s.close()
    pg_copy.load(tmp_path / "state.db", pg_url, name)
    url = pg_copy._url(pg_url, name)
    with psycopg.connect(url) as c:
        rows = c.execute("SELECT content FROM messages ORDER BY id").fetchall()
        assert rows == [(LONG,), ("short",)]
        hit = c.execute(
            "SELECT count(*) FROM messages WHERE words @@ to_tsquery('simple', 'quokka')"
        ).fetchone()
        assert hit == (1,)
