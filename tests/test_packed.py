"""Packed message texts (store/packed.py): a text of ``[store] pack_min_bytes`` or more is a
Zstandard BLOB in the SQLite file, and every reader gets what an unpacked store gives — every
field, search hits and snippets (words, phrases, substrings, CJK, the not-yet-indexed tail),
clipped reads, revisions, a rebuild from the spool, export → import, salvage of a damaged
file. Each comparison runs the same ops into a store that packs every text (threshold 0) and
one that packs none, and first checks that the packed store really holds BLOBs."""

from __future__ import annotations

import pack_env
import pytest
from semantics_helpers import Store, assistant, call, tool, user

from quill.home import DEFAULTS
from quill.spool import Spool
from quill.store import packed
from quill.store.factory import open_url
from quill.store.postgres.dialect import translate
from quill.store.sqlite.connection import open_writer

NONE = 10**9  # a threshold no text here reaches: the unpacked store
SID = "s-packed"
LONG = " ".join(f"line {i} of the build log zyzzyva{i % 7} wombat" for i in range(120))
CJK = "数据库的压缩测试，" * 150 + "独角兽"  # ~4 KB of UTF-8, past the trigram prefix
MID_CJK = "短文本里的独角兽"  # a short CJK text (inside the trigram prefix)


def _store(root, pack: int) -> Store:
    s = Store.__new__(Store)
    s.root, s.spool = root, Spool(root / "spool")
    s.backend = open_url(None, root / "state.db", "test-spool", pack_min_bytes=pack)
    s.kind, s.conn = s.backend.kind, s.backend.conn
    return s


def _messages() -> list[dict]:
    return [
        user("hello there", id="u1", timestamp=1_700_000_000),
        assistant(
            LONG,
            id="a1",
            tool_calls=[call("c1", "Bash", '{"command": "make zyzzyva3"}')],
            reasoning="thinking about wombats",
            timestamp=1_700_000_001,
        ),
        {**tool("c1", LONG + " exit 0", name="Bash"), "id": "r1", "timestamp": 1_700_000_001.5},
        user(CJK, id="u2", timestamp=1_700_000_002),
        user(MID_CJK, id="u3", timestamp=1_700_000_003),
        {
            "role": "user",
            "id": "u4",
            "timestamp": 1_700_000_003.5,
            "content": [{"type": "text", "text": "part one zyzzyva9 " * 80}, {"type": "x"}],
        },
        assistant("", id="a2", timestamp=1_700_000_004),
        {
            "role": "assistant",
            "content": None,
            "id": "a3",
            "extra": {"k": "v" * 2000},
            "timestamp": 1_700_000_005,
        },
    ]


def _fill(store: Store) -> None:
    assert store.apply("messages.append", {"session_id": SID, "messages": _messages()}) == []


def _forms(store: Store | object) -> dict[str, int]:
    conn = getattr(store, "conn", store)
    return dict(
        conn.execute(
            "SELECT typeof(content), count(*) FROM messages WHERE content != '' "
            "GROUP BY typeof(content)"
        ).fetchall()
    )


QUERIES = [
    ("zyzzyva3", {}),
    ("wombat", {"context": True}),
    ('"build log"', {}),
    ("yzzyva", {"substring": True}),
    ("独角兽", {}),
    ("压缩测试", {"substring": True}),
    ("zyzzyva9", {"kinds": ["text"]}),
    ("Bash", {"kinds": ["tool"]}),
    ("wombats", {"kinds": ["reasoning"]}),
]


def _searches(store: Store) -> list:
    reader = store.reader()
    try:
        return [reader.search(q, limit=50, **kw) for q, kw in QUERIES]
    finally:
        reader.close()


@pytest.fixture
def pair(tmp_path):
    a, b = _store(tmp_path / "packed", 0), _store(tmp_path / "plain", NONE)
    _fill(a)
    _fill(b)
    yield a, b
    a.backend.close()
    b.backend.close()


def test_long_texts_are_blobs_and_every_field_reads_back_the_same(pair):
    a, b = pair
    assert _forms(a) == {"blob": 6} and _forms(b) == {"text": 6}
    ra, rb = a.reader(), b.reader()
    try:
        for projection in ("model", "display", "audit"):
            got = ra.get_messages(SID, projection)
            assert got == rb.get_messages(SID, projection)
        assert got[1]["content"] == LONG and got[3]["content"] == CJK
        assert ra.export(SID)["messages"] == rb.export(SID)["messages"]
        assert ra.message_versions(SID) == rb.message_versions(SID)
        assert ra.message_identities(SID, ["a1", "u2"]) == rb.message_identities(SID, ["a1", "u2"])
        assert [s["preview"] for s in ra.list_sessions()] == [
            s["preview"] for s in rb.list_sessions()
        ]
    finally:
        ra.close()
        rb.close()


