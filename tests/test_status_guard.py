"""Every status surface answers while the store is damaged: ``quill status`` (human and
``--json``), ``quill doctor`` (human and ``--json``), ``quill spool status --json``, the HTTP
``/api/v1/status`` and ``/metrics``, with the halt cause, the spool and the lag, never the
store's exception. And the lag is measured from the cursor the writer published, never from
"nothing applied" (which would count the whole spool as pending).

Each case damages a real store the ways the store-damage tests do (pages of a table's b-tree
overwritten as in test_table_damage.py and conftest.damage_pages, the FTS index as in
test_fts_damage.py, a truncated, foreign or unreadable file and a deleted WAL as in
test_store_failures.py), under a running in-process production writer, which halts (or goes
on) as it would in a fleet; then records arrive that it cannot apply, so the spool has a known
pending tail behind the cursor the writer published."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import apsw
import httpx
import pytest
from conftest import QuillCLI
from harness import InProcessWriter, drain, make_home
from private_servers import PrivatePostgres, private_pg_missing
from service_helpers import served

from quill.home import RunDir, WriterStatus
from quill.spool import Position, Spool
from quill.store.sqlite.connection import open_reader

WORDS = ("aardvark", "bumblebee", "cormorant", "dromedary", "echidna")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A data dir whose store holds rows in messages (several b-tree levels), sessions, the
    FTS indexes and job_runs, fully applied by the production writer."""
    root = tmp_path_factory.mktemp("guard") / "home"
    cfg = make_home(root)
    with Spool(cfg.spool_dir) as sp:
        for s in range(8):
            msgs = [
                {
                    "role": "user",
                    "id": f"s{s}-{i}",
                    "content": " ".join(f"{WORDS[(i + k) % 5]}{i * k}" for k in range(60)),
                }
                for i in range(400)
            ]
            sp.append("messages.append", {"session_id": f"s{s}", "messages": msgs})
    drain(root)
    return root


def _pages(db: Path, name: str, kind: str | None = None) -> tuple[list[int], int]:
    conn = open_reader(db)
    try:
        where = " AND pagetype = ?" if kind else ""
        args = (name, kind) if kind else (name,)
        pages = [
            r[0]
            for r in conn.execute(
                f"SELECT pageno FROM dbstat WHERE name = ?{where} ORDER BY pageno", args
            )
        ]
        return pages, conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()


def _overwrite(db: Path, pages: list[int], page_size: int) -> None:
    assert pages
    with open(db, "r+b") as f:
        for p in pages:
            f.seek((p - 1) * page_size)
            f.write(os.urandom(page_size))


