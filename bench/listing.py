"""Session listing and transcript page cost against the size of the largest message:
``python -m bench.listing [--sessions N] [--big-mb MB]``.

Builds a SQLite data dir of ``N`` sessions of 20 small messages (through the client and the
writer's own drain), times ``Reader.list_sessions(limit=50)`` (the ``quill sessions list``
query) and the dashboard's transcript page of the newest session (``GET /sessions/{id}``,
served in process), then appends an ``MB``-megabyte message to the newest session (listed)
and to the oldest (not on the page) and times both again. Prints the medians and their
ratios: 1.0 means a listing or a page costs the same whatever the largest message.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from quill import home
from quill.ops import logs
from quill.ops.client.client import Client
from quill.store import Reader
from quill.workers.writer import Writer


def _drain(cfg: home.Settings) -> None:
    Writer(cfg, logs.configure(cfg.logs_dir, "writer")).until_idle()


def _time_listing(cfg: home.Settings, repeat: int = 7) -> float:
    """Median seconds of one 50-row listing (each on a fresh reader, as a CLI call is)."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        with Reader(cfg.state_db) as r:
            rows = r.list_sessions(limit=50)
        times.append(time.perf_counter() - began)
        assert len(rows) == 50
    return statistics.median(times)


def _time_page(cfg: home.Settings, session_id: str, repeat: int = 5) -> float:
    """Median seconds of the dashboard's transcript page of ``session_id``, served in process
    (the same app ``quill serve`` runs), signed in with a read token."""
    from starlette.testclient import TestClient

    from quill.ops.service.app import create_app
    from quill.ops.service.tokens import TokenStore

    secret, _row = TokenStore(cfg.tokens_db).create(f"bench-{time.monotonic_ns()}", ["read"])
    app = create_app(cfg, logs.configure(None, "bench"), anonymous="none")
    times = []
    with TestClient(app, base_url="http://127.0.0.1") as web:
        for _ in range(repeat):
            began = time.perf_counter()
            r = web.get(f"/sessions/{session_id}", headers={"Authorization": f"Bearer {secret}"})
            times.append(time.perf_counter() - began)
            assert r.status_code == 200, r.status_code
    return statistics.median(times)


def run(sessions: int, big_mb: int) -> dict[str, float]:
    """Build, measure, and return ``{"small_s", "big_s", "ratio", "page_small_s",
    "page_big_s", "page_ratio"}`` (listing, then transcript page)."""
    with tempfile.TemporaryDirectory(prefix="quill-bench-listing-") as d:
        cfg = home.load(Path(d))
        cfg.ensure_dirs()
        client = Client(config_=cfg)
        now = time.time()
        for n in range(sessions):
            msgs = [
                {
                    "role": "user" if k % 2 == 0 else "assistant",
                    "content": f"s{n} m{k} words",
                    "ts": now - (sessions - n) * 60 + k,
                }
                for k in range(20)
            ]
            client.append(f"bench-{n:05d}", msgs)
        _drain(cfg)
        small = _time_listing(cfg)
        newest = f"bench-{sessions - 1:05d}"
        page_small = _time_page(cfg, newest)
        big = "x" * (big_mb * 1024 * 1024)
        for sid in (f"bench-{sessions - 1:05d}", "bench-00000"):  # on the page and off it
            client.append(sid, [{"role": "assistant", "content": big, "ts": now}])
        _drain(cfg)
        large = _time_listing(cfg)
        page_large = _time_page(cfg, newest)
    return {
        "small_s": round(small, 4),
        "big_s": round(large, 4),
        "ratio": round(large / small, 2),
        "page_small_s": round(page_small, 4),
        "page_big_s": round(page_large, 4),
        "page_ratio": round(page_large / page_small, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--big-mb", type=int, default=50)
    args = ap.parse_args(argv)
    print(json.dumps(run(args.sessions, args.big_mb)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
