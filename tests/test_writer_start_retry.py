"""A writer whose store opened but whose start failed retryably (the cursor proof could not
open a spool segment: no file descriptor left) must start over at the next try. The SQLite
store stays open across a retry, so the writer used to step its drain from the unproved
default cursor with no job runner made: the first idle step raised ``AttributeError``
(``None.run_one``) and the writer crashed. Real SQLite store and spool; the descriptors are
really exhausted (``RLIMIT_NOFILE`` lowered in this process, then restored)."""

from __future__ import annotations

import gc
import os
import resource
import time
from collections import Counter

import apsw
from harness import drain, make_home

from quill.ops import logs
from quill.ops.client.client import Client
from quill.workers.writer import Writer


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) - 1  # less the listing's own


def _stored(cfg) -> Counter:
    conn = apsw.Connection(str(cfg.state_db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return Counter(r[0] for r in conn.execute("SELECT content FROM messages"))
    finally:
        conn.close()


def test_a_start_that_failed_after_the_store_opened_starts_over(tmp_path):
    cfg = make_home(tmp_path / "h")
    Client(config_=cfg).append("s1", [{"role": "user", "content": "one"}])
    drain(cfg.home)  # the store holds a cursor (with its proof) for the writer to prove
    Client(config_=cfg).append("s1", [{"role": "user", "content": "two"}])
    writer = Writer(cfg, logs.configure(cfg.logs_dir, "writer"))
    writer.initialize()
    try:
        gc.collect()
        before = _open_fds()
        writer.store.connect()  # how many descriptors opening the store takes
        needed = _open_fds() - before
        writer.store.disconnect()
        gc.collect()
        assert _open_fds() == before
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        top = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (top + 64, hard))
        held: list[int] = []
        try:
            try:
                while True:
                    held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
            for _ in range(needed):  # room to open the store, none for the spool after it
                os.close(held.pop())
            pause = writer.loop_once(time.monotonic())
        finally:
            for fd in held:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert pause > 0 and writer.error is not None, "the start did not fail: no test"
        assert "Errno 24" in writer.error or "escriptor" in writer.error, writer.error
        for _ in range(5):  # the next tries start over, drain the spool and go idle
            writer.loop_once(time.monotonic())
        assert _stored(cfg) == Counter({"one": 1, "two": 1})
        assert writer.error is None and writer.jobs is not None
        # resumed from the proved cursor: "one" was not read again (as a duplicate)
        assert writer.totals["applied"] == 1 and writer.totals["duplicates"] == 0, writer.totals
    finally:
        writer.shutdown()
