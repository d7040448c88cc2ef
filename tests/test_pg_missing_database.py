"""A store URL naming a database the PostgreSQL server does not have is reported as that, with
the ``createdb`` command that fixes it: found by looking the name up in ``pg_database`` (libpq
gives the failed connection no SQLSTATE), never by the message text. Before, it was a
``TransientError`` whose CLI hint said "retry shortly; the writer holds the store"."""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from harness import make_home
from psycopg.conninfo import make_conninfo

from quill.store.errors import DatabaseMissingError, TransientError
from quill.store.postgres import PgConnection


def _with_path(url: str, dbname: str) -> str:
    """``url`` naming database ``dbname`` instead (a URL: config.toml takes it as it is)."""
    return urlunsplit(urlsplit(url)._replace(path="/" + dbname, query=""))


def test_a_missing_database_is_named_with_the_createdb_command(pg_url):
    name = "quill_missing_" + uuid.uuid4().hex[:10]
    with pytest.raises(DatabaseMissingError) as got:
        PgConnection(_with_path(pg_url, name))
    err = got.value
    assert isinstance(err, TransientError)  # the writer keeps retrying: it goes on once created
    assert err.database == name and err.createdb.startswith("createdb ")
    assert err.createdb.endswith(" " + name) and err.createdb in str(err)


def test_an_unreachable_server_or_an_existing_database_is_not_called_missing(pg_url):
    with psycopg.connect(pg_url) as conn:
        port, existing = conn.info.port, conn.info.dbname
    # Nothing listens one port below the server's: refused, so nothing is known of the name.
    with pytest.raises(TransientError) as refused:
        PgConnection(make_conninfo(pg_url, port=port - 1, dbname="anything"))
    assert not isinstance(refused.value, DatabaseMissingError)
    # The database exists but the role does not: a failure of another kind.
    role = "no_such_role_" + uuid.uuid4().hex[:6]
    with pytest.raises(TransientError) as refused_role:
        PgConnection(make_conninfo(pg_url, user=role, dbname=existing))
    assert not isinstance(refused_role.value, DatabaseMissingError)


def test_the_cli_says_to_create_the_database_and_works_once_it_exists(quill, home, pg_url):
    name = "quill_missing_" + uuid.uuid4().hex[:10]
    make_home(home, url=_with_path(pg_url, name), watch={"enabled": False})
    proc = quill.run("sessions", "list", "--json", check=False)
    assert proc.returncode == 1, proc
    error = json.loads(proc.stdout)["error"]
    assert error["kind"] == "storage", error
    assert "createdb -h" in error["message"] and name in error["message"]
    assert "retry shortly" not in (error["hint"] or "")  # not called a busy store any more
    status = quill.run("status", check=False)
    assert "DatabaseMissingError" in status.stdout and "createdb" in status.stdout
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        assert quill.run("sessions", "list", "--json", check=False).returncode == 0
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