def _table(name: str, kind: str | None = None):
    """Up to 3 pages from the middle of b-tree ``name`` (of page type ``kind``)."""

    def damage(db: Path) -> None:
        pages, size = _pages(db, name, kind)
        _overwrite(db, pages[max(0, len(pages) // 2 - 1) :][:3], size)

    return damage


def _header(db: Path) -> None:
    _overwrite(db, [1], _pages(db, "messages")[1])


def _truncate(db: Path) -> None:
    os.truncate(db, 0)


def _foreign(db: Path) -> None:
    other = db.with_name("other.db")
    conn = apsw.Connection(str(other))
    conn.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1); PRAGMA application_id = 4242")
    conn.close()
    with open(other, "rb") as src, open(db, "r+b") as dst:  # like `cp other state.db`
        dst.write(src.read())


def _wal_deleted(db: Path) -> None:
    Path(str(db) + "-wal").unlink()


def _shm_unusable(db: Path) -> None:
    shm = Path(str(db) + "-shm")
    shm.unlink(missing_ok=True)
    shm.mkdir()


DAMAGE = {
    "messages-interior": _table("messages", "internal"),
    "messages-leaves": _table("messages", "leaf"),
    "sessions": _table("sessions"),
    "spool_cursor": _table("spool_cursor"),
    "state_meta": _table("state_meta"),
    "job_runs": _table("job_runs"),
    "fts-index": _table("messages_fts_data"),
    "header": _header,
    "truncated": _truncate,
    "foreign-file": _foreign,
    "wal-deleted": _wal_deleted,
    "shm-unusable": _shm_unusable,
}


def _halt_or_go_on(w: InProcessWriter) -> WriterStatus:
    """Turn the writer on a new record until it halts or has applied it."""
    ack = w.spool.append(
        "messages.append", {"session_id": "late", "messages": [{"role": "user", "content": "x"}]}
    )
    for _ in range(200):
        w.turn(1.0)
        st = WriterStatus.from_json(w.status())
        if st.halted or (st.cursor and Position.parse(st.cursor) > ack.position):
            return st
    raise AssertionError(f"the writer neither halted nor applied: {w.status()}")


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_every_status_surface_answers_on_a_damaged_store(pristine, tmp_path, kind):
    root = tmp_path / "home"
    shutil.copytree(pristine, root)
    w = InProcessWriter(root)
    try:
        w.until_idle()
        DAMAGE[kind](root / "state.db")
        writer = _halt_or_go_on(w)
        # Records the writer has not applied: a known tail behind the cursor it published.
        with Spool(w.cfg.spool_dir) as sp:
            for i in range(20):
                sp.append(
                    "messages.append",
                    {
                        "session_id": "tail",
                        "messages": [{"role": "user", "content": f"pending {i}"}],
                    },
                )
        published = WriterStatus.from_json(RunDir(root).last("writer"))
        assert published.cursor, f"{kind}: the writer published no cursor: {published}"
        cursor = Position.parse(published.cursor)
        end = sum(p.stat().st_size for p in w.cfg.spool_dir.glob("*.jsonl"))
        assert len(list(w.cfg.spool_dir.glob("*.jsonl"))) == 1
        expected_pending = end - cursor.offset
        assert 0 < expected_pending < end // 4  # the tail, far from the whole spool
        _check_surfaces(QuillCLI(root), kind, writer, expected_pending)
    finally:
        w.close()


def _check_surfaces(quill: QuillCLI, kind: str, writer: WriterStatus, pending: int) -> None:
    halted = writer.halted
    human = quill.run("status", check=False)
    assert "quill: error" not in human.stderr, (kind, human.stderr)
    assert human.returncode == (1 if halted else human.returncode), (kind, human.stdout)
    assert f"{pending} bytes pending" in human.stdout, (kind, human.stdout)
    if halted:
        assert "HALTED" in human.stdout and writer.halt.cause in human.stdout, human.stdout

    proc = quill.run("status", "--json", check=False)
    doc = json.loads(proc.stdout)
    assert "error" not in doc or isinstance(doc.get("fleet"), dict), (kind, doc)
    assert doc["spool"]["pending_bytes"] == pending, (kind, doc["spool"])
    assert isinstance(doc["spool"]["lag_s"], float) and doc["spool"]["lag_s"] >= 0
    assert doc["spool"]["cursor_source"] in ("store", "writer", "halt"), doc["spool"]
    if halted:
        assert proc.returncode == 1 and doc["fleet"]["halt"]["cause"] == writer.halt.cause
        assert doc["metrics"]["writer_halted"] == 1
    assert doc["metrics"]["spool_pending_bytes"] == pending

    doctor = quill.run("doctor", check=False)
    assert "quill: error" not in doctor.stderr, (kind, doctor.stderr)
    assert "spool lag" in doctor.stdout and doctor.returncode in (0, 1), doctor.stdout
    checks = {c["check"]: c for c in quill.json("doctor", check=False)}
    assert f"{pending} bytes pending" in checks["spool lag"]["detail"], (kind, checks)
    assert checks["halt"]["status"] == ("fail" if halted else "ok"), (kind, checks["halt"])

    spool = quill.json("spool", "status", check=False)
    assert spool["pending_bytes"] == pending, (kind, spool)

    with served(quill) as base:
        api = httpx.get(f"{base}/api/v1/status", timeout=30)
        assert api.status_code == 200, (kind, api.text)
        assert api.json()["spool"]["pending_bytes"] == pending
        metrics = httpx.get(f"{base}/metrics", timeout=30)
        assert metrics.status_code == 200, (kind, metrics.text)
        assert f"quill_spool_pending_bytes {float(pending)}" in metrics.text, metrics.text
        assert f"quill_writer_halted {1.0 if halted else 0.0}" in metrics.text


# -- the lag while the store cannot be read ---------------------------------------------------


@pytest.fixture
def private_pg():
    """A private PostgreSQL server (``private_servers.PrivatePostgres``) that the test may
    stop: never the shared one. Yields ``(url, stop)``."""
    if reason := private_pg_missing():
        pytest.skip(reason)
    server = PrivatePostgres().start()
    try:
        yield server.url, server.stop
    finally:
        server.close()


def test_a_stopped_postgresql_shows_the_lag_from_the_published_cursor(tmp_path, private_pg):
    """A PostgreSQL stop: the store cannot be read, the writer retries and keeps publishing
    its cursor; status, doctor and /metrics show the tail behind that cursor as pending (and
    its small lag), not the whole spool with the age of its first record."""
    url, stop = private_pg
    w = InProcessWriter(tmp_path / "home", url)
    try:
        with Spool(w.cfg.spool_dir) as sp:
            for s in range(20):
                msgs = [{"role": "user", "content": f"old {s} {i} " + "x" * 400} for i in range(50)]
                sp.append("messages.append", {"session_id": f"s{s}", "messages": msgs})
        w.until_idle()
        stop()
        with Spool(w.cfg.spool_dir) as sp:
            for i in range(5):
                sp.append(
                    "messages.append",
                    {
                        "session_id": "new",
                        "messages": [{"role": "user", "content": f"during the stop {i}"}],
                    },
                )
        for _ in range(5):
            w.turn(60.0)  # the writer retries, publishing its error and its cursor
        published = WriterStatus.from_json(w.status())
        assert published.error and published.cursor, published
        cursor = Position.parse(published.cursor)
        end = sum(p.stat().st_size for p in w.cfg.spool_dir.glob("*.jsonl"))
        pending = end - cursor.offset
        assert 0 < pending < end // 20

        quill = QuillCLI(w.root)
        st = quill.status()
        sp = st["spool"]
        assert sp["pending_bytes"] == pending, (pending, end, sp)  # main: the whole spool
        assert sp["cursor_source"] == "writer", sp
        assert st["store"]["state"] == "unreadable", st["store"]
        assert sp["lag_s"] < 60 and sp["cursor_age_s"] < 60, sp
        assert st["metrics"]["spool_lag_seconds"] == sp["lag_s"]
        human = quill.run("status", check=False)
        assert f"{pending} bytes pending" in human.stdout and "writer published" in human.stdout
        checks = {c["check"]: c for c in quill.json("doctor", check=False)}
        assert f"{pending} bytes pending" in checks["spool lag"]["detail"], checks["spool lag"]
        with served(quill) as base:
            text = httpx.get(f"{base}/metrics", timeout=30).text
        assert f"quill_spool_pending_bytes {float(pending)}" in text, text
        assert "quill_store_readable 0.0" in text
    finally:
        w.close()


def test_status_says_unknown_when_no_cursor_was_ever_published(tmp_path):
    """A store that cannot be read and no writer record: pending and lag are unknown (None,
    absent from /metrics), not the whole spool."""
    cfg = make_home(tmp_path / "home")
    with Spool(cfg.spool_dir) as sp:
        sp.append(
            "messages.append", {"session_id": "a", "messages": [{"role": "user", "content": "hi"}]}
        )
    drain(cfg.home)
    (cfg.run_dir / "writer.json").unlink()
    cfg.state_db.write_bytes(os.urandom(8192))  # not a database any more
    quill = QuillCLI(cfg.home)
    st = quill.status()
    assert st["spool"]["pending_bytes"] is None and st["spool"]["lag_s"] is None, st["spool"]
    assert st["spool"]["cursor_source"] == "unknown", st["spool"]
    assert st["store"]["state"] == "unreadable", st["store"]
    assert st["metrics"]["spool_lag_seconds"] is None
    assert "pending unknown" in quill.run("status", check=False).stdout


def test_status_of_a_data_dir_with_no_spool_yet_names_no_python_none(tmp_path):
    """A fresh data dir (nothing pushed): every figure is a word a reader understands; the
    spool's end is "(empty)", never Python's ``None``."""
    out = QuillCLI(tmp_path / "fresh").run("status", check=False).stdout
    assert "spool    0 segment(s)" in out and "end (empty)" in out, out
    assert "None" not in out, out


def test_status_and_doctor_name_a_lost_store_and_quill_recover_before_the_writer_halts(tmp_path):
    """state.db deleted (with its WAL) after a snapshot: the writer would halt StoreMissing at
    its start (the spool alone no longer holds the history). Status and doctor say so already,
    with the command, never "not created yet"; a data dir never written to still says that."""
    cfg = make_home(tmp_path / "home")
    with Spool(cfg.spool_dir) as sp:
        sp.append(
            "messages.append", {"session_id": "a", "messages": [{"role": "user", "content": "hi"}]}
        )
    drain(cfg.home)
    quill = QuillCLI(cfg.home)
    quill.run("snapshot")
    for suffix in ("", "-wal", "-shm"):
        cfg.state_db.with_name(cfg.state_db.name + suffix).unlink(missing_ok=True)
    proc = quill.run("status", "--json", check=False)
    st = json.loads(proc.stdout)
    assert st["store"] is not None and st["store"]["state"] == "missing", st["store"]
    assert "quill recover" in st["store"]["error"] and st["store"]["next"] == "quill recover"
    # segment 1 is still in the spool: the reason given is the snapshot, not a history the
    # spool "no longer holds" next to "oldest segment 1" (what a new user read)
    error = st["store"]["error"]
    assert "no longer holds" not in error and "1 snapshot(s) exist" in error, error
    assert st["metrics"]["store_readable"] == 0
    assert proc.returncode == 1
    text = quill.run("status", check=False).stdout
    assert "MISSING" in text and "not created yet" not in text, text
    doctor = json.loads(quill.run("doctor", "--json", check=False).stdout)
    store = next(c for c in doctor if c["check"] == "store")
    assert store["status"] == "fail" and "quill recover" in store["detail"], store
    # Reads: an error naming it, never an empty answer that hides it.
    reads = (("sessions", "list"), ("search", "hi"), ("jobs", "history"))
    for args in (*reads, ("export", "-o", str(tmp_path / "x"))):
        proc = quill.run(*args, "--json", check=False) if args[0] != "export" else None
        proc = proc or quill.run(*args, check=False)
        assert proc.returncode == 1 and "quill recover" in proc.stdout + proc.stderr, args
    import quill as quill_pkg

    with pytest.raises(quill_pkg.StoreDamagedError, match="quill recover"):
        quill_pkg.Client(cfg.home).sessions()
    with served(quill) as base:
        for path in ("/api/v1/sessions", "/api/v1/jobs/history"):
            got = httpx.get(f"{base}{path}", timeout=30)
            assert got.status_code == 503 and "quill recover" in got.text, (path, got.text)
    fresh = QuillCLI(tmp_path / "fresh")
    assert fresh.status()["store"] is None
    assert json.loads(fresh.run("sessions", "list", "--json").stdout) == {
        "sessions": [],
        "next": None,
    }
    assert "not created yet" in fresh.run("status", check=False).stdout
