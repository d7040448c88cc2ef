"""A store that starts with no cursor for this spool while the spool no longer holds its whole
history (segment 1 collected by ``spool_gc`` after a snapshot covered it): the writer refuses
it instead of silently starting at the oldest segment left, ``status``/``doctor`` (and
``--json``) say so with the next step, and the documented ways out restore every message —
export/import then ``quill recover --accept-loss`` on PostgreSQL (the switch from SQLite),
``quill recover`` from the snapshot on SQLite (an empty store file put in place). Real data
dirs, real fleets (``quill run``), real PostgreSQL."""

from __future__ import annotations

import json
import shutil
import time

from conftest import QuillCLI, stop_fleet

from quill.spool.segments import list_segments

SPOOL = "[spool]\nsegment_bytes = 4096\nretention_s = 0\n"


def _push(quill, session: str, n: int) -> None:
    lines = "\n".join(
        json.dumps(
            {"role": "user", "id": f"{session}-{i}", "content": f"{session} {i}" + " x" * 100}
        )
        for i in range(n)
    )
    quill.run("push", "--session", session, input=lines)


def _old_sqlite_life(quill, home) -> int:
    """A SQLite data dir that ran long enough for ``spool_gc`` to collect segment 1 (older
    than the retention, covered by a snapshot); returns the spool's oldest segment."""
    home.mkdir(parents=True)
    (home / "config.toml").write_text(SPOOL)
    fleet = quill.start_fleet()
    try:
        for session in ("early-a", "early-b", "early-c"):
            _push(quill, session, 10)  # ~2.5 KB a batch: several 4 KiB segments
        quill.wait_idle()
        quill.run("snapshot")
        quill.run("jobs", "run", "spool_gc", "--wait", "60")
    finally:
        assert stop_fleet(fleet) == 0
    first = list_segments(home / "spool")[0]
    assert first > 1, "spool_gc collected nothing: the scenario needs segment 1 gone"
    return first


