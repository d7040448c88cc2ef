"""A PostgreSQL session whose process is frozen (SIGSTOP: a debugger, a paused VM) while its
network stays up holds its locks only for a bounded time: keepalives never end such a
session (the kernel still answers), so a writer's and a migration's sessions carry a bound on
an idle transaction (``session_settings.WRITER_SESSION``). The server then rolls the frozen
transaction back and frees its locks; the frozen process, continued, reconnects and applies
its records again, each once.

Real processes, real SIGSTOP/SIGCONT, a real server. The bound is lowered to 2 s in the
frozen process (its own setting, in its own interpreter) so the test takes seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from quill.spool import START, Spool, SpoolReader
from quill.store.apply.chunking import take_chunk
from quill.store.factory import open_url

BOUND_MS = "2000"

_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from quill.store.postgres import connection, session_settings
    bound = getattr(session_settings, "WRITER_SESSION", None)  # None: code without the bound
    if bound is not None:
        bound["idle_in_transaction_session_timeout"] = sys.argv[2]
    from quill import home as config
    from quill.ops import logs
    from quill.store.postgres import schema
    if sys.argv[3] == "drain":
        from quill.ops.recover.postgres import drain
        out = drain(config.load(Path(sys.argv[1])), logs.configure(None, "test"))
        print(json.dumps({"applied": out.get("applied")}), flush=True)
    else:
        conn = connection.PgConnection(sys.argv[1], application_name=sys.argv[4], settings=bound)
        schema.create(conn)
        print("migrated", flush=True)
    """
)


def _child(tmp_path: Path, *args: str) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def _waiting_on_lock(url: str, application: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return bool(
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event_type = 'Lock'",
                (application,),
            ).fetchone()[0]
        )


def _holds_advisory(url: str, application: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return bool(
            conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE a.application_name = %s AND l.locktype = 'advisory' AND l.granted",
                (application,),
            ).fetchone()[0]
        )


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # reported by the test's assertion on ``out``
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_writer_frozen_mid_chunk_frees_the_sessions_lock_within_the_bound(tmp_path, pg_store_url):
    """Host A's writer is frozen inside its chunk, after taking session ``shared``'s lock.
    Host B's writer, applying to ``shared``, waits for the bound, not forever; A, continued,
    meets the ended session as a retry and stores its records once. Old code: B waits as long
    as A stays frozen."""
    url = pg_store_url
    open_url(url, tmp_path / "init.db", "init").close()  # the schema, before anyone waits
    home = tmp_path / "host-a"
    home.mkdir()
    spool_id = "frozen-" + uuid.uuid4().hex[:12]  # names A's session on the shared server
    (home / "spool-id").write_text(spool_id)
    (home / "config.toml").write_text(f'[store]\nurl = "{url}"\n')
    with Spool(home / "spool", fsync=False) as sp:
        for i in range(5):
            msgs = [{"role": "user", "content": f"a{i}"}]
            sp.append("messages.append", {"session_id": "shared", "messages": msgs})
    with Spool(tmp_path / "b", fsync=False) as sp:
        sp.append(
            "messages.append",
            {"session_id": "shared", "messages": [{"role": "user", "content": "b0"}]},
        )
    gate = psycopg.connect(url)  # A's chunk stops at its first read of messages
    gate.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
    child = _child(tmp_path, str(home), BOUND_MS, "drain")
    try:
        _wait(  # inside the chunk: the session locked, the next statement at the gate
            lambda: (
                _waiting_on_lock(url, f"quill-writer:{spool_id}")
                and _holds_advisory(url, f"quill-writer:{spool_id}")
            ),
            60,
            "A's chunk to reach the gate",
        )
        os.kill(child.pid, signal.SIGSTOP)
        gate.rollback()  # A's statement completes on the server; A itself is frozen
        b = open_url(url, tmp_path / "b.db", "host-b")
        try:
            entries = take_chunk(SpoolReader(tmp_path / "b").read(START, max_bytes=1 << 20), 10)
            began = time.monotonic()
            thread, out = _in_thread(lambda: b.apply_chunk(entries, lambda *a: None).applied)
            thread.join(30)
            waited = time.monotonic() - began
            with psycopg.connect(url, autocommit=True) as c:
                act = c.execute(
                    "SELECT application_name, state, wait_event_type, wait_event, left(query, 80) "
                    "FROM pg_stat_activity WHERE datname = current_database()"
                ).fetchall()
            assert out.get("value") == 1, f"B waiting for frozen A after {waited:.1f} s: {act}"
        finally:
            b.close()
        assert waited < 15, waited
        os.kill(child.pid, signal.SIGCONT)
        stdout, stderr = child.communicate(timeout=60)
        assert child.returncode == 0, stderr.decode()[-2000:]
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
        gate.close()
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT content FROM messages WHERE session_id = 'shared' ORDER BY seq"
        ).fetchall()
    # A's records were acknowledged before B's: they come first, each once.
    assert [r[0] for r in rows] == [f"a{i}" for i in range(5)] + ["b0"]


def test_a_migration_frozen_mid_way_frees_the_migration_lock_within_the_bound(
    tmp_path, pg_store_url
):
    """A host migrating a store is frozen inside the migration. Another host opening the
    store waits for the bound, then migrates it itself. Old code: the migration lock is a
    session lock, held as long as the frozen process lives."""
    url = pg_store_url
    open_url(url, tmp_path / "init.db", "init").close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE state_meta SET value = '5' WHERE key = 'pg_layout'")
    gate = psycopg.connect(url)  # the migration stops at its first statement on messages
    gate.execute("LOCK TABLE messages IN ACCESS SHARE MODE")
    name = "quill-migrate-" + uuid.uuid4().hex[:12]  # names its session on the shared server
    child = _child(tmp_path, url, BOUND_MS, "migrate", name)
    try:
        _wait(lambda: _waiting_on_lock(url, name), 60, "the migration to reach the gate")
        os.kill(child.pid, signal.SIGSTOP)
        gate.rollback()
        began = time.monotonic()
        thread, out = _in_thread(lambda: open_url(url, tmp_path / "b.db", "host-b").close())
        thread.join(30)
        waited = time.monotonic() - began
        assert "value" in out, f"still waiting for the frozen migration after {waited:.1f} s"
        assert waited < 15, waited
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait()
        gate.close()
    with psycopg.connect(url) as conn:
        layout = conn.execute("SELECT value FROM state_meta WHERE key = 'pg_layout'").fetchone()
    from quill.store.postgres.schema import PG_LAYOUT

    assert layout == (PG_LAYOUT,)
