"""The dashboard's transcript page reads what it shows: the start of each text, the latest
page of messages. A session with one huge message costs it about the same bytes as one
without: counted as the bytes the process reads from files (``rchar`` of /proc/self/io,
while the in-process server answers the second of two requests) and as the TOAST blocks
PostgreSQL fetches in the reading transaction. Exact reads still return every byte."""

from __future__ import annotations

import base64
import os
import time

import pytest
from conftest import pg_data_dir
from harness import drain, make_home
from starlette.testclient import TestClient

from quill import home as config
from quill.ops import logs
from quill.ops.client.client import Client
from quill.ops.service.app import create_app
from quill.ops.service.dashboard import PAGE_MESSAGES, TEXT_CLIP
from quill.ops.service.tokens import TokenStore

BIG = 8 * 1024 * 1024


def _bytes_read() -> int:
    """Bytes this process has passed through read()/pread() so far (``rchar``, page cache
    hits included): what SQLite read from its files, whichever thread read them."""
    for line in open("/proc/self/io"):
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def _page(cfg, sid: str, **params) -> tuple[int, str]:
    """Bytes read from SQLite files while serving the page, and its HTML."""
    secret, _row = TokenStore(cfg.tokens_db).create(f"t{time.monotonic_ns()}", ["read"])
    app = create_app(cfg, logs.configure(None, "page"), anonymous="none")
    with TestClient(app, base_url="http://127.0.0.1") as web:
        web.get("/healthz")  # templates and lazy imports loaded before counting
        for _warm in range(2):
            before = _bytes_read()
            r = web.get(
                f"/sessions/{sid}", params=params, headers={"Authorization": f"Bearer {secret}"}
            )
            assert r.status_code == 200, r.text
        return _bytes_read() - before, r.text


def test_a_huge_message_does_not_change_what_the_transcript_page_reads(tmp_path):
    cfg = make_home(tmp_path / "h")
    client, now = Client(config_=cfg), time.time()
    for sid in ("small", "huge"):
        client.append(
            sid, [{"role": "user", "content": f"hello {k}", "ts": now + k} for k in range(5)]
        )
    drain(cfg.home)
    small, _ = _page(cfg, "small")
    client.append(
        "huge",
        [
            {
                "role": "assistant",
                "content": "é" + "x" * BIG,
                "reasoning": "why",
                "finish_reason": "stop",
                "mood": "calm",
                "ts": now + 10,
            },
            {
                "role": "assistant",
                "content": "ok",
                "reasoning": "r" * BIG,
                "finish_reason": "length",
                "ts": now + 11,
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "write", "arguments": "y" * BIG},
                    }
                ],
                "ts": now + 12,
            },
        ],
    )
    drain(cfg.home)
    huge, html = _page(cfg, "huge")
    # Three 8 MiB values (24 MiB) in the session; the page reads less than 1 MiB more.
    assert huge < small + 1024 * 1024, (small, huge)
    assert "é" + "x" * 3999 + "… (" in html and "x" * 4001 not in html
    assert "tool_calls not shown" in html
    # Exact reads stay whole.
    full = client.messages("huge")
    assert full[5]["content"] == "é" + "x" * BIG and full[6]["reasoning"] == "r" * BIG
    assert full[7]["tool_calls"][0]["function"]["arguments"] == "y" * BIG
    assert "clipped" not in full[5]
    clipped = client.transcript("huge", clip=TEXT_CLIP)["messages"]
    assert clipped[5]["content"] == ("é" + "x" * BIG)[:TEXT_CLIP]
    assert clipped[5]["clipped"]["content"] == BIG + 2  # bytes: "é" is two
    # Every field stored after a large one is read too; only the large one is cut.
    assert clipped[5]["clipped"] == {"content": BIG + 2}
    assert clipped[5]["reasoning"] == "why" and clipped[5]["finish_reason"] == "stop"
    assert clipped[5]["mood"] == "calm"
    assert clipped[5]["ts"] == pytest.approx(now + 10) and clipped[5]["state"] == "live"
    assert clipped[6]["reasoning"] == "r" * TEXT_CLIP and clipped[6]["content"] == "ok"
    assert clipped[6]["finish_reason"] == "length" and clipped[6]["clipped"] == {"reasoning": BIG}
    assert "tool_calls" not in clipped[7] and "tool_calls" in clipped[7]["clipped"]
    assert clipped[7]["clipped"]["tool_calls"] > BIG


