"""Content-addressed blobs (store/apply/blobs.py) on both backends (a SQLite file, a PostgreSQL
schema) through the real spool and the backend's apply: one copy per distinct payload, every
read returns the original bytes, a refused op leaves nothing behind, a v1 store is migrated."""

from __future__ import annotations

import base64
import hashlib
import math

import apsw
import pytest
from conftest import CORPUS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from semantics_helpers import Store

from quill.store import open_writer
from quill.store.apply import blobs


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _png(seed: int, size: int = 6000) -> str:
    raw = hashlib.sha256(str(seed).encode()).digest() * (size // 32)
    return base64.b64encode(raw).decode()


def drain(store, rejects=None):
    got = store.drain()
    if rejects is not None:
        rejects += got
    return store.last_result


def _tool_result_with_images(n_images: int, mid: str, call: str) -> dict:
    """A Claude Code style tool result: each image in the parts AND in toolUseResult."""
    srcs = [{"type": "base64", "media_type": "image/png", "data": _png(i)} for i in range(n_images)]
    return {
        "id": mid,
        "role": "tool",
        "tool_call_id": call,
        "content": [{"type": "text", "text": "screenshots"}]
        + [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{s['data']}"}}
            for s in srcs
        ],
        "extra": {"toolUseResult": {"content": [{"type": "image", "source": s} for s in srcs]}},
    }


def test_five_images_twice_each_are_stored_once_and_read_back_intact(store):
    spool, conn = store.spool, store.conn
    call = {
        "id": "m0",
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}
        ],
    }
    result = _tool_result_with_images(5, "m1", "c1")
    spool.append("messages.append", {"session_id": "s", "messages": [call, result]})
    drain(store)
    # 10 copies in (a data URL in the parts + the bare source in toolUseResult per image): 5 rows,
    # each decoded (¾ of the base64 text)
    assert blobs.stats(conn)["blobs"] == 5
    assert blobs.stats(conn)["bytes"] == sum(len(base64.b64decode(_png(i))) for i in range(5))
    stored = conn.execute("SELECT parts, extra FROM messages WHERE ext_id = 'm1'").fetchone()
    assert _png(0) not in stored[0] and _png(0) not in stored[1]
    assert stored[0].count(blobs.REF_PREFIX) == 5 and stored[1].count(blobs.REF_PREFIX) == 5

    with store.reader() as r:
        for projection in ("model", "display", "audit"):
            got = [m for m in r.get_messages("s", projection) if m.get("tool_call_id") == "c1"][0]
            assert got["content"] == result["content"]
            assert got["toolUseResult"] == result["extra"]["toolUseResult"]
        exported = r.export("s")["messages"][1]
        assert exported["content"] == result["content"]
        hit = r.search("screenshots", context=True)[0]
        assert hit["message_id"] == exported["message_id"]


def test_the_same_image_in_many_messages_and_sessions_is_one_row(store):
    spool, conn = store.spool, store.conn
    url = f"data:image/jpeg;base64,{_png(7)}"
    for sid in ("a", "b"):
        msgs = [
            {
                "id": f"u{i}",
                "role": "user",
                "content": [
                    {"type": "text", "text": f"look {i}"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
            for i in range(4)
        ]
        spool.append("messages.append", {"session_id": sid, "messages": msgs})
    drain(store)
    assert blobs.stats(conn)["blobs"] == 1
    with store.reader() as r:
        for sid in ("a", "b"):
            assert all(
                m["content"][1]["image_url"]["url"] == url for m in r.get_messages(sid, "model")
            )


def test_corrupted_base64_and_odd_data_urls_round_trip_exactly(store):
    spool, conn = store.spool, store.conn
    good = _png(3)
    corrupted = good[:2001] + "[REDACTED]" + good[2001:]  # an upstream redactor spliced text in
    odd = f"data:image/png;name=a b.png;base64,{good}"
    small = f"data:image/png;base64,{good[:40]}"  # below MIN_BLOB_CHARS: stays inline
    looks_like_ref = blobs.REF_PREFIX + "0" * 64  # producer text that only looks like a ref
    parts = [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{corrupted}"}},
        {"type": "image_url", "image_url": {"url": odd}},
        {"type": "image_url", "image_url": {"url": small}},
        {"type": "text", "text": looks_like_ref},
        {"inlineData": {"mimeType": "application/pdf", "data": good}},
    ]
    spool.append(
        "messages.append",
        {"session_id": "s", "messages": [{"id": "x", "role": "user", "content": parts}]},
    )
    drain(store)
    # the odd data URL and the inlineData carry the same payload: one row; the corrupted one is text
    assert blobs.stats(conn)["blobs"] == 2
    encodings = sorted(e for (e,) in conn.execute("SELECT encoding FROM blobs"))
    assert encodings == ["base64", "text"]
    with store.reader() as r:
        assert r.get_messages("s", "audit")[0]["content"] == parts


def test_plain_text_content_is_never_cut_out(store):
    spool, conn = store.spool, store.conn
    text = f"data:image/png;base64,{_png(1)}"
    spool.append(
        "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": text}]}
    )
    drain(store)
    assert blobs.stats(conn)["blobs"] == 0
    with store.reader() as r:
        assert r.get_messages("s")[0]["content"] == text