def test_a_default_store_packs_only_texts_of_at_least_the_threshold(tmp_path):
    s = _store(tmp_path, pack_env.production_pack_min_bytes())
    try:
        _fill(s)
        kinds = dict(s.conn.execute("SELECT ext_id, typeof(content) FROM messages").fetchall())
        assert kinds["a1"] == "blob" and kinds["u2"] == "blob" and kinds["r1"] == "blob"
        assert kinds["u1"] == "text" and kinds["u3"] == "text" and kinds["a3"] == "null"
    finally:
        s.backend.close()


def test_search_hits_are_the_same_packed_or_not_tail_and_indexed(pair):
    a, b = pair
    assert _forms(a) == {"blob": 6}
    tail = _searches(a)  # nothing indexed yet: the tail scan reads the packed texts
    assert tail == _searches(b)
    assert all(tail), [q for (q, _), hits in zip(QUERIES, tail) if not hits]
    a.index()
    b.index()
    assert _searches(a) == _searches(b) == tail


def test_clipped_reads_cut_a_packed_text_by_its_own_size(pair):
    a, b = pair
    assert _forms(a) == {"blob": 6}
    ra, rb = a.reader(), b.reader()
    try:
        got, want = ra.get_messages(SID, clip=100), rb.get_messages(SID, clip=100)
    finally:
        ra.close()
        rb.close()
    assert got == want
    assert got[1]["content"] == LONG[:100]
    assert got[1]["clipped"]["content"] == len(LONG.encode())


def test_a_clipped_read_of_a_damaged_packed_text_is_a_corrupt_error_never_other_text(pair):
    """Each byte of a packed text's frame flipped in the store file, one at a time: the
    clipped read (the dashboard's transcript page) either returns the text's own first
    characters or raises ``PackedValueError`` — never another text (a flip in a block of
    literals decodes quietly to one; only the frame's checksum, at its end, tells) and never
    zstandard's or the codec's own error, which no caller maps to a damaged store."""
    a, _ = pair
    (mid,) = a.conn.execute("SELECT id FROM messages WHERE ext_id = 'a1'").fetchone()
    (size,) = a.conn.execute("SELECT length(content) FROM messages WHERE id = ?", (mid,)).fetchone()
    reader = a.reader()
    outcomes = {"same": 0, "error": 0}
    try:
        for at in range(size):
            with a.conn.blob_open("main", "messages", "content", mid, True) as blob:
                blob.seek(at)
                byte = blob.read(1)
                blob.seek(at)
                blob.write(bytes([byte[0] ^ 0x20]))
            try:
                got = reader.get_messages(SID, clip=100)[1]["content"]
                assert got == LONG[:100], f"byte {at} flipped: another text read back"
                outcomes["same"] += 1
            except packed.PackedValueError:
                outcomes["error"] += 1
            finally:
                with a.conn.blob_open("main", "messages", "content", mid, True) as blob:
                    blob.seek(at)
                    blob.write(byte)
        assert reader.get_messages(SID, clip=100)[1]["content"] == LONG[:100]
    finally:
        reader.close()
    assert outcomes["error"] >= size - packed.HEADER_BYTES, outcomes


def test_a_revision_of_a_packed_row_rewrites_it_packed_and_reindexes(pair):
    for s in pair:
        s.index()
        revised = dict(_messages()[1], content=LONG.replace("wombat", "quokka"))
        assert (
            s.apply("messages.append", {"session_id": SID, "messages": [revised], "revise": True})
            == []
        )
    a, b = pair
    assert _forms(a) == {"blob": 6}
    ra = a.reader()
    try:
        assert ra.get_messages(SID)[1]["content"] == revised["content"]
    finally:
        ra.close()
    assert _searches(a) == _searches(b)
    hits = {h["message_id"] for h in a.reader().search("quokka")}
    assert len(hits) == 1
    assert not hits & {h["message_id"] for h in a.reader().search("wombat", limit=50)}


def test_a_rebuild_from_the_spool_equals_the_live_store(pair, tmp_path):
    from quill.ops.recover.replay import replay
    from quill.spool import Quarantine

    live = pair[0]
    target = tmp_path / "rebuilt.db"
    replay(live.root / "spool", target, None, quarantine=Quarantine.for_store(target))
    rebuilt = open_url(None, target, "local")
    try:
        # the default threshold: 1 KiB (0, every text, under QUILL_TEST_PACK_MIN_BYTES=0)
        forms = {1024: {"blob": 4, "text": 2}, 0: {"blob": 6}}.get(DEFAULTS.pack_min_bytes)
        assert forms is None or _forms(rebuilt.conn) == forms
        got, want = rebuilt.reader(), live.reader()
        assert got.get_messages(SID, "audit") == want.get_messages(SID, "audit")
        assert [got.search(q, **kw) for q, kw in QUERIES] == _searches(live)
    finally:
        rebuilt.close()


