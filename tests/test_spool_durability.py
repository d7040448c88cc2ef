"""Exactly-once through kill -9, torn writes, bad records, disk full, many producers.

The crash-torture test is repeatable from a seed: QUILL_TORTURE_SEED (default 1234) and
QUILL_TORTURE_KILLS (default 8 writer kills; 40 in the QUILL_SLOW=1 variant) set it; the seed
is printed on failure.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, quill_env, run_processes, small_tmpfs, spool_producer

from quill.ops.recover.replay import replay
from quill.spool import START, Quarantine, Spool, SpoolFullError, SpoolReader
from quill.spool.record import encode
from quill.store import Reader


def _acking_producer(spool_dir: str, k: int, batches: int, ack_path: str, seed: int) -> None:
    """Append known batches; record each batch id only after append() returned (= acked)."""
    rng = random.Random(seed * 1000 + k)
    with Spool(spool_dir) as sp, open(ack_path, "a", encoding="utf-8") as acks:
        for n in range(batches):
            msgs = [
                {"role": "user", "id": f"{k}-{n}-{i}", "content": f"producer {k} batch {n} msg {i}"}
                for i in range(rng.randint(1, 5))
            ]
            ack = sp.append("messages.append", {"session_id": f"torture-{k}", "messages": msgs})
            acks.write(json.dumps({"batch": ack.batch_id, "ids": [m["id"] for m in msgs]}) + "\n")
            acks.flush()
            time.sleep(rng.random() * 0.004)


def _writer(home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "quill.ops.worker_main", "writer", "--home", str(home)],
        env=quill_env(home),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _store_ids(home: Path) -> tuple[list[tuple[str, str]], set[str]]:
    with Reader(home / "state.db") as r:
        rows = r.conn.execute("SELECT session_id, ext_id FROM messages ORDER BY id").fetchall()
        batches = {b for (b,) in r.conn.execute("SELECT batch_id FROM applied_batches")}
    return [tuple(x) for x in rows], batches


@pytest.mark.parametrize("kills", [8, pytest.param(40, marks=pytest.mark.slow)])
def test_crash_torture_exactly_the_acknowledged_batches(tmp_path, kills):
    seed = int(os.environ.get("QUILL_TORTURE_SEED", "1234"))
    kills = int(os.environ.get("QUILL_TORTURE_KILLS", kills))
    rng = random.Random(seed)
    home = tmp_path / "home"
    (home / "spool").mkdir(parents=True)
    (home / "config.toml").write_text("[writer]\nchunk_rows = 25\n")
    producers = [
        multiprocessing.Process(
            target=_acking_producer,
            args=(str(home / "spool"), k, 400, str(tmp_path / f"acks-{k}"), seed),
        )
        for k in range(4)
    ]
    for p in producers:
        p.start()
    for _ in range(kills):  # SIGKILL the writer at random moments while producers append
        w = _writer(home)
        time.sleep(rng.uniform(0.15, 0.7))
        w.send_signal(signal.SIGKILL)
        w.wait()
    for p in producers:
        p.join(120)
        assert p.exitcode == 0
    w = _writer(home)  # a final, uninterrupted writer drains the rest
    try:
        deadline = time.monotonic() + 120
        end = SpoolReader(home / "spool").end()
        while time.monotonic() < deadline:
            status = (
                json.loads((home / "run" / "writer.json").read_text())
                if (home / "run" / "writer.json").exists()
                else {}
            )
            if (
                status.get("pid") == w.pid
                and status.get("idle")
                and status.get("cursor") == str(end)
            ):
                break
            time.sleep(0.1)
    finally:
        w.send_signal(signal.SIGTERM)
        assert w.wait(30) == 0
    acked = [
        json.loads(line)
        for k in range(4)
        for line in (tmp_path / f"acks-{k}").read_text().splitlines()
    ]
    rows, batches = _store_ids(home)
    expected = sorted((f"torture-{a['ids'][0].split('-')[0]}", i) for a in acked for i in a["ids"])
    assert sorted(rows) == expected, f"seed {seed}: lost or doubled messages"
    assert {a["batch"] for a in acked} <= batches, f"seed {seed}"
    # per-producer order is kept: ids of one session appear in append order
    for k in range(4):
        got = [i for s, i in rows if s == f"torture-{k}"]
        assert got == [i for a in acked if a["ids"][0].startswith(f"{k}-") for i in a["ids"]]


def _die_mid_record(spool_dir: str) -> None:
    """A producer that holds the segment lock, writes half a record and is SIGKILLed."""
    import fcntl

    sp = Spool(spool_dir)
    fd = sp._active_fd()
    line = encode(
        {
            "v": 1,
            "op": "session.create",
            "batch": "torn",
            "data": {"session_id": "torn", "pad": "x" * 5000},
        }
    )
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, line[: len(line) // 2])
    os.kill(os.getpid(), signal.SIGKILL)


def test_producer_killed_mid_record_does_not_harm_the_next_append(tmp_path):
    spool_dir = tmp_path / "spool"
    with Spool(spool_dir) as sp:
        sp.append("session.create", {"session_id": "before"})
    p = multiprocessing.Process(target=_die_mid_record, args=(str(spool_dir),))
    p.start()
    p.join(30)
    assert p.exitcode == -signal.SIGKILL
    with Spool(spool_dir) as sp:
        sp.append("session.create", {"session_id": "after"})
    result = replay(spool_dir, tmp_path / "state.db", None)
    assert (result["applied"], result["rejected"]) == (2, 1)
    with Reader(tmp_path / "state.db") as r:
        assert {s["id"] for s in r.list_sessions()} == {"before", "after"}
    [entry] = Quarantine(spool_dir).entries()
    assert entry["reason"] == "torn-write" and entry["raw"].startswith(
        '{"v":1,"op":"session.create","batch":"torn"'
    )


def test_damaged_line_in_the_middle_every_line_after_it_is_applied(tmp_path):
    spool_dir = tmp_path / "spool"
    with Spool(spool_dir) as sp:
        for i in range(10):
            sp.append(
                "messages.append",
                {"session_id": "s", "messages": [{"role": "user", "content": f"m{i}"}]},
            )
    seg = spool_dir / "00000001.jsonl"
    lines = seg.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"m3", b"M3")  # checksum mismatch
    lines[5] = b"this is not json at all\n"  # garbage
    seg.write_bytes(b"".join(lines))
    result = replay(spool_dir, tmp_path / "state.db", None)
    assert (result["applied"], result["rejected"]) == (8, 2)
    with Reader(tmp_path / "state.db") as r:
        assert [m["content"] for m in r.get_messages("s")] == [
            f"m{i}" for i in range(10) if i not in (3, 5)
        ]
    assert sorted(e["reason"] for e in Quarantine(spool_dir).entries()) == ["checksum", "checksum"]
    assert replay(spool_dir, tmp_path / "state.db", START)["applied"] == 0  # replay is idempotent


@pytest.fixture
def small_fs(tmp_path):
    with small_tmpfs(tmp_path / "small", "256k") as mnt:
        yield mnt


def test_disk_full_gives_a_clear_error_leaves_no_torn_record_and_recovers(small_fs, tmp_path):
    spool_dir = small_fs / "spool"
    filler = small_fs / "filler"
    acked = []
    with Spool(spool_dir) as sp:
        filler.write_bytes(b"\0" * (200 * 1024))
        with pytest.raises(SpoolFullError) as info:
            for i in range(1000):
                acked.append(
                    sp.append(
                        "messages.append",
                        {
                            "session_id": "s",
                            "messages": [
                                {"role": "user", "id": str(i), "content": f"{i} " + "y" * 3000}
                            ],
                        },
                    )
                )
        assert str(spool_dir) in str(info.value) and "bytes free" in str(info.value)
        assert acked, "some appends should have fitted"
        entries = list(SpoolReader(spool_dir).read(START, max_bytes=1 << 30))
        assert [e.position for e in entries] == [a.position for a in acked]  # nothing partial
        assert all(e.record is not None for e in entries)
        assert not SpoolReader(spool_dir).has_partial_tail(entries[-1].next)
        filler.unlink()  # space returns
        acked.append(
            sp.append(
                "messages.append",
                {
                    "session_id": "s",
                    "messages": [
                        {"role": "user", "id": "late", "content": "after the disk had room again"}
                    ],
                },
            )
        )
    result = replay(spool_dir, tmp_path / "state.db", None)  # the drain reads a full disk fine
    assert result["applied"] == len(acked) and result["rejected"] == 0


def test_sixteen_producers_with_large_messages(tmp_path):
    """16 processes × 2,000 batches, every 25th a 100 KB message: no interleaved bytes,
    every batch present, per-producer (= per-session) order kept."""
    run_processes(spool_producer, [(str(tmp_path), p, 2000, True) for p in range(16)], timeout=300)
    entries = list(SpoolReader(tmp_path).read(START, max_bytes=1 << 40))
    assert len(entries) == 32000 and all(e.record is not None for e in entries)
    order: dict[str, list[int]] = {}
    for e in entries:
        msg = e.record["data"]["messages"][0]
        p, n = msg["id"].split("-")
        order.setdefault(p, []).append(int(n))
        assert msg["content"].startswith(f"p{p}-b{n}-")
        assert len(msg["content"]) > (100_000 if int(n) % 25 == 0 else 50)
    assert order == {str(p): list(range(2000)) for p in range(16)}