def _wait_refused(quill, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = quill.status()
        halt = st["fleet"].get("halt") or {}
        if halt.get("cause") == "HistoryNotInSpoolError":
            return st
        time.sleep(0.3)
    raise AssertionError(f"the writer did not refuse the store: {quill.status()}")


def _message_ids(quill) -> list[str]:
    """``<session>-<i>`` of every message in the store, read through the CLI."""
    ids = []
    for session in quill.json("sessions", "list", "--limit", "100")["sessions"]:
        got = quill.json("sessions", "show", session["id"])
        ids += ["-".join(m["content"].split()[:2]) for m in got["messages"]]
    return sorted(ids)


def _expected(*sessions: tuple[str, int]) -> list[str]:
    return sorted(f"{s}-{i}" for s, n in sessions for i in range(n))


def _doctor(quill) -> dict:
    proc = quill.run("doctor", "--json", check=False)
    return {c["check"]: c for c in json.loads(proc.stdout)}


def test_switch_to_postgres_refuses_then_export_import_and_accept_keep_everything(
    quill, home, pg_store_url
):
    first = _old_sqlite_life(quill, home)
    export = home.parent / "before-pg.jsonl"
    quill.run("export", "-o", str(export))
    (home / "config.toml").write_text(f'{SPOOL}[store]\nurl = "{pg_store_url}"\n')
    _push(quill, "late", 3)  # appended after the switch, before the writer ran

    fleet = quill.start_fleet()
    try:
        st = _wait_refused(quill)
        assert st["spool"]["history_gap"]["first_segment"] == first
        assert "--accept-loss" in st["spool"]["history_gap"]["next"]
        assert "quill import" in st["fleet"]["halt"]["next"]
        assert st["store"]["messages"] == 0, "the refused writer applied something"
        human = quill.run("status", check=False).stdout
        assert "HISTORY NOT IN SPOOL" in human
        assert _doctor(quill)["spool history"]["status"] == "fail"

        quill.run("import", str(export))
        out = quill.run("recover", "--accept-loss")
        assert f"starts at spool segment {first}" in out.stderr
        quill.wait_idle()
        assert _message_ids(quill) == _expected(
            ("early-a", 10), ("early-b", 10), ("early-c", 10), ("late", 3)
        )
        st = quill.status()
        assert st["spool"]["history_gap"] is None and st["fleet"]["halt"] is None
        assert _doctor(quill)["spool history"]["status"] == "ok"
    finally:
        assert stop_fleet(fleet) == 0


def test_an_empty_sqlite_store_put_in_place_is_refused_and_recover_restores_it(
    quill, home, tmp_path
):
    _old_sqlite_life(quill, home)
    blank = QuillCLI(tmp_path / "blank")
    (tmp_path / "blank").mkdir()
    blank.drain()  # an empty spool: a store file with Quill's schema and no cursor
    for suffix in ("", "-wal", "-shm"):
        (home / f"state.db{suffix}").unlink(missing_ok=True)
    shutil.copyfile(tmp_path / "blank" / "state.db", home / "state.db")
    (home / "state.db").chmod(0o600)

    st = quill.status()
    assert st["spool"]["history_gap"]["first_segment"] == list_segments(home / "spool")[0]
    assert _doctor(quill)["spool history"]["status"] == "fail"
    fleet = quill.start_fleet()
    try:
        assert _wait_refused(quill)["store"]["messages"] == 0
    finally:
        assert stop_fleet(fleet) == 0

    quill.run("recover")  # the snapshot plus the spool: the whole history
    assert quill.status()["spool"]["history_gap"] is None
    fleet = quill.start_fleet()
    try:
        quill.wait_idle()
        assert _message_ids(quill) == _expected(("early-a", 10), ("early-b", 10), ("early-c", 10))
    finally:
        assert stop_fleet(fleet) == 0


def test_a_new_store_on_a_spool_that_still_holds_segment_1_starts_as_before(
    quill, home, pg_store_url
):
    """No refusal while the spool holds every record: a fresh data dir straight on
    PostgreSQL applies everything."""
    home.mkdir(parents=True)
    (home / "config.toml").write_text(f'{SPOOL}[store]\nurl = "{pg_store_url}"\n')
    _push(quill, "fresh", 10)
    quill.drain()
    assert quill.status()["spool"]["history_gap"] is None
    assert _message_ids(quill) == _expected(("fresh", 10))


def _segmented_pg_dir(root, url: str) -> int:
    """A data dir on ``url`` whose applied segments before the newest were collected (as
    ``spool_gc`` does once a store applied them); returns the oldest segment left."""
    from quill import home as config
    from quill.ops import logs
    from quill.ops.recover.postgres import drain
    from quill.spool import Spool, retention

    root.mkdir(parents=True)
    (root / "config.toml").write_text(f'{SPOOL}[store]\nurl = "{url}"\n')
    with Spool(root / "spool", segment_bytes=4096) as spool:
        for i in range(12):
            msg = {"role": "user", "content": f"m{i} " + "x" * 900}
            spool.append("messages.append", {"session_id": "s", "messages": [msg]})
    done = drain(config.load(root), logs.configure(None, "test"))
    assert done["applied"] == 12
    cursor = retention.Position.parse(done["to"])
    assert retention.collect(root / "spool", cursor, cursor, retention_s=0)["deleted"]
    return list_segments(root / "spool")[0]


def test_reidentify_after_collection_starts_the_new_id_without_a_refusal(tmp_path, pg_store_url):
    """The collected segments were applied under the old id: the new id starts at the
    oldest segment left, and nothing is applied twice."""
    from quill import home as config
    from quill.ops import logs
    from quill.ops.recover.postgres import drain

    root = tmp_path / "h"
    first = _segmented_pg_dir(root, pg_store_url)
    out = json.loads(QuillCLI(root).run("spool", "reidentify", "--json").stdout)
    assert out["applied_from"] == f"{first}:0"
    again = drain(config.load(root), logs.configure(None, "test"))
    assert again["applied"] == 0 and again["duplicates"] > 0
