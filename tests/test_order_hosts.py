"""Transcript order across hosts: two data dirs (each its own spool and writer) on one
PostgreSQL store append turns of one session alternately; every read shows them in the order
they were acknowledged, whichever writer drains first, and a replay of the spools in the other
order writes the same order (docs/backends.md, "Order across hosts"). The writers here are the
real one (``ops.recover.postgres.drain`` = ``Writer.until_idle``), run one data dir after the
other so that the adversarial interleaving (all of one host's ops applied first) is certain.
PostgreSQL by nature: a SQLite store has one spool (its one-spool rules are checked at the end).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from quill import Client
from quill import home as config
from quill.ops import logs
from quill.spool import Spool, record

psycopg = pytest.importorskip("psycopg")


def _host(root: Path, url: str | None) -> Path:
    root.mkdir(parents=True)
    if url is not None:
        (root / "config.toml").write_text(f'[store]\nurl = "{url}"\n')
    return root


def _drain(home: Path) -> dict:
    from quill.ops.recover.postgres import drain

    return drain(config.load(home), logs.configure(None, "test"))


def _writer_process(home: Path) -> None:
    """Run this data dir's writer as a fleet runs it (``quill.ops.worker_main writer``) until
    it has applied its whole spool, then stop it with SIGTERM."""
    import signal
    import subprocess
    import sys

    from conftest import REPO

    from quill.spool import SpoolReader
    from quill.spool.identity import load_or_create

    end = SpoolReader(home / "spool").end()
    sid = load_or_create(home / "spool-id")
    url = config.load(home).store_url
    proc = subprocess.Popen(
        [sys.executable, "-m", "quill.ops.worker_main", "writer", "--home", str(home)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(url) as conn:
                    row = conn.execute(
                        'SELECT segment, "offset" FROM spool_cursor WHERE spool_id = %s', (sid,)
                    ).fetchone()
            except psycopg.errors.UndefinedTable:  # the writer has not created the store yet
                row = None
            if row == (end.segment, end.offset):
                break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the writer did not drain its spool"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def _turn(i: int) -> dict:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}", "id": f"t{i}"}


def _append_at(spool: Spool, ts: float, data: dict) -> None:
    """Append one ``messages.append`` whose record carries the append time ``ts``: the
    producer's own append protocol (lock, one write, fdatasync), with a chosen clock reading."""
    body = {
        "v": record.VERSION,
        "op": "messages.append",
        "batch": f"b-{spool.dir.parent.name}-{ts}-{data['messages'][0]['id']}",
        "producer": spool.producer_id,
        "seq": spool._seq + 1,
        "ts": ts,
        "data": data,
    }
    spool._write(record.encode(body), body["seq"])


