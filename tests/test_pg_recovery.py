"""Recovery of a PostgreSQL store from PostgreSQL's own backup: ``pg_dump`` →
more writes → the database is dropped → ``pg_restore`` → ``quill recover`` on every host
replays its spool from the cursor the restored database holds → nothing lost, nothing twice.
Real server, real ``pg_dump``/``pg_restore``, the real CLI; PostgreSQL only by nature (on
SQLite, recovery is snapshot + replay: tests/test_store_failures.py)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import QuillCLI

from quill.spool import Spool

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def pg_database(pg_url):
    """A fresh database of its own (the test drops and restores it), dropped afterwards."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(pg_url)
    admin = make_conninfo(**{**params, "dbname": "postgres"})
    name = "quill_rt_" + uuid.uuid4().hex[:10]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield admin, name, make_conninfo(**{**params, "dbname": name})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _url(conninfo: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(conninfo)
    user, host, port = p.get("user", "postgres"), p.get("host", "127.0.0.1"), p.get("port", 5432)
    return f"postgresql://{user}@{host}:{port}/{p['dbname']}"


def _push(home: Path, host: int, start: int, count: int) -> list[str]:
    spool = Spool(home / "spool")
    contents = []
    for b in range(start, start + count):
        msgs = [{"role": "user", "content": f"h{host} b{b} m{j}"} for j in range(2)]
        spool.append("messages.append", {"session_id": f"h{host}-s{b % 3}", "messages": msgs})
        contents += [m["content"] for m in msgs]
        if b % 4 == 0:  # and a session both hosts write to
            spool.append(
                "messages.append",
                {
                    "session_id": "shared",
                    "messages": [{"role": "assistant", "content": f"shared h{host} b{b}"}],
                },
            )
            contents.append(f"shared h{host} b{b}")
    spool.close()
    return contents


def _stored(conninfo: str) -> list[str]:
    with psycopg.connect(conninfo) as conn:
        return sorted(r[0] for r in conn.execute("SELECT content FROM messages"))


def test_dump_more_writes_drop_restore_recover_loses_nothing(tmp_path, pg_database):
    admin, name, conninfo = pg_database
    url = _url(conninfo)
    homes = [tmp_path / f"host{i}" for i in range(2)]
    clis = [QuillCLI(h) for h in homes]
    for h in homes:
        (h / "spool").mkdir(parents=True)
        (h / "config.toml").write_text(f'[store]\nurl = "{url}"\n')
    acked = []
    for i, (h, cli) in enumerate(zip(homes, clis)):
        acked += _push(h, i, 0, 30)
        first = cli.json("recover")  # the one drain routine, from an empty store
        assert first["backend"] == "postgres" and first["from"] == "1:0" and first["applied"] > 30
    assert _stored(conninfo) == sorted(acked)

    dump = tmp_path / "store.dump"
    subprocess.run(["pg_dump", "--format=custom", f"--file={dump}", conninfo], check=True)

    for i, (h, cli) in enumerate(zip(homes, clis)):  # more writes after the backup
        acked += _push(h, i, 30, 25)
        cli.json("recover")
    assert _stored(conninfo) == sorted(acked)

    with psycopg.connect(admin, autocommit=True) as conn:  # disaster: the database is gone
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    subprocess.run(["pg_restore", "--exit-on-error", f"--dbname={conninfo}", str(dump)], check=True)
    restored = _stored(conninfo)
    assert len(restored) < len(acked) and set(restored) < set(acked)

    for cli in clis:
        result = cli.json("recover")
        assert (
            result["replayed_by"] == "recover"
            and result["applied"] > 0
            and result["duplicates"] == 0
        )
    assert _stored(conninfo) == sorted(acked)  # nothing lost, nothing twice
    with psycopg.connect(conninfo) as conn:  # search indexes came back with the restore
        hits = conn.execute(
            "SELECT count(*) FROM messages WHERE words @@ to_tsquery('simple', 'shared')"
        ).fetchone()[0]
    assert hits == sum(1 for c in acked if c.startswith("shared"))
    again = [cli.json("recover") for cli in clis]  # safe to repeat
    assert all(r["applied"] == 0 for r in again)
    assert json.dumps(again)


def test_spool_segments_are_kept_until_applied_and_past_retention(tmp_path, pg_store_url):
    """On a PostgreSQL store there is no local snapshot: a segment goes once the store's
    cursor for this spool is past it AND it is older than spool.retention_s."""
    from quill import home as config
    from quill.ops import logs
    from quill.spool.segments import list_segments
    from quill.workers.writer import Writer

    home = tmp_path / "h"
    (home / "spool").mkdir(parents=True)
    (home / "config.toml").write_text(
        f'[store]\nurl = "{pg_store_url}"\n[writer]\nchunk_rows = 10\n[spool]\nretention_s = 3600\n'
    )
    spool = Spool(home / "spool", segment_bytes=4096)
    for i in range(60):
        spool.append(
            "messages.append",
            {"session_id": "s", "messages": [{"role": "user", "content": f"{i} " + "x" * 300}]},
        )
    spool.close()
    segments = list_segments(home / "spool")
    assert len(segments) >= 4
    writer = Writer(config.load(home), logs.configure(None, "test"))
    writer.initialize()
    now = time.monotonic()  # the writer's clock: its idle spool collection stays a minute away
    try:
        for _ in range(3):  # 30 of 60 entries applied
            assert writer.loop_once(now) == 0  # 0: busy, step again at once
        later = time.time() + 7200
        collect = writer.store.collect_spool
        assert collect(writer.cursor)["deleted"] == []  # applied ones are still too young
        gone = collect(writer.cursor, now=later)["deleted"]
        assert gone and max(gone) < writer.cursor.segment  # only segments wholly before the cursor
        assert list_segments(home / "spool")[0] == max(gone) + 1
        while writer.loop_once(now) == 0:
            pass
        gone += collect(writer.cursor, now=later)["deleted"]
        assert list_segments(home / "spool") == [segments[-1]]  # the newest segment always stays
        assert sorted(gone) == segments[:-1]
    finally:
        writer.shutdown()
    with psycopg.connect(pg_store_url) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 60
