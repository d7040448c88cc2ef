"""``quill status`` and ``quill doctor`` on a PostgreSQL store: the server, the
store's size, every host's cursor, the last amcheck run from the shared job history, and the
URL with its password redacted. Real server, real data dirs, the real CLI."""

from __future__ import annotations

import json
import time

from conftest import QuillCLI, pg_data_dir

SECRET = "s3cret-pw"


def test_status_and_doctor_show_the_postgresql_store_without_its_password(tmp_path, pg_store_url):
    from quill.jobs.pg_jobs import pg_integrity_check
    from quill.store.postgres import PgConnection
    from quill.store.sqlite.job_runs import record_job_run

    # Trust authentication ignores the password: it is there to be redacted.
    url = pg_store_url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@", 1)
    assert SECRET in url
    here, other = pg_data_dir(tmp_path / "a", url, 5), pg_data_dir(tmp_path / "b", url, 2)
    started = time.time()
    figures = pg_integrity_check(url)
    conn = PgConnection(url)
    try:
        record_job_run(conn, "pg_integrity_check", started, time.time(), "ok", figures)
    finally:
        conn.close()

    quill = QuillCLI(tmp_path / "a")
    st = quill.json("status", check=False)
    pg = st["store"]["postgres"]
    assert SECRET not in json.dumps(st) and ":***@" in pg["url"]
    assert (st["store"]["messages"], st["store"]["cursor"]) == (7, here["to"])
    assert pg["size_bytes"] > 0 and pg["database_bytes"] >= pg["size_bytes"]
    assert {s["spool_id"]: s["cursor"] for s in pg["spools"]} == {
        here["spool_id"]: here["to"],
        other["spool_id"]: other["to"],
    }
    assert all(s["age_s"] >= 0 for s in pg["spools"])
    assert pg["amcheck"]["outcome"] == "ok" and pg["amcheck"]["figures"]["indexes_checked"] > 0
    assert st["spool"]["pending_bytes"] == 0
    assert [j["job"] for j in st["jobs"]] == ["pg_integrity_check"]

    text = quill.run("status", check=False).stdout
    assert SECRET not in text
    assert (
        "PostgreSQL" in text
        and "amcheck" in text
        and here["spool_id"] in text
        and other["spool_id"] in text
    )

    proc = quill.run("doctor", "--json", check=False)
    assert SECRET not in proc.stdout + proc.stderr
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    assert (
        checks["store (postgresql)"]["status"] == "ok"
        and "7 messages" in checks["store (postgresql)"]["detail"]
    )
    assert checks["amcheck"]["status"] == "ok"
    assert (
        here["spool_id"] in checks["cursors"]["detail"]
        and other["spool_id"] in checks["cursors"]["detail"]
    )
    assert checks["spool lag"]["detail"].startswith("0 bytes pending")
    assert proc.returncode == 0, proc.stdout


def test_doctor_fails_on_an_unreachable_postgresql_store_and_redacts_the_url(tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    # A port nothing listens on: the check fails with the reason, the password never shows.
    (home / "config.toml").write_text(
        f'[store]\nurl = "postgresql://quill:{SECRET}@127.0.0.1:1/quill"\n'
    )
    proc = QuillCLI(home).run("doctor", "--json", check=False)
    assert SECRET not in proc.stdout + proc.stderr
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    assert (
        checks["store (postgresql)"]["status"] == "fail"
        and ":***@" in checks["store (postgresql)"]["detail"]
    )
    assert proc.returncode == 1


def test_redact_hides_every_password_spelling_and_keeps_the_rest():
    from quill.store.postgres.reach import redact

    assert (
        redact(f"postgresql://quill:{SECRET}@db:5432/quill")
        == "postgresql://quill:***@db:5432/quill"
    )
    assert (
        redact(f"postgresql://quill@db/quill?sslmode=require&password={SECRET}")
        == "postgresql://quill@db/quill?sslmode=require&password=***"
    )
    assert (
        redact("postgresql://quill@db/quill?options=-csearch_path%3Dx")
        == "postgresql://quill@db/quill?options=-csearch_path%3Dx"
    )
    assert (
        redact(f"postgresql://quill:{SECRET}@[::1]:5432/q") == "postgresql://quill:***@[::1]:5432/q"
    )


def test_doctor_on_a_fresh_postgresql_database_says_the_writer_creates_the_schema(
    tmp_path, pg_store_url
):
    """Before the first `quill run` the database holds no Quill schema: that is the state
    the README's set-up leaves, not a failure (as `state.db not created yet` on SQLite)."""
    home = tmp_path / "h"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(f'[store]\nurl = "{pg_store_url}"\n')
    (home / "config.toml").chmod(0o600)
    proc = QuillCLI(home).run("doctor", "--json", check=False)
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    store = checks["store (postgresql)"]
    assert store["status"] == "ok", store
    assert "no Quill schema yet" in store["detail"] and "quill run" in store["detail"]
    assert proc.returncode == 0, proc.stdout
