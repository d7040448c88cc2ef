"""``Spool.append_many``: several records made durable by one ``fdatasync`` per segment they
land in (counted by ``strace`` on a real producer process), every record readable in order
with its producer's numbers unbroken, a refused op appending nothing, and a real full disk
mid-request acknowledging exactly the records that reached the disk before it."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, small_tmpfs

from quill.spool import Position, Spool, SpoolFullError, SpoolReader
from quill.spool.errors import RecordTooLargeError
from quill.spool.segments import list_segments


def _op(n: int, size: int = 100) -> tuple[str, dict, str]:
    message = {"role": "user", "id": f"m{n}", "content": f"{n}:" + "x" * size}
    return "messages.append", {"session_id": "s", "messages": [message]}, f"b{n}"


def _fill_but(filler, pages: int):
    """Fill the filesystem holding ``filler`` (a new file), then free ``pages`` 4 KiB pages
    of it: room for a few records, not for all. Returns the file (unlink it for room)."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    os.ftruncate(fd, os.fstat(fd).st_size - pages * 4096)
    os.close(fd)
    return filler


def _entries(spool_dir) -> list:
    return [e for e in SpoolReader(spool_dir).read(Position(1, 0), max_bytes=1 << 24)]


def _syncs_by_segment(spool_dir, script: str) -> tuple[dict[str, int], str]:
    """Run ``script`` (Python, ``spool_dir`` bound as ``SPOOL``) in a process traced by
    ``strace``; ``({segment file name: fdatasync calls on it}, the script's stdout)``."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed: the fdatasync calls cannot be counted")
    trace = spool_dir.parent / "strace.txt"
    code = f"SPOOL = {str(spool_dir)!r}\n{script}"
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-y", "-e", "trace=fdatasync", "-o", str(trace)]
        + [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    if proc.returncode != 0 and "ptrace" in proc.stderr:
        pytest.skip(f"strace cannot trace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    counts: dict[str, int] = {}
    for line in trace.read_text().splitlines():
        if "fdatasync(" in line and ".jsonl>" in line:
            name = line.split(".jsonl>")[0].rsplit("/", 1)[1] + ".jsonl"
            counts[name] = counts.get(name, 0) + 1
    return counts, proc.stdout


SCRIPT = """
import json
from quill.spool import Spool
ops = [("messages.append", {"session_id": "s", "messages": [
    {"role": "user", "id": f"m{n}", "content": f"{n}:" + "x" * 100}]}, f"b{n}")
    for n in range(N)]
with Spool(SPOOL, segment_bytes=SEGMENT, producer_id="p") as sp:
    acks = sp.append_many(ops)