def spool_tag(spool_id: str) -> int:
    """The documented tie-break between spools: BLAKE2b-64 of the spool id, top 63 bits."""
    digest = hashlib.blake2b(spool_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _contents(rows: list[dict]) -> list[str]:
    return [m["content"] for m in rows]


@pytest.mark.parametrize(
    ("turns", "drain"), [(6, _writer_process), (20, _drain)], ids=["6-processes", "20-in-process"]
)
def test_two_hosts_alternating_turns_read_in_ack_order_when_the_later_host_drains_first(
    tmp_path, pg_store_url, turns, drain
):
    a, b = _host(tmp_path / "a", pg_store_url), _host(tmp_path / "b", pg_store_url)
    clients = [Client(a), Client(b)]
    for i in range(turns):  # A sends the even turns, B the odd ones, 10 ms apart
        clients[i % 2].append("s", [_turn(i)], source="agent")
        time.sleep(0.01)
    drain(b)  # every one of B's turns is applied before any of A's
    drain(a)
    want = [f"turn {i}" for i in range(turns)]
    for client in clients:  # either host reads the same transcript
        for view in ("display", "model", "audit"):
            assert _contents(client.messages("s", view)) == want, view
        assert _contents(client.messages("s", latest=3)) == want[-3:]
    from quill.store.factory import open_reader

    reader = open_reader(config.load(a))
    try:
        page = reader.get_messages("s", limit=2, offset=2)
        assert _contents(page) == want[2:4]
        third = page[0]["message_id"]  # a keyset cursor: the rows after turn 2
        assert _contents(reader.get_messages("s", after_id=third)) == want[3:]
        assert _contents(reader.export("s")["messages"]) == want
        from quill.ops.transfer.export import quill_ops

        restored = [
            r["message"]["content"]
            for op in quill_ops(reader, "s")
            if op["op"] == "messages.restore"
            for r in op["data"]["rows"]
        ]
        assert restored == want
        index = {m["message_id"]: i for i, m in enumerate(reader.get_messages("s"))}
        hits = reader.search("turn", session_id="s", limit=turns, context=1)
        assert len(hits) == turns
        for hit in hits:  # a hit's context is its neighbours in transcript order
            n = index[hit["message_id"]]
            assert (hit["before"] or {}).get("content") == (want[n - 1] if n else None)
            assert (hit["after"] or {}).get("content") == (want[n + 1] if n + 1 < turns else None)
    finally:
        reader.close()
    # The head, the last user turn and a rewind follow the same order: rewinding to turn 2
    # takes back turns 2.. on whichever host it is appended.
    clients[1].submit("messages.rewind", {"session_id": "s", "ext_id": "t2"})
    _drain(b)
    assert _contents(clients[0].messages("s", "model")) == want[:2]


def test_a_tie_in_ack_time_is_broken_by_spool_then_position_whichever_drains_first(
    tmp_path, pg_schemas
):
    """Records with the same acknowledgement time: across spools the spool tag decides
    (BLAKE2b of the spool id), within a spool its position; and a spool whose clock stepped
    back keeps its own order. Two stores fed in opposite drain orders read the same."""
    homes = {h: _host(tmp_path / h, None) for h in ("a", "b")}
    spools = {h: Spool(homes[h] / "spool") for h in homes}
    for h in ("a", "b"):
        _append_at(spools[h], 1_800_000_000.5, {"session_id": "t", "messages": [_msg(h, 1)]})
    # host a: a second record at the same time, then one whose clock stepped back 5 s
    _append_at(spools["a"], 1_800_000_000.5, {"session_id": "t", "messages": [_msg("a", 2)]})
    _append_at(spools["a"], 1_799_999_995.5, {"session_id": "t", "messages": [_msg("a", 3)]})
    for s in spools.values():
        s.close()
    orders = []
    for first, second in (("a", "b"), ("b", "a")):  # one store per drain order
        url = pg_schemas()
        for home in homes.values():
            (home / "config.toml").write_text(f'[store]\nurl = "{url}"\n')
        _drain(homes[first])
        _drain(homes[second])
        orders.append(_contents(Client(homes["a"]).messages("t", "audit")))
    assert orders[0] == orders[1], orders  # deterministic, not commit order
    tags = {h: spool_tag((homes[h] / "spool-id").read_text().strip()) for h in homes}
    a_rows = ["a 1", "a 2", "a 3"]  # one spool keeps its own order (clamped clock)
    want = (a_rows + ["b 1"]) if tags["a"] < tags["b"] else (["b 1"] + a_rows)
    assert orders[0] == want, (orders[0], tags)


def _msg(host: str, n: int) -> dict:
    return {"role": "user", "content": f"{host} {n}", "id": f"{host}{n}"}


def test_a_replay_of_both_spools_in_the_other_order_equals_the_live_interleaved_store(
    tmp_path, pg_schemas
):
    """The live store applied host B's ops first; a rebuild (an empty store, each data dir's
    writer replaying its spool from the start, as ``quill recover`` after a restore to an
    empty database) applies host A's first. Every read and the order columns agree."""
    live, rebuilt = pg_schemas(), pg_schemas()
    a, b = _host(tmp_path / "a", live), _host(tmp_path / "b", live)
    ca, cb = Client(a), Client(b)
    for i in range(12):
        (ca if i % 2 == 0 else cb).append("mix", [_turn(i)], source="agent")
        time.sleep(0.01)
    _drain(b)
    _drain(a)
    reads = {}
    for name, url in (("live", live), ("rebuilt", rebuilt)):
        if name == "rebuilt":
            for home in (a, b):
                (home / "config.toml").write_text(f'[store]\nurl = "{url}"\n')
            _drain(a)
            _drain(b)
        reads[name] = {
            view: _contents(Client(a).messages("mix", view))
            for view in ("display", "model", "audit")
        }
    assert reads["rebuilt"] == reads["live"]
    assert reads["live"]["model"] == [f"turn {i}" for i in range(12)]
    rows = []
    for url in (live, rebuilt):  # the order columns themselves, row for row
        with psycopg.connect(url) as conn:
            rows.append(
                conn.execute(
                    "SELECT seq, pos, content, state, ack_us, ack_tag, ack_at FROM messages "
                    "WHERE session_id = 'mix' ORDER BY seq"
                ).fetchall()
            )
    # ``seq`` is a label (the live store placed host A's late ops in gaps): the order, and
    # where each ``pos`` points in it, are what a replay reproduces.
    ranked = []
    for got in rows:
        rank = {r[0]: i for i, r in enumerate(got)}
        ranked.append([(rank[r[0]], rank[r[1]], *r[2:]) for r in got])
    assert ranked[0] == ranked[1] and [r[0] for r in ranked[0]] == list(range(12))
    assert all(a[0] < b[0] for a, b in zip(rows[0], rows[0][1:]))


# -- the same rule on SQLite: one spool, so keys only grow along it ----------------------------


def _drain_local(home: Path) -> dict:
    from quill.workers.writer import Writer

    return Writer(config.load(home), logs.configure(None, "test")).until_idle()


def test_one_spool_keeps_its_order_on_sqlite_when_its_clock_steps_back(tmp_path):
    """SQLite: a host whose clock steps back (NTP, a VM resumed) keeps its own order: the ack
    time is clamped along the spool, so every op lands at its session's end, as before."""
    home = _host(tmp_path / "solo", None)
    spool = Spool(home / "spool")
    for n, ts in enumerate((1_800_000_010.0, 1_800_000_000.0, 1_800_000_005.0, 1_800_000_020.0)):
        _append_at(spool, ts, {"session_id": "c", "messages": [_msg("h", n)]})
    spool.close()
    _drain_local(home)
    want = [f"h {n}" for n in range(4)]
    assert _contents(Client(home).messages("c", "audit")) == want
    import apsw

    conn = apsw.Connection(str(home / "state.db"), flags=apsw.SQLITE_OPEN_READONLY)
    rows = conn.execute("SELECT id, seq, ack_us FROM messages ORDER BY id").fetchall()
    clamp = conn.execute("SELECT ack_us FROM spool_cursor").fetchone()[0]
    conn.close()
    from quill.store.apply.order import STRIDE

    assert [r[1] for r in rows] == [STRIDE * k for k in (1, 2, 3, 4)]  # seq follows ids
    assert [r[2] for r in rows] == [1_800_000_010_000_000] * 3 + [1_800_000_020_000_000]
    assert clamp == 1_800_000_020_000_000


def test_a_v6_store_keeps_its_order_through_the_migration(tmp_path):
    """SQLite only (a file of an older schema): rows written before the order columns keep
    their id order, a compaction copy keeps its original's display place, and the next op
    goes after them."""
    import apsw

    from quill.store import open_writer, schema
    from quill.store.apply import batches, order

    db = tmp_path / "state.db"
    conn = apsw.Connection(str(db))
    v6 = schema.DDL.replace(schema.SPOOL_IDENTITY, "").replace(schema.LEADER_LEASE, "")
    conn.execute(
        v6.replace(order.MIGRATION, "")
        .replace(schema.MESSAGES_SESSION_TS, "")
        .replace(schema.OWNER_PROOF, "")
        .replace(batches.MIGRATION, "")
    )
    conn.execute("PRAGMA user_version = 6")
    conn.execute("INSERT INTO sessions (id, source, created_at) VALUES ('old', 'cli', 1.0)")
    for mid, content, state, origin in (
        (1, "q", "compacted", None),
        (2, "a", "superseded", None),
        (3, "summary", "live", None),
        (4, "a", "live", 2),
    ):
        conn.execute(
            "INSERT INTO messages (id, session_id, role, content, arrived_at, batch_id, state, "
            "origin_id) VALUES (?, 'old', 'user', ?, 1.0, 'b', ?, ?)",
            (mid, content, state, origin),
        )
    conn.close()
    writer = open_writer(db)
    try:
        assert writer.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        assert writer.execute("SELECT id, seq, pos FROM messages ORDER BY id").fetchall() == [
            (1, 1, 1),
            (2, 2, 2),
            (3, 3, 3),
            (4, 4, 2),
        ]
        from quill.store.apply.messages import messages_append

        messages_append(writer, {"session_id": "old", "messages": [_msg("n", 1)]}, "b2", 2.0)
        from quill.store.read import projections

        display = _contents(projections.read(writer, "old", "display"))
        assert display == ["q", "a", "summary", "n 1"]
    finally:
        writer.close()
