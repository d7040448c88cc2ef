"""amcheck on a PostgreSQL store: damage in a B-tree index is reported by the
integrity job, halts every host's writes (as SQLite's check halts its writer), survives
``quill recover`` while the damage is there, and is lifted by it after ``REINDEX``.

How the index is damaged — for real, and safely on the test's own schema: an index on the
store's ``messages`` table is built with an operator class whose comparison function is then
replaced by its reverse. The index's order no longer agrees with its operator class, which
is exactly the corruption a collation change (a glibc upgrade under a text index) causes;
``bt_index_check`` reports it (SQLSTATE XX002). Overwriting index pages on disk instead
would need the server's shared buffers flushed and dropped (a restart), which a test on a
shared server must not do."""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest
from conftest import QuillCLI, pg_data_dir

from quill.spool import Spool

DAMAGE = """
CREATE FUNCTION probe_cmp(a text, b text) RETURNS int LANGUAGE sql IMMUTABLE
    AS $$ SELECT bttextcmp(a, b) $$;
CREATE OPERATOR CLASS probe_ops FOR TYPE text USING btree AS
    OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >,
    FUNCTION 1 probe_cmp(text, text);
CREATE INDEX messages_probe ON messages (content probe_ops);
CREATE OR REPLACE FUNCTION probe_cmp(a text, b text) RETURNS int LANGUAGE sql IMMUTABLE
    AS $$ SELECT -bttextcmp(a, b) $$;
"""


def _count(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]


def _wait(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_damaged_index_is_reported_halts_every_writer_and_reindex_plus_recover_lifts_it(
    tmp_path, pg_store_url
):
    from quill import home as config
    from quill.home import RunDir
    from quill.jobs.pg_jobs import pg_integrity_check
    from quill.ops import logs
    from quill.store.errors import CorruptError
    from quill.store.postgres import PgConnection, halt
    from quill.workers.writer import Writer

    url = pg_store_url
    pg_data_dir(tmp_path / "a", url, 40)
    assert pg_integrity_check(url)["ok"]  # healthy: nothing reported, nothing halted
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(DAMAGE)

    with pytest.raises(CorruptError) as found:
        pg_integrity_check(url)
    assert "messages_probe" in str(found.value)
    conn = PgConnection(url)
    try:
        cause = halt.read(conn)
    finally:
        conn.close()
    assert cause["cause"] == "amcheck" and "messages_probe" in cause["detail"]

    # A host's writer meets the halt at its next chunk: nothing is applied, the spool keeps it.
    home = tmp_path / "a"
    spool = Spool(home / "spool")
    spool.append(
        "messages.append",
        {"session_id": "late", "messages": [{"role": "user", "content": "after damage"}]},
    )
    spool.close()
    writer = Writer(config.load(home), logs.configure(None, "test"))
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        rd = RunDir(home.resolve())
        _wait(lambda: (rd.live("writer") or {}).get("halted"), "the writer to publish its halt")
        assert _count(url) == 40
        quill = QuillCLI(home)
        st = quill.json("status", check=False)
        assert (
            st["fleet"]["halt"]["cause"] == "CorruptError"
            and "messages_probe" in st["fleet"]["halt"]["detail"]
        )
        doctor = {c["check"]: c for c in quill.json("doctor", check=False)}
        assert doctor["halt"]["status"] == "fail"

        # Still damaged: recover refuses and says what to do.
        proc = quill.run("recover", "--json", check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "REINDEX" in out and "messages_probe" in out
        assert _count(url) == 40

        with psycopg.connect(url, autocommit=True) as c:
            c.execute(
                "REINDEX INDEX messages_probe"
            )  # rebuilt in the (reversed) operator class's order
        result = quill.json("recover")
        assert result["halt_lifted"]["cause"] == "amcheck" and result["replayed_by"] == "writer"
        assert _count(url) == 41  # the running writer resumed and applied it
        assert pg_integrity_check(url)["ok"]
        _wait(lambda: not (rd.live("writer") or {}).get("halted"), "the writer to resume")
        # The halt row is gone with the halt; the job history keeps the incident.
        runs = {r["job"]: r for r in quill.json("jobs", "history", "--limit", "50")["runs"]}
        assert runs["writer_halt"]["outcome"] == "halted"
        assert "messages_probe" in runs["writer_halt"]["error"]
        assert runs["recover"]["outcome"] == "ok"
        assert runs["recover"]["figures"]["halt_lifted"]["cause"] == "amcheck"
    finally:
        stop.set()
        thread.join(30)
    assert json.dumps(writer.totals)
