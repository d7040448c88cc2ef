"""Writer job runs left ``running`` on a shared PostgreSQL store by a version from before runs
named their process (no ``holder``) are closed as interrupted, saying so, once no live writer
can have started them (every live claim was taken after they began); while one may have,
they are left alone."""

from __future__ import annotations

import json
import time

import psycopg
from harness import make_home

from quill.store import factory
from quill.store.postgres.store import CLOCK_SKEW_S
from quill.store.sqlite.job_runs import UNKNOWN_HOLDER


def _untagged(url: str, started_at: float) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "INSERT INTO job_runs (job, started_at, outcome, figures) "
            "VALUES ('auto_prune', %s, 'running', %s) RETURNING id",
            (started_at, json.dumps({"runner": "writer"})),
        ).fetchone()[0]


def _outcomes(url: str) -> dict[int, tuple[str, str | None]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, outcome, error FROM job_runs")}


def test_runs_from_before_the_holder_tag_are_closed_once_no_live_writer_can_hold_them(
    tmp_path, pg_store_url
):
    cfg = make_home(tmp_path / "home", pg_store_url)
    store = factory.open_store(cfg, writer=True)  # connects and claims its spool id
    try:
        now = time.time()
        old = _untagged(pg_store_url, now - 4 * CLOCK_SKEW_S)
        recent = _untagged(pg_store_url, now)  # this writer was running then: may be its own
        with psycopg.connect(pg_store_url, autocommit=True) as conn:
            # Another host's writer, alive and claimed since before the old run began.
            conn.execute(
                "INSERT INTO spool_claims (spool_id, holder, host, path, pid, claimed_at, "
                "deadline) VALUES ('B', 'tok-b', 'other-host', '/elsewhere', 1, %s, "
                "extract(epoch from now()) + 600)",
                (now - 8 * CLOCK_SKEW_S,),
            )
        store.close_dead_runs()
        assert _outcomes(pg_store_url)[old] == ("running", None)  # B may be running it
        with psycopg.connect(pg_store_url, autocommit=True) as conn:
            conn.execute("UPDATE spool_claims SET deadline = 0 WHERE spool_id = 'B'")  # gone
        figures = store.close_dead_runs()
        outcome = _outcomes(pg_store_url)
        assert outcome[old] == ("interrupted", UNKNOWN_HOLDER), outcome
        assert outcome[recent] == ("running", None), outcome
        assert figures["interrupted"] == 1 and figures["left_running"] == 1, figures
    finally:
        store.close()
