"""``quill run`` says on its terminal when the writer keeps retrying a failure: a store it
cannot open (here a PostgreSQL database that does not exist) otherwise leaves ``quill run
--until-idle`` waiting in silence, as if the spool were being applied."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit

from harness import make_home


def test_run_until_idle_says_the_writer_cannot_open_a_missing_database(quill, home, pg_url):
    parts = urlsplit(pg_url)
    missing = urlunsplit(parts._replace(path="/quill_missing_" + uuid.uuid4().hex[:12]))
    make_home(home, url=missing, watch={"enabled": False})
    quill.run("push", "--session", "s", input='{"role": "user", "content": "hi"}')
    proc = quill.run("run", "--until-idle", "--timeout", "20", check=False, timeout=120)
    assert proc.returncode == 4, proc.stderr  # not idle before --timeout: nothing applied
    said = [ln for ln in proc.stderr.splitlines() if "keeps retrying" in ln]
    assert len(said) == 1, proc.stderr  # once, not on every try
    assert "does not exist" in said[0] and "quill status" in said[0]


def test_run_until_idle_without_a_timeout_ends_when_the_writer_cannot_apply(quill, home, pg_url):
    # Before, it waited for ever: idle cannot come while every try fails.
    parts = urlsplit(pg_url)
    missing = urlunsplit(parts._replace(path="/quill_missing_" + uuid.uuid4().hex[:12]))
    make_home(home, url=missing, watch={"enabled": False}, writer={"give_up_s": 3})
    quill.run("push", "--session", "s", input='{"role": "user", "content": "hi"}')
    proc = quill.run("run", "--until-idle", check=False, timeout=180)
    assert proc.returncode == 1, proc.stderr  # Exit.FAILED: a storage error
    error = [ln for ln in proc.stderr.splitlines() if ln.startswith("quill: error: ")]
    assert len(error) == 1, proc.stderr
    assert "the writer cannot apply" in error[0] and "does not exist" in error[0]
    assert "give_up_s" in proc.stderr  # the hint: how to try longer
