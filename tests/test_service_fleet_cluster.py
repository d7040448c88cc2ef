"""The Fleet page on a PostgreSQL cluster shows what `quill status` has: every host's cursor
and last commit, the scheduler leader and the integrity check (real PostgreSQL, two data
dirs sharing one store, a real `quill serve`)."""

from __future__ import annotations

import time

import httpx
from conftest import QuillCLI, pg_data_dir
from service_helpers import served


def test_fleet_page_shows_every_host_the_leader_and_integrity(tmp_path, pg_store_url):
    from quill.jobs.pg_jobs import pg_integrity_check
    from quill.store.postgres import PgConnection
    from quill.store.sqlite.job_runs import record_job_run

    here = pg_data_dir(tmp_path / "a", pg_store_url, 3)
    other = pg_data_dir(tmp_path / "b", pg_store_url, 2)
    started = time.time()
    figures = pg_integrity_check(pg_store_url)
    conn = PgConnection(pg_store_url)
    try:
        record_job_run(conn, "pg_integrity_check", started, time.time(), "ok", figures)
        conn.execute(
            "INSERT INTO leader_lease(role, holder, term, acquired_at, renewed_at, expires_at) "
            "VALUES ('scheduler', 'hostb:4242:abc', 3, ?, ?, ?)",
            (started, started, started + 3600),
        )
    finally:
        conn.close()
    quill = QuillCLI(tmp_path / "a")
    with served(quill) as base:
        page = httpx.get(f"{base}/fleet").text
    for host in (here, other):
        assert f'data-spool="{host["spool_id"]}"' in page
        assert host["to"] in page
    assert "hostb:4242:abc" in page and "term 3" in page
    integrity = page.split('id="cluster-integrity"', 1)[1].split("</p>", 1)[0]
    assert ">ok<" in integrity
