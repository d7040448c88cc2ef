"""Several hosts, one PostgreSQL store: four data dirs, each with its
own spool, producer process and writer process, drain into one store. One host's writer is
SIGKILLed again and again, another is stopped for a while and restarted. Every acknowledged
message is stored exactly once, and a session written from two hosts keeps a serial order.
Real processes, real ``kill -9``, the real PostgreSQL server; PostgreSQL only by nature."""

from __future__ import annotations

import json
import multiprocessing
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

from quill.spool import Spool, SpoolReader
from quill.spool.identity import load_or_create

psycopg = pytest.importorskip("psycopg")

HOSTS = 4
BATCHES = 120  # per host
SHARED_EVERY = 3  # hosts 0 and 1 write to the shared session every few batches


def _produce(home: str, host: int, acks: str) -> None:
    """One host's agent: appends batches to its own spool and logs each acknowledged one."""
    spool = Spool(Path(home) / "spool")
    with open(acks, "a", encoding="utf-8") as log:
        for b in range(BATCHES):
            sid = f"h{host}-s{b % 5}"
            msgs = [{"role": "user", "content": f"h{host} b{b} m{j} question"} for j in range(3)]
            ack = spool.append("messages.append", {"session_id": sid, "messages": msgs})
            log.write(
                json.dumps({"batch": ack.batch_id, "contents": [m["content"] for m in msgs]}) + "\n"
            )
            if host in (0, 1) and b % SHARED_EVERY == 0:
                call = f"call-h{host}-b{b}"
                shared = [
                    {"role": "user", "content": f"shared h{host} b{b} ask"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call,
                                "type": "function",
                                "function": {"name": "bash", "arguments": "{}"},
                            }
                        ],
                    },
                    {
                        "role": "tool",
                        "tool_call_id": call,
                        "content": f"shared h{host} b{b} result",
                    },
                ]
                ack = spool.append("messages.append", {"session_id": "shared", "messages": shared})
                log.write(
                    json.dumps({"batch": ack.batch_id, "contents": [m["content"] for m in shared]})
                    + "\n"
                )
            log.flush()
            time.sleep(random.uniform(0.01, 0.05))
    spool.close()


def _writer(home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "quill.ops.worker_main", "writer", "--home", str(home)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_running(home: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until the writer has published its status (its signal handlers are installed by then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads((home / "run" / "writer.json").read_text())["pid"] == proc.pid:
                return
        except (OSError, ValueError, KeyError):
            pass
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    raise AssertionError("writer did not start")


def _caught_up(url: str, homes: list[Path]) -> bool:
    with psycopg.connect(url) as conn:
        cursors = {
            r[0]: (r[1], r[2])
            for r in conn.execute('SELECT spool_id, segment, "offset" FROM spool_cursor')
        }
    for home in homes:
        end = SpoolReader(home / "spool").end()
        if cursors.get(load_or_create(home / "spool-id")) != (end.segment, end.offset):
            return False
    return True


def test_four_hosts_with_killed_and_stopped_writers_store_every_ack_exactly_once_in_serial_order(
    tmp_path, pg_store_url
):
    homes = [tmp_path / f"host{i}" for i in range(HOSTS)]
    for home in homes:
        (home / "spool").mkdir(parents=True)
        (home / "config.toml").write_text(
            f'[store]\nurl = "{pg_store_url}"\n[writer]\nchunk_rows = 50\n'
        )
    writers = {i: _writer(h) for i, h in enumerate(homes)}
    producers = [
        multiprocessing.Process(target=_produce, args=(str(h), i, str(h / "acks.jsonl")))
        for i, h in enumerate(homes)
    ]
    for p in producers:
        p.start()
    kills = 0
    stopped_at = time.monotonic()
    restarted = False
    try:
        while any(p.is_alive() for p in producers) or kills < 4 or not restarted:
            time.sleep(random.uniform(0.6, 1.2))
            writers[0].send_signal(signal.SIGKILL)  # host 0: kill -9, again and again
            writers[0].wait()
            kills += 1
            writers[0] = _writer(homes[0])
            if writers[3] is not None and time.monotonic() > stopped_at and not restarted:
                _wait_running(homes[3], writers[3])
                writers[3].send_signal(signal.SIGTERM)  # host 3: stopped for a while ...
                assert writers[3].wait(30) == 0
                writers[3] = None
                stopped_at = time.monotonic()
            elif writers[3] is None and time.monotonic() - stopped_at > 3.0:
                writers[3] = _writer(homes[3])  # ... and restarted
                restarted = True
        if writers[3] is None:
            writers[3] = _writer(homes[3])
        for p in producers:
            p.join(60)
            assert p.exitcode == 0
        deadline = time.monotonic() + 120
        while not _caught_up(pg_store_url, homes):
            assert time.monotonic() < deadline, "writers did not drain their spools"
            for w in writers.values():
                assert w.poll() is None, w.stderr.read().decode()[-2000:]
            time.sleep(0.3)
    finally:
        for w in writers.values():
            if w is not None and w.poll() is None:
                w.send_signal(signal.SIGTERM)
                w.wait(30)

    acked = [
        json.loads(line) for h in homes for line in (h / "acks.jsonl").read_text().splitlines()
    ]
    want = sorted(c for a in acked for c in a["contents"] if c is not None)
    with psycopg.connect(pg_store_url) as conn:
        stored = sorted(
            r[0] for r in conn.execute("SELECT content FROM messages WHERE content IS NOT NULL")
        )
        batches = {r[0] for r in conn.execute("SELECT batch_id FROM applied_batches")}
        shared = conn.execute(
            "SELECT m.id, b.batch_id, m.role, m.tool_call_id, m.content FROM messages m "
            "JOIN batches b ON b.id = m.batch WHERE m.session_id = 'shared' ORDER BY m.id"
        ).fetchall()
        spools = conn.execute("SELECT count(*) FROM spool_cursor").fetchone()[0]
    assert kills >= 4 and restarted
    assert stored == want  # every acknowledged message, exactly once
    assert batches == {a["batch"] for a in acked}
    assert spools == HOSTS
    # The shared session, written from hosts 0 and 1: each batch's rows are contiguous (no
    # other batch in between), every tool result directly follows its call, and each host's
    # batches keep that host's order.
    order = [r[1] for r in shared]
    runs = [b for i, b in enumerate(order) if i == 0 or order[i - 1] != b]
    assert len(runs) == len(set(runs)) == len(shared) // 3
    for i in range(0, len(shared), 3):
        assert [r[2] for r in shared[i : i + 3]] == ["user", "assistant", "tool"]
    for host in (0, 1):
        seq = [
            int(r[4].split()[2][1:])
            for r in shared
            if r[2] == "user" and r[4].startswith(f"shared h{host} ")
        ]
        assert seq == sorted(seq) and len(seq) == len(range(0, BATCHES, SHARED_EVERY))
