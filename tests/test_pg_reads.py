"""Every read surface of a data dir on the PostgreSQL store reads that store: the client
library, `wait`, the CLI's listings, transcripts, search and export, the HTTP API and the
dashboard (ops/client/stores.py). A data dir in multi-machine mode has no state.db; a reader that
opened one would answer "no store" or nothing at all while the rows are in PostgreSQL.
Real server, real spool, the real writer's drain and the real CLI and HTTP server."""

from __future__ import annotations

import json
import subprocess
import threading

import httpx
from conftest import REPO, QuillCLI, pg_data_dir, quill_env
from service_helpers import served

import quill as quill_pkg

WORD = "zephyrine"


def _drain(home) -> None:
    from quill import home as config
    from quill.ops import logs
    from quill.ops.recover.postgres import drain

    drain(config.load(home), logs.configure(None, "test"))


def test_every_read_surface_reads_the_postgresql_store(tmp_path, pg_store_url):
    home = tmp_path / "h"
    pg_data_dir(home, pg_store_url, 3)  # session "h-s": m0, m1, m2, drained
    client = quill_pkg.Client(str(home))
    ack = client.append(
        "h-s", [{"role": "assistant", "content": f"the {WORD} answer"}], source="agent"
    )
    _drain(home)
    assert not (home / "state.db").exists()

    # client library and wait
    assert client.wait(ack, timeout=5).status == "applied"
    assert [m["content"] for m in client.messages("h-s")][-1] == f"the {WORD} answer"
    assert "h-s" in [s["id"] for s in client.sessions()]
    assert [h["session_id"] for h in client.search(WORD)] == ["h-s"]

    # CLI
    cli = QuillCLI(home)
    assert "h-s" in [s["id"] for s in cli.json("sessions", "list", "--json")["sessions"]]
    shown = cli.json("sessions", "show", "h-s", "--json")
    assert len(shown["messages"]) == 4
    assert [h["session_id"] for h in cli.json("search", WORD, "--json")["hits"]] == ["h-s"]
    out = tmp_path / "export.jsonl"
    proc = cli.run("export", "-o", str(out))
    assert WORD in out.read_text() and "no store" not in proc.stderr

    # `quill push --wait` returns once this host's writer applied it (drained here meanwhile)
    push = subprocess.Popen(
        cli.argv("push", "--session", "h-s", "--wait", "60", "--json"),
        env=quill_env(home),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stop = threading.Event()

    def drain_until_stopped() -> None:
        while not stop.wait(0.2):
            _drain(home)

    t = threading.Thread(target=drain_until_stopped)
    t.start()
    try:
        stdout, stderr = push.communicate(
            json.dumps({"role": "user", "content": "pushed"}), timeout=120
        )
    finally:
        stop.set()
        t.join()
    assert push.returncode == 0, stderr
    assert "pushed" in [m["content"] for m in client.messages("h-s")]

    # HTTP API and dashboard
    with served(cli) as base:
        sessions = httpx.get(f"{base}/api/v1/sessions").json()["sessions"]
        assert "h-s" in [s["id"] for s in sessions]
        hits = httpx.get(f"{base}/api/v1/search", params={"q": WORD}).json()["hits"]
        assert [h["session_id"] for h in hits] == ["h-s"]
        msgs = httpx.get(f"{base}/api/v1/sessions/h-s/messages").json()["messages"]
        assert len(msgs) == 5
        page = httpx.get(f"{base}/sessions")
        assert page.status_code == 200 and "h-s" in page.text


def test_sqlite_only_commands_refuse_a_postgresql_data_dir_and_create_no_state_db(
    tmp_path, pg_store_url
):
    """`quill snapshot` and a live `quill spool replay` work on state.db only: on a data dir
    whose store is PostgreSQL they refuse (exit 2, with the command that does the job there)
    instead of writing a new, empty state.db beside it."""
    home = tmp_path / "h"
    pg_data_dir(home, pg_store_url, 2)
    cli = QuillCLI(home)
    snap = cli.run("snapshot", check=False)
    assert snap.returncode == 2 and "pg_dump" in snap.stderr
    replay = cli.run("spool", "replay", check=False)
    assert replay.returncode == 2 and "quill recover" in replay.stderr
    assert not (home / "state.db").exists()
    into = tmp_path / "copy.db"
    assert cli.run("spool", "replay", "--into", str(into)).returncode == 0 and into.exists()
