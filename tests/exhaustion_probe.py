"""Run by tests/test_descriptors_exhausted.py in its own process (under ``prlimit``): with
every file descriptor taken, each way Quill opens a file or a socket on a request path or
in a worker loop is tried once, and what it raised (or answered) is printed as JSON.

argv: data dir, a token with read/write/admin scopes, a PostgreSQL URL (or "-"); or
``watch`` and a data dir whose watcher follows a folder holding an agent's file."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

from starlette.testclient import TestClient

from quill import home
from quill.jobs.queues import build_for
from quill.ops import logs
from quill.ops.client.client import Client
from quill.ops.service.app import create_app
from quill.ops.service.tokens import TokenStore
from quill.store.postgres.connection import PgConnection
from quill.store.sqlite.connection import open_writer
from quill.workers.writer import Writer

#: Every descriptor this process holds open on /dev/null while the opens are tried.
_HELD: list[int] = []
_MSG = {"messages": [{"role": "user", "content": "y"}]}


def _outcome(call) -> str:
    _HELD.extend(_fill())  # a descriptor a collected object gave back is taken again
    try:
        call()
    except Exception as exc:  # what it raised is the result
        return type(exc).__name__
    return "ok"


def _fill() -> list[int]:
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        return held


def watch(root: Path) -> None:
    """The watcher's round with every descriptor taken, then with them back: the agent
    file must not be set aside as unreadable, and the next round imports it."""
    from quill.ops.transfer.watch_ingest import ingest_session
    from quill.workers.watch import Watcher

    cfg = home.load(root)
    log = logs.configure(None, "watch")
    watcher = Watcher(cfg, log, ingest_session(cfg, log))
    out: dict = {}
    gc.collect()
    files = [str(f) for r in cfg.watch_paths for f in Path(r).glob("*.jsonl")]
    try:
        _HELD.extend(_fill())
        out["event"] = watcher.round(files)  # a change event: stat, then the import
        _HELD.extend(_fill())
        out["first"] = watcher.round()  # a full scan
    finally:
        for fd in _HELD:
            os.close(fd)
    out["unreadable"] = sorted(watcher.state.unreadable)
    out["second"] = watcher.round()
    print(json.dumps(out))


def main() -> None:
    if sys.argv[1] == "watch":
        watch(Path(sys.argv[2]))
        return
    root, token, pg_url = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    cfg = home.load(root)
    headers = {"Authorization": f"Bearer {token}"}
    out: dict = {}
    writer = Writer(cfg, logs.configure(None, "writer"))
    writer.initialize()
    log = logs.configure(None, "http")
    web = {
        policy: TestClient(
            create_app(cfg, log, anonymous=policy),
            base_url="http://127.0.0.1",
            raise_server_exceptions=False,
        )
        for policy in ("none", "any", "warm")
        if policy != "warm"
    }
    warm = TestClient(create_app(cfg, log, anonymous="any"), base_url="http://127.0.0.1")
    with warm, web["none"], web["any"]:
        # Every lazy import done first (an import opens its file too), by another app: the
        # apps tried keep no spool or queue handle open from before.
        assert warm.get("/api/v1/sessions").status_code == 200
        assert warm.post("/api/v1/sessions/s0/messages", json=_MSG).status_code == 202
        assert web["none"].get("/api/v1/sessions", headers=headers).status_code == 200
        assert web["any"].get("/healthz").status_code == 200
        Client(config_=cfg).append("s0", [{"role": "user", "content": "warm"}])
        build_for(cfg).pending()
        for _ in range(100):  # the writer drains what is pending and is idle, store open
            pause = writer.loop_once(time.monotonic())
            if pause > 0 and writer.error is None and writer.store.connected:
                break
        # A record in a segment of its own ([spool] segment_bytes is the minimum): applying
        # it opens a spool file the writer does not hold yet.
        Client(config_=cfg).append("s4", [{"role": "user", "content": "z" * 5000}])
        gc.collect()
        try:
            out["writer_open"] = _outcome(lambda: open_writer(cfg.state_db))
            if pg_url != "-":
                out["pg_connect"] = _outcome(lambda: PgConnection(pg_url))
            out["tokens"] = _outcome(lambda: TokenStore(cfg.tokens_db).verify(token))
            out["queue"] = _outcome(lambda: build_for(cfg).enqueue("quick_check"))
            out["client_append"] = _outcome(
                lambda: Client(config_=cfg).append("s2", [{"role": "user", "content": "x"}])
            )
            _HELD.extend(_fill())
            out["writer_spool_pause"] = writer.loop_once(time.monotonic())
            out["writer_spool_error"] = writer.error
            writer.store.disconnect()  # the next turn opens the store again
            _HELD.extend(_fill())
            out["writer_loop_pause"] = writer.loop_once(time.monotonic())
            out["writer_error"] = writer.error
            http = {}
            for name, policy, method, path, body in (
                ("token", "none", "GET", "/api/v1/sessions", None),
                ("read", "any", "GET", "/api/v1/sessions", None),
                ("append", "any", "POST", "/api/v1/sessions/s3/messages", _MSG),
            ):
                _HELD.extend(_fill())
                r = web[policy].request(
                    method, path, json=body, headers=headers if policy == "none" else {}
                )
                http[name] = [r.status_code, r.headers.get("retry-after"), r.text[:300]]
            out["http"] = http
        finally:
            for fd in _HELD:
                os.close(fd)
        for _ in range(50):  # descriptors are back: the same writer carries on by itself
            if writer.loop_once(time.monotonic()) == 0.0 and writer.store.connected:
                break
            time.sleep(0.05)
        out["writer_recovered"] = writer.store.connected and writer.error is None
        out["read_after"] = web["none"].get("/api/v1/sessions", headers=headers).status_code
    writer.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
