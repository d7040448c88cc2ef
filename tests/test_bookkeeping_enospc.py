"""A full disk under a process's own bookkeeping files (run/*.json status files, lease
identities, the halt record) never takes the process down: it keeps doing its real work,
reports the failure at most every ``UNWRITABLE_REPORT_S`` per file, and writes the files
again once space returns. Repeated warnings are throttled as documented (one
``home.Throttle``). The disk is really full: a small tmpfs mounted as the run directory and
filled up (root only; skipped where mounting is refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, quill_env, small_tmpfs
from harness import InProcessWriter, make_home

from quill.home import RunDir, WriterStatus
from quill.store.sqlite.connection import open_reader

#: As documented (docs/operations.md, "Bookkeeping on a full disk" and "The WAL"): an
#: unwritable bookkeeping file is reported at most every 5 s per file, and a blocked TRUNCATE
#: checkpoint is retried (and logged) every 5 s.
UNWRITABLE_REPORT_S = 5.0
TRUNCATE_RETRY_S = 5.0


def _fill(directory: Path) -> Path:
    """Write a filler file in ``directory`` until the filesystem refuses (ENOSPC)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (4096, 1):  # whole pages, then any last bytes
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == 28, exc  # ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


def _events(log: Path, name: str) -> list[dict]:
    out = []
    for line in log.read_text().splitlines() if log.exists() else ():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == name:
            out.append(event)
    return out


def _worker(home: Path, role: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from quill.ops.worker_main import main; main()",
            role,
            "--home",
            str(home),
            "--parent",
            str(os.getpid()),
        ],
        env=quill_env(home),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_scheduler_and_consumer_stay_up_on_a_full_run_directory(tmp_path):
    """The trial's crash loop: the scheduler exited on ENOSPC publishing run/scheduler.json
    (and the consumer on its first status, any of them on its lease identity)."""
    cfg = make_home(tmp_path / "home")
    procs = []
    with small_tmpfs(cfg.run_dir, "64k"):
        os.chmod(cfg.run_dir, 0o700)
        filler = _fill(cfg.run_dir)
        try:
            procs = [_worker(cfg.home, "scheduler"), _worker(cfg.home, "consumer")]
            log = cfg.logs_dir / "scheduler.log"
            deadline = time.monotonic() + 90  # a loaded machine starts APScheduler slowly
            while not _events(log, "run_dir.unwritable") and time.monotonic() < deadline:
                assert procs[0].poll() is None, procs[0].stderr.read()[-2000:]
                time.sleep(0.2)
            watched = 3 * UNWRITABLE_REPORT_S + 1
            time.sleep(watched)
            for role, p in zip(("scheduler", "consumer"), procs):
                assert p.poll() is None, (
                    f"the {role} exited {p.returncode} on a full run directory: "
                    f"{p.stderr.read()[-2000:]}"
                )
            reports = _events(log, "run_dir.unwritable")
            assert reports and all(r["errno"] == 28 for r in reports), log.read_text()[-3000:]
            # The scheduler publishes every second: ~watched reports unthrottled.
            assert len(reports) <= watched / UNWRITABLE_REPORT_S + 1, reports
            assert sum(r["suppressed"] for r in reports) >= 3, reports
            filler.unlink()  # space returns: the status is published again
            deadline = time.monotonic() + 60
            while RunDir(cfg.home).live("scheduler") is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert RunDir(cfg.home).live("scheduler") is not None
            assert _events(log, "run_dir.writable_again")
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=30)


def test_writer_applies_on_a_full_run_directory_and_reports_it_throttled(tmp_path):
    """The writer's status file cannot be written: it goes on applying, says so (once per
    ``UNWRITABLE_REPORT_S``, with the count left out), and publishes again afterwards."""
    w = InProcessWriter(tmp_path / "home")
    try:
        w.say("s", "before")
        w.until_idle()
        with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
            # The run directory moves onto the small filesystem with its lease file.
            for name in os.listdir(w.cfg.run_dir):
                src = w.cfg.run_dir / name
                (mnt / name).write_bytes(src.read_bytes())
            os.rename(w.cfg.run_dir, tmp_path / "old-run")
            os.symlink(mnt, w.cfg.run_dir)
            filler = _fill(mnt)
            started = time.monotonic()
            for i in range(200):
                w.say("s", f"during {i}")
                w.turn()
                w.turn()
            took = time.monotonic() - started
            reports = w.events("run_dir.unwritable")
            # 400 failed publications, at most one report per UNWRITABLE_REPORT_S of the time
            # they took (a loaded machine stretches it)
            assert 1 <= len(reports) <= took / UNWRITABLE_REPORT_S + 1, (took, reports)
            filler.unlink()
            time.sleep(UNWRITABLE_REPORT_S / 10)
            w.say("s", "after")
            w.until_idle()
            assert w.events("run_dir.writable_again")
            conn = open_reader(w.cfg.state_db)
            try:
                n = conn.execute("SELECT count(*) FROM messages WHERE session_id = 's'")
                assert n.fetchone()[0] == 202
            finally:
                conn.close()
            os.unlink(w.cfg.run_dir)
            os.rename(tmp_path / "old-run", w.cfg.run_dir)
    finally:
        w.close()


def test_checkpoint_blocked_warning_is_throttled_under_load(tmp_path):
    """A reader holds an old snapshot while batches keep arriving: the writer tries a
    TRUNCATE after every busy spell and each is refused; the warning is logged once per
    ``TRUNCATE_RETRY_S`` (docs/operations.md), with the attempts left out counted (the
    trial saw 194 warnings in 170 s)."""
    w = InProcessWriter(tmp_path / "home")
    try:
        w.say("s", "x" * 1000)
        w.until_idle()
        reader = open_reader(w.cfg.state_db)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM messages").fetchall()  # pins a snapshot
            for i in range(60):  # > 1 MiB of WAL the reader keeps from being reset
                w.say("s", *[f"{i}-{k} " + "y" * 2000 for k in range(20)])
            w.until_idle()
            simulated = 170.0
            cycles = int(simulated)
            for i in range(cycles):  # one batch a second: a busy turn, then an idle one
                w.say("s", f"load {i}")
                w.turn(0.5)
                w.turn(0.5)
            warnings = w.events("writer.checkpoint_blocked")
            assert warnings, "the blocked checkpoint was never reported"
            assert len(warnings) <= simulated / TRUNCATE_RETRY_S + 2, len(warnings)
            assert sum(e.get("suppressed", 0) for e in warnings) >= cycles / 2, warnings[-1]
            status = WriterStatus.from_json(w.status())
            assert status.wal_blocked_since is not None
        finally:
            reader.close()
    finally:
        w.close()
