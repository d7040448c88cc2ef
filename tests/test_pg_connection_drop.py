"""A dropped PostgreSQL connection is a retry, never a crash: the running fleet's writer has
its server backend killed (``pg_terminate_backend``) mid-drain, several times, and still
applies every record exactly once with no restart by the supervisor. Real server, real
fleet (``quill run``), real spool."""

from __future__ import annotations

import time

import psycopg
from conftest import QuillCLI, stop_fleet

MESSAGES = 1500


def _wait(pred, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _count(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('messages')").fetchone()[0] is None:
            return 0  # the writer has not created the schema yet
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]


def _writer_backends(url: str, spool_id: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                (f"quill-writer:{spool_id}",),
            )
        ]


def _terminate(url: str, pids: list[int]) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return sum(
            bool(conn.execute("SELECT pg_terminate_backend(%s)", (p,)).fetchone()[0]) for p in pids
        )


def test_killing_the_writers_backend_mid_drain_is_retried_without_a_restart(tmp_path, pg_store_url):
    from quill import home as config
    from quill.home import RunDir
    from quill.spool import Spool
    from quill.spool.identity import load_or_create

    home = tmp_path / "host"
    home.mkdir()
    # Small chunks: the drain takes many transactions, so the kills land in the middle of it.
    (home / "config.toml").write_text(
        f'[store]\nurl = "{pg_store_url}"\n[writer]\nchunk_rows = 5\n'
    )
    spool = Spool(home / "spool")
    for i in range(MESSAGES):
        spool.append(
            "messages.append",
            {"session_id": f"s{i % 7}", "messages": [{"role": "user", "content": f"m{i}"}]},
        )
    spool.close()
    sid = load_or_create(config.load(home).spool_id_path)

    quill = QuillCLI(home)
    proc = quill.start_fleet()
    rd = RunDir(home.resolve())
    try:
        killed = 0
        counts = []
        for _ in range(3):
            # Mid-drain: the writer has applied something and has more to do.
            n = _wait(
                lambda floor=(counts[-1] if counts else 0): (
                    c if floor < (c := _count(pg_store_url)) < MESSAGES else None
                ),
                "the writer to apply more of the spool",
            )
            counts.append(n)
            pids = _wait(lambda: _writer_backends(pg_store_url, sid), "the writer's backend")
            killed += _terminate(pg_store_url, pids)
        assert killed >= 3

        _wait(lambda: _count(pg_store_url) == MESSAGES, "every message to be applied", 240)
        sup = rd.live("supervisor")
        assert sup["restarts"]["writer"] == 0, sup
        assert not sup["crash_loops"], sup
        writer = _wait(lambda: rd.live("writer"), "the writer's status")
        assert not writer.get("halted"), writer
        st = quill.status()
        assert not st["fleet"]["crash_loops"], st["fleet"]
    finally:
        code = stop_fleet(proc)
    assert code == 0
    log = "\n".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*.log*"))
    assert "writer.crashed" not in log
    assert "writer.retry" in log and "TransientError" in log  # retried, said why
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        dup = conn.execute(
            "SELECT count(*) FROM (SELECT content FROM messages GROUP BY content "
            "HAVING count(*) > 1) AS d"
        ).fetchone()[0]
    assert dup == 0


def test_a_missing_table_halts_the_writer_and_a_bad_role_is_retried(tmp_path, pg_store_url):
    """Structural (the store's ``messages`` table gone) → the sticky halt, recorded for every
    host; this host's configuration (a role that does not exist, SQLSTATE 28000) → retried
    with the error published. Neither one crashes the writer."""
    from harness import InProcessWriter

    from quill.store.postgres import PgConnection, halt

    host = InProcessWriter(tmp_path / "host", pg_store_url)
    try:
        host.say("s", "one")
        host.until_idle()
        with psycopg.connect(pg_store_url, autocommit=True) as c:
            c.execute("ALTER TABLE messages RENAME TO messages_away")
        host.say("s", "two")
        for _ in range(5):
            host.turn()
        st = host.status()
        assert st.get("halted") and st["halt"]["cause"] == "StructuralError", st
        conn = PgConnection(pg_store_url)
        try:
            assert halt.read(conn)["cause"] == "StructuralError"
        finally:
            conn.close()
    finally:
        host.close()

    bad = pg_store_url.replace("postgresql://postgres@", "postgresql://no_such_role_x@", 1)
    assert bad != pg_store_url
    other = InProcessWriter(tmp_path / "other", bad)
    try:
        other.say("s2", "hello")
        pauses = [other.turn() for _ in range(3)]
        assert pauses[0] > 0 and pauses[1] >= pauses[0]  # backing off, not raising
        st = other.status()
        assert not st.get("halted") and "no_such_role_x" in (st.get("error") or ""), st
        assert other.events("writer.open_retry"), "the retry is logged"
    finally:
        other.close()


def test_until_idle_retries_a_dropped_connection_instead_of_failing(tmp_path, pg_store_url):
    """``Writer.until_idle`` (``quill recover``'s drain on PostgreSQL, ``ops.recover.postgres``)
    rides out its backend being killed mid-drain, three times: every message applied once,
    each drop logged as ``writer.retry``, and the call returns its figures instead of raising."""
    import threading

    from harness import make_home

    from quill.ops import logs
    from quill.ops.recover.postgres import drain
    from quill.spool import Spool
    from quill.spool.identity import load_or_create

    cfg = make_home(tmp_path / "host", pg_store_url, writer={"chunk_rows": 5})
    spool = Spool(cfg.spool_dir)
    for i in range(MESSAGES):
        spool.append(
            "messages.append",
            {"session_id": f"s{i % 7}", "messages": [{"role": "user", "content": f"m{i}"}]},
        )
    spool.close()
    sid = load_or_create(cfg.spool_id_path)
    log = logs.configure(cfg.logs_dir, "writer")
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["figures"] = drain(cfg, log)
        except Exception as exc:  # the assertion below names it
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    killed, floor = 0, 0
    try:
        for _ in range(3):
            floor = _wait(
                lambda floor=floor: c if floor < (c := _count(pg_store_url)) < MESSAGES else None,
                "the drain to apply more of the spool",
            )
            pids = _wait(lambda: _writer_backends(pg_store_url, sid), "the drain's backend")
            killed += _terminate(pg_store_url, pids)
    finally:
        thread.join(300)
    assert killed >= 3
    assert "error" not in outcome, outcome
    assert outcome["figures"]["applied"] > 0
    assert _count(pg_store_url) == MESSAGES
    text = (cfg.logs_dir / "writer.log").read_text(errors="replace")
    assert text.count('"writer.retry"') >= 3 and "TransientError" in text