def test_a_refused_op_leaves_no_blob(store):
    spool, conn = store.spool, store.conn
    img = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_png(9)}"}}
    spool.append(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                {"role": "tool", "tool_call_id": "c", "content": [img]},
                {"role": "tool", "tool_call_id": "c", "content": "second live result for c"},
            ],
        },
    )
    rejects: list = []
    drain(store, rejects)
    assert rejects == ["duplicate-tool-result"]
    assert blobs.stats(conn)["blobs"] == 0


def test_compaction_copies_share_the_blob(store):
    spool, conn = store.spool, store.conn
    img = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_png(5)}"}}
    msgs = [
        {"id": "u", "role": "user", "content": [{"type": "text", "text": "see"}, img]},
        {"id": "a", "role": "assistant", "content": "seen"},
    ]
    spool.append("messages.append", {"session_id": "s", "messages": msgs})
    spool.append(
        "messages.compact",
        {
            "session_id": "s",
            "tail_count": 1,
            "messages": [{"role": "user", "content": "[summary]"}, msgs[1]],
        },
    )
    spool.append(
        "messages.compact",
        {
            "session_id": "s",
            "tail_count": 0,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "again"}, img]}],
        },
    )
    drain(store)
    assert blobs.stats(conn)["blobs"] == 1
    with store.reader() as r:
        model = r.get_messages("s", "model")
        assert model[0]["content"][1] == img


def test_a_v1_store_is_migrated_to_hold_blobs(tmp_path):
    """SQLite only: a v1 state.db file (every PostgreSQL store was created at v3 or later;
    the same MIGRATIONS list runs there, translated: docs/backends.md)."""
    db = tmp_path / "state.db"
    conn = apsw.Connection(str(db))
    from quill.store import schema
    from quill.store.apply import batches, order, usage

    v1_ddl = (
        schema.DDL.replace(blobs.DDL, "")
        .replace(usage.MIGRATION, "")
        .replace(schema.BATCH_DIGEST, "")
        .replace(schema.SESSION_DELETIONS, "")
        .replace(schema.SPOOL_IDENTITY, "")
        .replace(schema.LEADER_LEASE, "")
        .replace(order.MIGRATION, "")
        .replace(schema.MESSAGES_SESSION_TS, "")
        .replace(schema.OWNER_PROOF, "")
        .replace(batches.MIGRATION, "")
    )
    conn.execute(v1_ddl)
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    writer = open_writer(db)
    try:
        assert writer.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        assert blobs.put(writer, "data:image/png;base64," + _png(2), now=1.0) == blobs.sha256_of(
            "data:image/png;base64," + _png(2)
        )
        assert blobs.get(
            writer, blobs.sha256_of("data:image/png;base64," + _png(2))
        ) == "data:image/png;base64," + _png(2)
    finally:
        writer.close()


# -- the may_hold_payload shortcut: extract with it equals the full walk ------------------------

