"""A JSON value damaged on disk (a message's extra fields, a session's meta) is the store's
damage, named, never a ``JSONDecodeError`` traceback; and the damage check finds it.

SQLite keeps no checksum of a row's bytes: a page damaged inside a value leaves the file's
structure sound, so ``PRAGMA quick_check`` passes while every read of that row fails. Found by
the attack helper: a 4 KiB page flipped in a store of the corpus made `quill sessions show`
and `quill export` die with a raw ``json.decoder.JSONDecodeError`` (export leaving half a file
behind), while status and doctor said the store was fine. The read must raise the store's
``CorruptError`` naming the value (the CLI: kind ``damaged``, exit 1), the other sessions stay
readable, and ``quick_check`` reports the value as damage so the writer halts on it.
"""

from __future__ import annotations

import json

import apsw
import pytest

from quill.jobs.worker_jobs import DamageFound, quick_check
from quill.spool import Spool

EXTRA = {"request_id": "r" * 200, "cwd": "/home/user/project"}


def _damage(db, table: str, column: str, rowid: int) -> None:
    """Turn one byte in the middle of a stored JSON text into a control character (a byte the
    store never writes raw inside a JSON string), in place, as a damaged disk page would."""
    conn = apsw.Connection(str(db))
    try:
        with conn.blob_open("main", table, column, rowid, True) as blob:
            middle = blob.length() // 2
            blob.seek(middle)
            blob.write(b"\x01")
    finally:
        conn.close()


@pytest.fixture
def store(quill, home):
    quill.run("status")
    with Spool(home / "spool") as sp:
        sp.append(
            "session.create",
            {"session_id": "hurt", "meta": {"note": "m" * 200}},
        )
        sp.append(
            "messages.append",
            {
                "session_id": "hurt",
                "messages": [{"role": "user", "content": "first", **EXTRA}],
            },
        )
        sp.append(
            "messages.append",
            {"session_id": "fine", "messages": [{"role": "user", "content": "untouched"}]},
        )
    quill.drain()
    return home / "state.db"


def _message_id(db, session: str) -> int:
    conn = apsw.Connection(str(db))
    try:
        return conn.execute(
            "SELECT id FROM messages WHERE session_id = ? AND extra IS NOT NULL", (session,)
        ).fetchone()[0]
    finally:
        conn.close()


def _assert_damaged(proc, what: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "JSONDecodeError" not in proc.stderr, proc.stderr
    assert what in proc.stderr, proc.stderr


def test_damaged_extra_fields_are_named_damage_and_the_rest_reads(quill, store, home):
    mid = _message_id(store, "hurt")
    _damage(store, "messages", "extra", mid)
    what = f"extra fields of message {mid} is damaged"
    _assert_damaged(quill.run("sessions", "show", "hurt", check=False), what)
    got = json.loads(quill.run("sessions", "show", "hurt", "--json", check=False).stdout)
    assert got["error"]["kind"] == "damaged", got
    _assert_damaged(quill.run("export", "-o", str(home.parent / "all.jsonl"), check=False), what)
    shown = quill.json("sessions", "show", "fine")
    assert [m["content"] for m in shown["messages"]] == ["untouched"]
    with pytest.raises(DamageFound) as found:
        quick_check(str(store), None)
    assert f"extra of messages row {mid} is not JSON" in str(found.value)


def test_damaged_session_meta_is_named_damage(quill, store):
    _damage(store, "sessions", "meta", _rowid(store, "hurt"))
    proc = quill.run("sessions", "list", check=False)
    _assert_damaged(proc, "meta of session hurt is damaged")
    with pytest.raises(DamageFound) as found:
        quick_check(str(store), None)
    assert "meta of sessions row" in str(found.value)


def _rowid(db, session: str) -> int:
    conn = apsw.Connection(str(db))
    try:
        return conn.execute("SELECT rowid FROM sessions WHERE id = ?", (session,)).fetchone()[0]
    finally:
        conn.close()
