"""A session whose messages were revised (``messages.append`` with ``revise: true``, last copy
wins: store/apply/revise.py) leaves the store exactly as the live one when it is exported and
imported into a fresh store, and when the store is rebuilt from a snapshot plus the spool
(SQLite) or from the spool alone (both backends): every field of every row, the usage rows
(merged tokens, the revised time), the renamed tool result and the search hits."""

from __future__ import annotations

import json
import shutil

from conftest import QuillCLI
from rebuild_helpers import dump
from semantics_helpers import Store, assistant, call, user
from test_export_round_trip import canonical

from quill.ops.recover.replay import replay
from quill.spool import Quarantine, Spool

SID = "s-revised"
T0 = 1_700_000_000


def _first(spool: Spool) -> None:
    """The first copies: a call named ``bash``, its result still running, no usage yet."""
    spool.append("session.create", {"session_id": SID, "source": "gemini", "started_at": T0})
    first = [
        user("list the files", id="u1", timestamp=T0 + 1),
        assistant("on it", id="a1", tool_calls=[call("c1")], timestamp=T0 + 2),
        {"role": "tool", "tool_call_id": "c1", "content": None, "id": "r1", "status": "running"},
    ]
    spool.append("messages.append", {"session_id": SID, "messages": first, "revise": True})


def _later(spool: Spool) -> None:
    """Later copies: the user's text edited, the call renamed with usage (the result is not
    sent again: it takes the new name), the result's output; then larger usage on a third
    copy, and a plain append after them."""
    usage = {"prompt_tokens": 100, "completion_tokens": 7}
    later = [
        user("list the files please", id="u1", timestamp=T0 + 1),
        assistant(
            "on it", id="a1", tool_calls=[call("c1", name="shell")], timestamp=T0 + 5,
            model="gpt-x", usage=usage, response_id="resp-1",
        ),
    ]  # fmt: skip
    spool.append("messages.append", {"session_id": SID, "messages": later, "revise": True})
    output = [{"role": "tool", "tool_call_id": "c1", "content": "wombat.txt", "id": "r1"}]
    spool.append("messages.append", {"session_id": SID, "messages": output, "revise": True})
    more = [{**later[1], "usage": {"prompt_tokens": 100, "completion_tokens": 9}}]
    spool.append("messages.append", {"session_id": SID, "messages": more, "revise": True})
    tail = [user("thanks", id="u2", timestamp=T0 + 9)]
    spool.append("messages.append", {"session_id": SID, "messages": tail})


def _hits(q: QuillCLI) -> dict[str, list]:
    out = {}
    for words in ("wombat", "please", "running", "shell", "files"):
        hits = q.json("search", words, "--audit")["hits"]
        out[words] = [
            (h["session_id"], h["role"], h["state"], h["ts"], h["snippet"], h["matched_in"])
            for h in hits
        ]
    return out


def test_export_and_import_of_a_revised_session_equals_the_live_one(quill, tmp_path):
    quill.run("status", check=False)  # makes the data dir
    spool = Spool(quill.home / "spool")
    _first(spool)
    _later(spool)
    spool.close()
    quill.drain()
    live = canonical(quill.home)
    rows = live["rows"][SID]
    # (origin, ext_id, role, content, parts, tool_calls, tool_call_id, tool_name, reasoning,
    #  finish_reason, ts, extra, state)
    assert [r[3] for r in rows] == ["list the files please", "on it", "wombat.txt", "thanks"]
    assert rows[2][7] == "shell" and rows[2][11] is None  # renamed; "status" gone from extra
    assert [(u[7], u[8], u[14]) for u in live["usage"]] == [(100, 9, T0 + 5)]  # merged, dated
    out = tmp_path / "export.jsonl"
    quill.run("export", "-o", str(out))
    fresh = QuillCLI(tmp_path / "fresh")
    fresh.run("import", str(out))
    fresh.drain()
    assert fresh.status()["spool"]["quarantined"] == 0
    assert canonical(fresh.home) == live
    assert _hits(fresh) == _hits(quill)
    assert _hits(quill)["wombat"] and _hits(quill)["running"] == []
    by = ("usage", "--by", "session")
    assert fresh.json(*by) == quill.json(*by)


def test_snapshot_plus_spool_of_a_revised_session_equals_the_live_one(quill, tmp_path):
    """A snapshot taken between the first and the later copies, plus the spool after it, and
    the whole spool alone, rebuild the live store table by table, every column."""
    quill.run("status", check=False)
    spool = Spool(quill.home / "spool")
    _first(spool)
    quill.drain()
    snap = quill.json("snapshot")["path"]
    _later(spool)
    spool.close()
    quill.drain()
    live = dump(quill.home / "state.db")
    assert any("wombat.txt" in r for r in live["messages"])
    for name, start in (("from-snapshot", snap), ("whole-spool", None)):
        target = tmp_path / f"{name}.db"
        if start is not None:
            shutil.copyfile(start, target)
        replay(quill.home / "spool", target, None, quarantine=Quarantine.for_store(target))
        assert dump(target) == live, name


def test_the_spool_replayed_into_a_fresh_store_equals_the_live_one(tmp_path, backend, pg_schemas):
    """Both backends: the same spool applied again into a fresh store (op by op here, as one
    chunk there) holds the same rows, usage and search hits."""
    live = Store(tmp_path / "live", backend)
    fresh_url = None if backend is None else pg_schemas()
    try:
        _first(live.spool)
        assert live.drain() == []
        _later(live.spool)
        assert live.drain() == []
        shutil.copytree(tmp_path / "live" / "spool", tmp_path / "fresh" / "spool")
        fresh = Store(tmp_path / "fresh", fresh_url)
        try:
            assert fresh.drain() == []
            for s in (live, fresh):
                s.index()
            assert _rows(fresh) == _rows(live)
            for words in ("wombat", "please", "running", "shell"):
                with live.reader() as a, fresh.reader() as b:
                    assert _search(b, words) == _search(a, words), words
            with live.reader() as r:
                assert [h["snippet"] for h in r.search("wombat")] == ["wombat.txt"]
        finally:
            fresh.close()
    finally:
        live.close()


def _rows(store: Store) -> dict[str, list]:
    msgs = store.conn.execute(
        "SELECT ext_id, role, quill_text(content), tool_calls, tool_call_id, tool_name, ts, "
        "extra, state, seq, pos FROM messages WHERE session_id = ? ORDER BY seq",
        (SID,),
    ).fetchall()
    usage = store.conn.execute(
        "SELECT m.ext_id, u.response_id, u.input_tokens, u.output_tokens, u.ts, u.day "
        "FROM usage u JOIN messages m ON m.id = u.message_id ORDER BY u.id"
    ).fetchall()
    norm = [tuple(json.loads(v) if isinstance(v, str) and v[:1] in "[{" else v for v in r)
            for r in msgs]  # fmt: skip
    return {"messages": norm, "usage": [tuple(r) for r in usage]}


def _search(reader, words: str) -> list[tuple]:
    return [
        (h["session_id"], h["role"], h["state"], h["ts"], h["snippet"])
        for h in reader.search(words, projection="audit")
    ]