_B64 = base64.b64encode(b"\x89PNG" * 400).decode()  # 2,136 characters
_STRINGS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["data", "data:", "base64", ";base64,", "image/png", '"data":"', "quill-blob:"]
    ),
    # around the size threshold, as data URLs, bare payloads and text that only looks like one
    st.builds(
        lambda n, pre: pre + _B64[:n],
        st.integers(900, 1100),
        st.sampled_from(
            [
                "",
                "data:image/png;base64,",
                "data:;base64,",
                "data:x" + "y" * 300 + ";base64,",
                "text data: ;base64, ",
                "\ud800",
                "é" * 100,
            ]
        ),
    ),
)
_KEYS = st.one_of(
    st.sampled_from(
        [
            "data",
            "type",
            "media_type",
            "mime_type",
            "mimeType",
            "source",
            "url",
            "dat",
            "Data",
            "data ",
        ]
    ),
    st.text(max_size=6),
)
_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True),
        _STRINGS,
        st.just("base64"),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=5)),
    max_leaves=12,
)


def _same_json(a, b) -> bool:
    """``a == b`` for JSON values, except that NaN equals NaN (``==`` never holds for a NaN
    float on its own; inside a list or dict Python compares the same object by identity)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same_json, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(v, b[k]) for k, v in a.items())
    return a == b


def _same_extract(value):
    fast, fast_found = blobs.extract(value)
    full, full_found = blobs.walk_extract(value)
    assert _same_json(fast, full) and fast_found == full_found, (fast, full)
    if not blobs.may_hold_payload(value):
        assert full is value and not full_found  # the shortcut only ever skips a no-op walk


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_JSON)
def test_extract_with_the_shortcut_equals_the_full_walk_on_generated_values(value):
    _same_extract(value)


@pytest.mark.parametrize(
    "value",
    [
        "data:image/png;base64," + _B64,  # a bare data URL
        {"type": "base64", "media_type": "image/png", "data": _B64},  # Anthropic source
        {"inlineData": {"mimeType": "image/png", "data": _B64}},  # Gemini
        {"data": "x" * (blobs.MIN_BLOB_CHARS - 1), "type": "base64"},  # one short of the size
        {"data": "x" * blobs.MIN_BLOB_CHARS, "type": "base64"},  # exactly the size
        {
            "url": "data:image/png;base64," + "A" * (blobs.MIN_BLOB_CHARS - 22)
        },  # URL of exactly the size
        {"url": "data:" + "y" * 300 + ";base64," + _B64},  # marker past 256 chars
        [{"media_type": "image/png", "data": "bad\ud800" + _B64}],  # lone surrogate
        {"text": 'say "data":"' + _B64 + '"'},  # text that only looks like it
        {"nested": [[[{"source": {"type": "base64", "data": _B64}}]]]},
    ],
)
def test_extract_with_the_shortcut_equals_the_full_walk_on_edge_cases(value):
    _same_extract(value)


@pytest.mark.corpus
def test_extract_with_the_shortcut_equals_the_full_walk_on_the_corpus():
    """Every message the importers parse from the shared corpus (the benchmarks' messages),
    each of its values: same result with and without the shortcut, and some values do hold
    payloads (so the test would see a shortcut that skipped one)."""
    from quill.ops.importers import iter_transcript_files, parse_file

    n = cut = 0
    for path in iter_transcript_files([CORPUS]):
        for session in parse_file(path).sessions:
            for msg in session.messages:
                for value in msg.values():
                    _same_extract(value)
                    cut += bool(blobs.walk_extract(value)[1])
                n += 1
    assert n > 1000 and cut > 0


class _Counting:
    """A real store connection that counts the statements reading the blobs table."""

    def __init__(self, conn):
        self.conn, self.blob_reads = conn, 0

    def execute(self, sql, args=()):
        self.blob_reads += "FROM blobs" in sql
        return self.conn.execute(sql, args)


def test_a_page_of_rows_reads_all_its_blobs_in_one_query(store):
    """Search context and page reads inflate many rows at once (projections.inflate_rows):
    every payload they reference is one query, not a round trip per reference."""
    from quill.store.read import projections

    images = [_png(100 + i) for i in range(6)]
    msgs = [
        {
            "id": f"m{i}",
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{p}"}}],
        }
        for i, p in enumerate(images)
    ]
    assert store.apply("messages.append", {"session_id": "s", "messages": msgs}) == []
    rows = store.conn.execute(
        f"SELECT {projections.MSG_COLS} FROM messages WHERE session_id = ? ORDER BY id", ("s",)
    ).fetchall()
    counting = _Counting(store.conn)
    got = projections.inflate_rows(counting, rows)
    assert [m["content"] for m in got] == [m["content"] for m in msgs]
    assert counting.blob_reads == 1