def test_a_long_session_is_paged_from_the_newest_with_a_link_to_older(tmp_path):
    cfg = make_home(tmp_path / "h")
    client, now = Client(config_=cfg), time.time()
    total = PAGE_MESSAGES + 30
    client.append(
        "long", [{"role": "user", "content": f"n{k}-", "ts": now + k} for k in range(total)]
    )
    drain(cfg.home)
    _read, html = _page(cfg, "long")
    assert f"n{total - 1}-" in html and "n29-" not in html and "n30-" in html
    older = html.split('id="older" href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    before = int(older.split("before=")[1])
    _read, html = _page(cfg, "long", before=before)
    assert "n0-" in html and "n29-" in html and "n30-" not in html and 'id="older"' not in html


def test_postgresql_page_reads_fetch_only_the_start_of_a_huge_value(tmp_path, pg_store_url):
    from quill.store.postgres.reads import PgReader

    home = tmp_path / "h"
    pg_data_dir(home, pg_store_url, 2)
    client = Client(str(home))
    # Incompressible, so PostgreSQL stores it out of line as it is (``x`` * 8 MiB would
    # compress to a few blocks and prove nothing).
    text = base64.b64encode(os.urandom(BIG * 3 // 4)).decode()
    client.append("h-s", [{"role": "assistant", "content": text, "reasoning": text}])
    drain_pg(home)

    def toast_blocks(**kw) -> tuple[int, list]:
        with PgReader(pg_store_url) as r, r.snapshot() as c:
            toast = c.execute(
                "SELECT reltoastrelid::bigint FROM pg_class WHERE oid = 'messages'::regclass"
            ).fetchone()[0]
            probe = f"SELECT pg_stat_get_xact_blocks_fetched({toast}::oid)"
            before = c.execute(probe).fetchone()[0]
            rows = r.get_messages("h-s", **kw)
            return c.execute(probe).fetchone()[0] - before, rows

    exact, rows = toast_blocks()
    assert rows[-1]["content"] == text and rows[-1]["reasoning"] == text
    cut, rows = toast_blocks(clip=TEXT_CLIP, latest=True, limit=PAGE_MESSAGES)
    assert rows[-1]["content"] == text[:TEXT_CLIP] == rows[-1]["reasoning"]
    assert rows[-1]["clipped"] == {"content": BIG, "reasoning": BIG}
    # 2 × 8 MiB is about 2,000 blocks of 8 KiB; the page fetches the first few of each.
    print(f"TOAST blocks fetched: exact read {exact}, clipped page read {cut}")
    assert exact > 1500 and cut < 60, (cut, exact)


def drain_pg(home) -> None:
    from quill.ops.recover.postgres import drain as pg_drain

    pg_drain(config.load(home), logs.configure(None, "test"))


@pytest.mark.parametrize("clip", [0, -1, True, 1.5])
def test_a_bad_clip_is_refused(tmp_path, clip):
    from quill.ops.client.errors import InvalidInputError

    cfg = make_home(tmp_path / "h")
    client = Client(config_=cfg)
    client.append("s", [{"role": "user", "content": "x"}])
    drain(cfg.home)
    with pytest.raises(InvalidInputError):
        client.transcript("s", clip=clip)


def test_a_store_without_pointer_maps_gains_them_at_its_vacuum_and_then_reads_every_field(
    tmp_path,
):
    """A store made before pointer-map pages leaves the fields after a large one unread (and
    names them); its next ``vacuum`` job adds the pages, and the same page then has them."""
    import apsw

    from quill.jobs.store_jobs import vacuum
    from quill.store import packed

    cfg = make_home(tmp_path / "h")
    client, now = Client(config_=cfg), time.time()
    big = 1024 * 1024
    client.append(
        "old",
        [{"role": "assistant", "content": "x" * big, "finish_reason": "stop", "ts": now}],
    )
    drain(cfg.home)
    conn = apsw.Connection(str(cfg.state_db))
    packed.register(conn)  # as on the store's own connections, which the job is given
    conn.execute("PRAGMA auto_vacuum=NONE")
    conn.execute("VACUUM")  # as a store made before the setting
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    before = client.transcript("old", clip=TEXT_CLIP)["messages"][0]
    assert before.get("finish_reason") is None and "finish_reason" in before["clipped"]
    figures = vacuum(conn)
    assert figures["pointer_map_added"] is True, figures
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 0
    conn.close()
    after = client.transcript("old", clip=TEXT_CLIP)["messages"][0]
    assert after["finish_reason"] == "stop" and after["clipped"] == {"content": big}
    assert after["content"] == "x" * TEXT_CLIP