print(json.dumps([[a.position.segment, a.position.offset, a.batch_id] for a in acks]))
"""


def test_one_fdatasync_makes_a_requests_records_durable(tmp_path):
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    counts, out = _syncs_by_segment(spool_dir, f"N = 40\nSEGMENT = 1 << 20\n{SCRIPT}")
    assert counts == {"00000001.jsonl": 1}, counts  # one per op before: 40
    acks = json.loads(out)
    entries = _entries(spool_dir)
    assert (
        [e.record["batch"] for e in entries] == [f"b{n}" for n in range(40)] == [a[2] for a in acks]
    )
    assert [e.record["seq"] for e in entries] == list(range(1, 41))
    assert [[e.position.segment, e.position.offset] for e in entries] == [a[:2] for a in acks]


def test_a_rotation_inside_the_request_syncs_each_segment_once(tmp_path):
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    # ~190-byte records, 2 KB segments: the 30 records fill three segments.
    counts, out = _syncs_by_segment(spool_dir, f"N = 30\nSEGMENT = 2048\n{SCRIPT}")
    segments = sorted({a[0] for a in json.loads(out)})
    assert len(segments) >= 3, segments
    assert counts == {f"{s:08d}.jsonl": 1 for s in segments}, counts
    entries = _entries(spool_dir)
    assert [e.record["batch"] for e in entries] == [f"b{n}" for n in range(30)]
    assert [e.record["seq"] for e in entries] == list(range(1, 31))


def test_a_refused_op_appends_nothing_of_the_request(tmp_path):
    with Spool(tmp_path / "spool", max_record_bytes=4096, producer_id="p") as sp:
        sp.append(*_op(0)[:2], batch_id="first")
        with pytest.raises(RecordTooLargeError):
            sp.append_many([_op(1), _op(2, size=8000), _op(3)])
        acks = sp.append_many([_op(4), _op(5)])
    entries = _entries(tmp_path / "spool")
    assert [e.record["batch"] for e in entries] == ["first", "b4", "b5"]
    assert [e.record["seq"] for e in entries] == [1, 2, 3]  # no number spent on what was refused
    assert [a.batch_id for a in acks] == ["b4", "b5"]


def test_a_full_disk_mid_request_acks_what_reached_the_disk(tmp_path):
    with small_tmpfs(tmp_path / "fs", "1m") as fs:
        spool_dir = fs / "spool"
        spool_dir.mkdir()
        with Spool(spool_dir, producer_id="p") as sp:
            sp.append(*_op(0)[:2], batch_id="first")  # the segment exists, its size known
            filler = _fill_but(fs / "filler", 3)
            with pytest.raises(SpoolFullError) as caught:
                sp.append_many([_op(n, size=1500) for n in range(1, 40)])
            acked = [a.batch_id for a in caught.value.acks]
            assert 0 < len(acked) < 39, acked  # some fitted, not all
            assert acked == [f"b{n}" for n in range(1, len(acked) + 1)]  # a prefix
            filler.unlink()
            retry = sp.append_many([_op(n, size=1500) for n in range(len(acked) + 1, 40)])
            assert len(retry) == 39 - len(acked)
        entries = _entries(spool_dir)
        # Every acknowledged record is there whole, the one cut by the full disk is gone
        # (no torn line), and the producer's numbers run on without a gap.
        assert [e.record["batch"] for e in entries] == ["first"] + [f"b{n}" for n in range(1, 40)]
        assert [e.record["seq"] for e in entries] == list(range(1, 41))
        assert len(list_segments(spool_dir)) == 1


def test_the_api_answers_a_full_disk_mid_request_with_the_acks_of_what_is_durable(tmp_path):
    """``POST /api/v1/ops`` (the real app) whose spool fills part-way through the request:
    507 ``spool-full`` listing the acks of the ops made durable; the retry with the same batch
    ids applies every op once."""
    from harness import drain, make_home
    from starlette.testclient import TestClient

    from quill.ops import logs
    from quill.ops.client.client import Client
    from quill.ops.service.app import create_app
    from quill.ops.service.tokens import TokenStore

    cfg = make_home(tmp_path / "home")
    with small_tmpfs(cfg.spool_dir, "1m"):
        secret = TokenStore(cfg.tokens_db).create("w", ["write"])[0]
        app = create_app(cfg, logs.configure(None, "api"), anonymous="none")
        ops = [
            {"op": op, "data": {**data, "session_id": "full"}, "batch": batch}
            for op, data, batch in (_op(n, size=1500) for n in range(1, 40))
        ]
        auth = {"Authorization": f"Bearer {secret}"}
        with TestClient(app, base_url="http://127.0.0.1") as web:
            first = {"op": "messages.append", "data": _op(0)[1] | {"session_id": "full"}}
            assert web.post("/api/v1/ops", json={"ops": [first]}, headers=auth).status_code == 202
            filler = _fill_but(cfg.spool_dir / "filler", 3)
            r = web.post("/api/v1/ops", json={"ops": ops}, headers=auth)
            assert r.status_code == 507, r.text
            error = r.json()["error"]
            assert error["reason"] == "spool-full"
            acked = [a["batch"] for a in error["acks"]]
            assert 0 < len(acked) < 39 and acked == [f"b{n}" for n in range(1, len(acked) + 1)]
            filler.unlink()
            again = web.post("/api/v1/ops", json={"ops": ops}, headers=auth)
            assert again.status_code == 202, again.text
        drain(cfg.home)
        got = Client(home=str(cfg.home)).transcript("full")["messages"]
        assert [m["id"] for m in got] == [f"m{n}" for n in range(40)]  # each once
