"""A ``COPY … FROM STDIN`` whose rows make the server send notices (``to_tsvector`` says "word
is too long to be indexed" for every word over 2,047 characters, in the generated search
column) must end. The client only writes during a COPY; once the notices outgrow the socket
buffers both sides wait on each other's writes forever, and every ``DROP DATABASE`` on the
server waits behind the stuck backend. Quill's sessions get no notices
(``store.postgres.session_settings.SERVER_QUIET``)."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from quill.spool import START, Spool, SpoolReader
from quill.store.apply.chunking import take_chunk
from quill.store.factory import open_url
from quill.store.postgres.connection import PgConnection

#: Long enough to be refused by the word index: one notice per word per indexed text.
LONG = 2_100


def _bounded(work, url: str, app: str, seconds: float = 120.0) -> None:
    """Run ``work`` in a thread; if it has not ended within ``seconds``, end the server
    sessions named ``app`` (so the test's database can be dropped) and fail."""
    errors: list[BaseException] = []

    def run():
        try:
            work()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database()",
                (app,),
            )
        thread.join(30)
        pytest.fail(f"the COPY did not end within {seconds} s (client and server both writing)")
    if errors:
        raise errors[0]


def test_copy_rows_ends_when_every_row_makes_notices(pg_store_url):
    """200,000 notices during one 20 MB ``copy_rows`` (a generated column whose function
    raises 10 per row): old code hangs until its session is ended (here by the test; in a
    writer by ``tcp_user_timeout``, after which it retries the same COPY)."""
    conn = PgConnection(pg_store_url, application_name="quill-notice-test")
    try:
        conn.execute(
            "CREATE FUNCTION noisy(t text) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$ "
            "BEGIN FOR i IN 1..10 LOOP RAISE NOTICE 'notice % of %', i, t; END LOOP; "
            "RETURN length(t); END $$"
        )
        conn.execute("CREATE TABLE loud (t text, n int GENERATED ALWAYS AS (noisy(t)) STORED)")

        def copy():
            conn.execute("BEGIN")
            rows = ([f"row {i} " + "x" * 1_000] for i in range(20_000))
            conn.copy_rows("loud", ["t"], rows)
            conn.execute("COMMIT")

        _bounded(copy, pg_store_url, "quill-notice-test")
        assert conn.execute("SELECT count(*), min(n) FROM loud").fetchone() == (20_000, 1_006)
    finally:
        conn.close()


def test_a_chunk_of_long_words_is_applied(tmp_path: Path, pg_store_url):
    """A writer's chunk of messages full of words over 2,047 characters (a minified file, a
    hex dump in a tool output) go in one COPY, and every message is stored whole. (Old code
    hangs on such a COPY once its notices outgrow the socket buffers: ~20,000 words here.)"""
    words = [f"w{i:05d}" + "a" * LONG for i in range(6_000)]
    with Spool(tmp_path / "spool", fsync=False) as sp:
        for op in range(2):
            sp.append(
                "messages.append",
                {
                    "session_id": "long-words",
                    "messages": [
                        {"role": "tool", "content": " ".join(words[k : k + 30])}
                        for k in range(op * 3_000, (op + 1) * 3_000, 30)
                    ],
                },
                batch_id=f"long-{op}",
            )
    store = open_url(pg_store_url, tmp_path / "state.db", "host-a")
    try:
        entries = take_chunk(SpoolReader(tmp_path / "spool").read(START, max_bytes=1 << 30), 10_000)
        applied: list[int] = []

        def apply():
            result = store.apply_chunk(entries, lambda *a: pytest.fail(f"rejected {a[1:]}"))
            applied.append(result.applied)

        _bounded(apply, pg_store_url, "quill")
        assert applied == [2]
    finally:
        store.close()
    with psycopg.connect(pg_store_url) as pg:
        stored = pg.execute(
            "SELECT count(*), sum(length(content)) FROM messages WHERE session_id = 'long-words'"
        ).fetchone()
    assert stored == (200, sum(len(w) for w in words) + 200 * 29)