def test_export_then_import_gives_the_same_messages(pair, tmp_path):
    import json

    from quill.ops.transfer import export
    from quill.ops.transfer.export_reimport import import_export

    a, _ = pair
    out = tmp_path / "export.jsonl"
    lines = [export.header(1), *export.quill_ops(a.reader(), SID)]
    out.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    fresh = _store(tmp_path / "fresh", 0)
    try:
        assert import_export(fresh.spool, out, fresh.reader())["new"] == len(_messages())
        assert fresh.drain() == []
        assert _forms(fresh) == {"blob": 6}
        assert fresh.reader().get_messages(SID, "audit") == a.reader().get_messages(SID, "audit")
    finally:
        fresh.backend.close()


def test_salvage_counts_a_damaged_packed_text_unreadable_and_copies_the_rest(tmp_path):
    from quill.store.sqlite.salvage import salvage

    old = _store(tmp_path / "old", 0)
    for sid in ("a", "b"):
        msgs = [user(f"{sid} {LONG}", id=f"{sid}1"), user(f"{sid} second {CJK}", id=f"{sid}2")]
        assert old.apply("messages.append", {"session_id": sid, "messages": msgs}) == []
    (bad,) = old.conn.execute("SELECT id FROM messages WHERE ext_id = 'b2'").fetchone()
    with old.conn.blob_open("main", "messages", "content", bad, True) as blob:
        blob.seek(packed.HEADER_BYTES + 4)
        blob.write(b"\xff" * 16)  # the frame's data damaged in place
    old.backend.close()
    target = open_writer(tmp_path / "new.db", pack_min_bytes=0)
    try:
        figures = salvage(tmp_path / "old" / "state.db", target)
        assert figures["salvaged_messages"] == 3 and figures["unreadable_message_ids"] == 1
        rows = target.execute(
            "SELECT ext_id, typeof(content), quill_text(content) FROM messages ORDER BY id"
        ).fetchall()
        assert [r[:2] for r in rows] == [("a1", "blob"), ("a2", "blob"), ("b1", "blob")]
        assert rows[0][2] == f"a {LONG}" and rows[1][2] == f"a second {CJK}"
    finally:
        target.close()


def test_a_damaged_packed_text_is_a_corrupt_error_not_garbage():
    value = packed.pack("x" * 4000, 0)
    assert isinstance(value, bytes) and packed.unpack(value) == "x" * 4000
    assert packed.packed_size(value[: packed.HEADER_BYTES]) == 4000
    with pytest.raises(packed.PackedValueError):
        packed.unpack(value[:-3])
    assert packed.pack("", 0) == "" and packed.pack(None, 0) is None


def test_postgres_reads_the_packing_functions_as_their_argument():
    sql, _ = translate(
        f"UPDATE messages SET content = {packed.pack_sql()} WHERE id = ? "
        f"RETURNING {packed.columns_sql(['content'], 'm.')}, "
        f"length({packed.text_sql('content')}), quill_text(content)"
    )
    assert "quill_" not in sql and "typeof" not in sql
    assert "content = %s" in sql and "m.content AS content" in sql
    assert "length(content)" in sql


def test_the_vacuum_job_packs_the_texts_a_store_holds_plain(tmp_path, pair):
    """Rows written plain (before packing, or under a higher threshold) are packed by the
    ``vacuum`` job, in slices; the text, the search hits and the indexes do not change."""
    from quill.jobs.store_jobs import vacuum

    _, plain = pair
    plain.index()
    before = (plain.reader().get_messages(SID, "audit"), _searches(plain))
    plain.backend.close()
    again = _store(plain.root, 0)  # the same file, opened by a writer that packs every text
    try:
        assert _forms(again) == {"text": 6}
        figures = vacuum(again.conn, min_free_ratio=0.0)
        assert figures["packed_rows"] == 6 and _forms(again) == {"blob": 6}
        assert vacuum(again.conn)["packed_rows"] == 0  # nothing left to pack
        assert (again.reader().get_messages(SID, "audit"), _searches(again)) == before
        check = again.conn.execute("PRAGMA integrity_check").fetchall()
        assert check == [("ok",)]
    finally:
        again.backend.close()
