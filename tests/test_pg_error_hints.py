"""A PostgreSQL store's errors carry hints about the server, not SQLite's: an unreachable
server was shown "the writer holds the store during a checkpoint or maintenance job", a
conflict the same, a halt on damage "`quill recover` rebuilds the store from the newest
snapshot". The store error's class is unchanged (a ``TransientError`` is still exactly one:
the scheduler's standby and the writer's status rely on it); its ``reason`` (by SQLSTATE)
chooses the hint. Real refused port, real server, real CLI process."""

from __future__ import annotations

import socket

import psycopg
import pytest

from quill.ops.client.errors import StoreBusyError, StoreDamagedError, from_exception
from quill.store.errors import CorruptError, TransientError
from quill.store.postgres import PgConnection
from quill.store.postgres.errors import classify

SQLITE_BUSY_HINT = StoreBusyError.default_hint


def _refused_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once closed: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/quill_cut_off"


def test_an_unreachable_server_is_a_transient_error_with_the_servers_hint():
    with pytest.raises(TransientError) as got:
        PgConnection(_refused_url(), connect_timeout=2)
    err = got.value
    assert type(err) is TransientError  # the class callers test exactly
    assert classify(err.__cause__) is TransientError
    public = from_exception(err)
    assert isinstance(public, StoreBusyError)
    assert "PostgreSQL server" in public.hint and "could not be reached" in public.hint
    assert "checkpoint" not in public.hint


def test_the_cli_shows_the_servers_hint_for_an_unreachable_store(home, quill):
    home.mkdir(parents=True)
    (home / "config.toml").write_text(f'[store]\nurl = "{_refused_url()}"\nconnect_timeout_s = 2\n')
    proc = quill.run("search", "anything", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "hint: the PostgreSQL server" in out, out
    assert "checkpoint" not in out, out


def test_a_lock_conflict_is_told_as_one(pg_store_url):
    holder = PgConnection(pg_store_url)
    waiter = PgConnection(pg_store_url)
    try:
        holder.execute("CREATE TABLE hint_t (id int)")
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE hint_t IN ACCESS EXCLUSIVE MODE")
        waiter.execute("SET lock_timeout = '100ms'")
        with pytest.raises(TransientError) as got:
            waiter.execute("SELECT * FROM hint_t")
        assert type(got.value) is TransientError and got.value.reason == "conflict"
        hint = from_exception(got.value).hint
        assert "conflicted" in hint and "checkpoint" not in hint
    finally:
        holder.close()
        waiter.close()


def test_a_halt_on_the_server_points_at_postgresqls_backup_not_a_snapshot(pg_store_url):
    from quill.store.postgres import halt, schema

    conn = PgConnection(pg_store_url)
    try:
        schema.create(conn)
        halt.declare(conn, "amcheck", "index messages_pkey damaged", 0.0)
        with pytest.raises(CorruptError) as got:
            halt.check(conn)
    finally:
        conn.close()
    public = from_exception(got.value)
    assert isinstance(public, StoreDamagedError)
    assert "pg_restore" in public.hint and "snapshot" not in public.hint


def test_sqlites_busy_store_keeps_its_own_hint():
    public = from_exception(TransientError("database is locked"))  # SQLite's: no backend
    assert public.hint == SQLITE_BUSY_HINT


def test_a_server_error_without_a_sqlstate_reads_as_unreachable():
    assert classify(psycopg.OperationalError("gone")) is TransientError


def test_a_missing_table_on_the_server_is_not_told_to_rebuild_from_a_snapshot(
    tmp_path, pg_store_url
):
    from conftest import QuillCLI, pg_data_dir

    home = tmp_path / "h"
    pg_data_dir(home, pg_store_url, 2)
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        conn.execute("DROP TABLE messages CASCADE")
    proc = QuillCLI(home).run("search", "m1", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "missing from the schema" in out and "snapshot" not in out, out
