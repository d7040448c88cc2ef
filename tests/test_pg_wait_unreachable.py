"""A host cut off from its PostgreSQL server: ``quill push --wait`` appends (durable, acked)
and then waits. The wait's look at the store raised the unreachable server's
``TransientError`` out of the command: exit 1 ("quarantined"), no ack printed, and a hint
about SQLite checkpoints, so a caller that retries on failure pushed the batch again (a
doubled message without a batch id). An outage is "not applied yet": the wait goes on to its
timeout (the records are durable) and says the store could not be read. Real CLI process, a
real refused TCP port (no server behind it); PostgreSQL only (SQLite has no server)."""

from __future__ import annotations

import json
import socket

import pytest

from quill import home as config
from quill.ops.client.wait import wait_applied
from quill.spool import Spool, SpoolReader, WaitTimeoutError
from quill.spool.segments import START

pytest.importorskip("psycopg")


def _refused_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once closed: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/quill_cut_off"


@pytest.fixture
def cut_off(home):
    home.mkdir(parents=True)
    (home / "config.toml").write_text(f'[store]\nurl = "{_refused_url()}"\nconnect_timeout_s = 2\n')
    return home


def test_push_wait_while_the_server_is_unreachable_prints_the_ack_and_times_out(cut_off, quill):
    batch = {"session_id": "s", "messages": [{"role": "user", "content": "during the cut"}]}
    proc = quill.run("push", "--wait", "1", "--json", input=json.dumps(batch), check=False)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # TIMEOUT: durable, not applied
    acks = json.loads(proc.stdout)
    assert len(acks) == 1 and acks[0]["outcome"] == "pending" and acks[0]["batch"]
    assert "could not be read" in proc.stderr
    records = list(SpoolReader(cut_off / "spool").read(START))
    assert [r.record["batch"] for r in records] == [acks[0]["batch"]]


def test_a_wait_goes_on_through_an_unreachable_store_until_its_timeout(cut_off):
    cfg = config.load(cut_off)
    with Spool(cfg.spool_dir) as spool:
        ack = spool.append(
            "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": "x"}]}
        )
    with pytest.raises(WaitTimeoutError, match="could not be read"):
        wait_applied(cfg, ack.position, timeout=1.0)
