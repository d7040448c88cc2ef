"""The store through the contract, on both backends (``backend``: a SQLite file and a fresh
PostgreSQL schema): chunked apply with cursor, idempotency, quarantine of invalid ops, search
over indexed and not-yet-indexed rows, the query sanitizer. The SQLite-only tests at the end
say why they only make sense there."""

from __future__ import annotations

import json
import string

import apsw
import pytest
from semantics_helpers import Store

from quill.store import Reader, open_writer
from quill.store.search.plan import sanitize


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def drain(store, rejects):
    """Drain the spool; ``rejects`` gets ``(position, reason)`` of each refused op."""
    store.drain()
    rejects += [(pos, reason) for reason, _, pos in store.last_rejects]
    return store.last_result, store.last_entries


def _msgs(n, prefix="m"):
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{prefix} {i}",
            "id": f"{prefix}{i}",
        }
        for i in range(n)
    ]


def test_cursor_commits_with_the_rows_and_replay_changes_nothing(store):
    store.spool.append("session.create", {"session_id": "s", "source": "cli"})
    store.spool.append("messages.append", {"session_id": "s", "messages": _msgs(10)})
    rejects: list = []
    result, entries = drain(store, rejects)
    assert (result.applied, result.rows, rejects) == (2, 10, [])
    assert store.backend.read_cursor() == tuple(entries[-1].next)
    rows = store.rows("s")
    again = store.replay()  # a crash before the cursor moved replays this
    assert (again.applied, again.duplicates, again.rows) == (0, 2, 0)
    assert store.rows("s") == rows
    with store.reader() as r:
        assert r.figures()["messages"] == 10


def test_same_message_ids_in_a_new_batch_are_not_duplicated(store):
    spool = store.spool
    spool.append("messages.append", {"session_id": "s", "messages": _msgs(5)})
    spool.append(
        "messages.append", {"session_id": "s", "messages": _msgs(8)}
    )  # a re-import that grew
    result, _ = drain(store, [])
    assert result.rows == 8
    with store.reader() as r:
        assert [m["content"] for m in r.get_messages("s")] == [f"m {i}" for i in range(8)]


def test_a_batch_with_one_invalid_message_lands_nothing_and_is_quarantined(store):
    spool = store.spool
    spool.append("messages.append", {"session_id": "s", "messages": _msgs(3, "ok")})
    bad = _msgs(3, "bad") + [{"role": "wizard", "content": "nope"}]
    spool.append("messages.append", {"session_id": "s", "messages": bad})
    spool.append("messages.append", {"session_id": "s", "messages": _msgs(2, "after")})
    rejects: list = []
    result, entries = drain(store, rejects)
    assert rejects == [(str(entries[1].position), "invalid-role")]
    assert (result.applied, result.rejected, result.rows) == (2, 1, 5)
    with store.reader() as r:
        assert [m["content"] for m in r.get_messages("s")] == [
            "ok 0",
            "ok 1",
            "ok 2",
            "after 0",
            "after 1",
        ]


def test_messages_keep_every_field_and_unknown_ones_verbatim(store):
    spool = store.spool
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
    }
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look at this"},
                {"type": "image_url", "image_url": {"url": "data:x"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call],
            "reasoning": "think",
            "finish_reason": "tool_calls",
            "usage": {"prompt_tokens": 5},
            "vendor_field": [1, {"a": None}],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "bash", "content": "file.txt"},
    ]
    spool.append("messages.append", {"session_id": "s", "messages": msgs})
    drain(store, [])
    with store.reader() as r:
        got = r.get_messages("s", "model")
    assert got == msgs


@pytest.mark.parametrize("encoding", [None, 0, False, {}, "{}", "null", "[]", []])
def test_empty_tool_calls_mean_no_tool_calls(store, encoding):
    spool = store.spool
    spool.append(
        "messages.append",
        {
            "session_id": "s",
            "messages": [{"role": "assistant", "content": "x", "tool_calls": encoding}],
        },
    )
    drain(store, [])
    with store.reader() as r:
        assert "tool_calls" not in r.get_messages("s", "model")[0]


def test_tool_calls_given_as_a_json_string_are_stored_once_encoded(store):
    spool, conn = store.spool, store.conn
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    spool.append(
        "messages.append",
        {"session_id": "s", "messages": [{"role": "assistant", "tool_calls": json.dumps(calls)}]},
    )
    drain(store, [])
    raw = conn.execute("SELECT tool_calls FROM messages").fetchone()[0]
    assert json.loads(raw) == calls


def test_search_finds_rows_before_and_after_indexing(store):
    spool = store.spool
    spool.append(
        "messages.append",
        {"session_id": "a", "messages": [{"role": "user", "content": "the quokka jumps"}]},
    )
    spool.append(
        "messages.append",
        {
            "session_id": "b",
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "1",
                            "type": "function",
                            "function": {"name": "bash", "arguments": '{"cmd": "grep quokka"}'},
                        }
                    ],
                }
            ],
        },
    )
    drain(store, [])
    with store.reader() as r:
        before = {h["session_id"] for h in r.search("quokka")}
        # SQLite indexes in slices after the commit (2 rows pending); PostgreSQL in the
        # writer's transaction (nothing pending, nothing for the slice to do).
        assert r.figures()["fts_pending"] == (2 if store.kind == "sqlite" else 0)
    assert store.backend.index(100_000) == (2 if store.kind == "sqlite" else 0)
    with store.reader() as r:
        assert r.figures()["fts_pending"] == 0
        after = {h["session_id"] for h in r.search("quokka")}
        assert r.search("quokka", role="user")[0]["session_id"] == "a"
    assert before == after == {"a", "b"}


def test_every_ascii_punctuation_between_two_words_is_a_valid_query(store):
    spool = store.spool
    spool.append(
        "messages.append",
        {"session_id": "s", "messages": [{"role": "user", "content": "alpha beta"}]},
    )
    drain(store, [])
    store.index()
    with store.reader() as r:
        for ch in string.punctuation:
            r.search(f"alpha{ch}beta")  # must not raise
        for q in (
            "#123",
            "src/main.py",
            "don't",
            "50%",
            "a@b.com",
            "chat-send*",
            '"alpha beta"',
            "alpha AND",
            "OR beta",
            "alpha OR beta",
            "NOT",
            '"unterminated',
        ):
            r.search(q)
        assert r.search("alpha OR zzz")[0]["session_id"] == "s"
        assert r.search('"alpha beta"') and not r.search('"beta alpha"')


def test_sanitizer_keeps_operators_only_between_terms():
    assert sanitize("alpha AND") == '"alpha"'
    assert sanitize("OR beta") == '"beta"'
    assert sanitize("a OR b") == '"a" OR "b"'
    assert sanitize("chat-send*") == '"chat-send"*'
    assert sanitize("!!!") == ""


def test_session_end_first_reason_wins_and_title_rules(store):
    spool = store.spool
    spool.append("session.create", {"session_id": "s", "title": "  My\x07 title\n"})
    spool.append("session.create", {"session_id": "t"})
    spool.append("session.title", {"session_id": "t", "title": "My title"})  # taken: rejected
    spool.append("session.end", {"session_id": "s", "reason": "user_exit"})
    spool.append("session.end", {"session_id": "s", "reason": "timeout"})
    rejects: list = []
    drain(store, rejects)
    assert [r[1] for r in rejects] == ["duplicate-title"]
    with store.reader() as r:
        s = r.get_session("s")
        assert (s["title"], s["end_reason"]) == ("My title", "user_exit")
        assert r.get_session("t")["title"] is None


def test_reader_opens_paths_with_uri_special_characters(tmp_path):
    """SQLite only: a file path in a URI (a PostgreSQL store is a URL, not a path)."""
    odd = tmp_path / "we?ird #dir"
    conn = open_writer(odd / "state.db")
    conn.close()
    with Reader(odd / "state.db") as r:
        assert r.figures()["messages"] == 0


@pytest.mark.parametrize(
    "op,data",
    [
        ("session.create", {"session_id": "p", "started_at": 10**400}),
        ("session.end", {"session_id": "p", "ended_at": 10**400}),
        ("session.read", {"session_id": "p", "message_id": 2**70}),
    ],
)
def test_a_poison_record_is_quarantined_and_the_drain_goes_on(store, op, data):
    spool = store.spool
    spool.append(op, data)
    spool.append(
        "messages.append", {"session_id": "ok", "messages": [{"role": "user", "content": "after"}]}
    )
    rejects: list = []
    result, entries = drain(store, rejects)
    assert [r[0] for r in rejects] == [str(entries[0].position)]
    assert result.applied == 1 and store.backend.read_cursor() == tuple(entries[-1].next)
    with store.reader() as r:
        assert [m["content"] for m in r.get_messages("ok")] == ["after"]


def test_a_sqlite_with_the_wal_reset_bug_is_refused():
    """SQLite only: the linked SQLite library's version."""
    from quill.store.errors import CantOpenError
    from quill.store.sqlite.connection import check_sqlite_version

    check_sqlite_version("3.51.3")
    check_sqlite_version("3.54.1")
    for bad in ("3.51.2", "3.45.0", "3.40.1"):
        with pytest.raises(CantOpenError):
            check_sqlite_version(bad)


class _FlakyVFS(apsw.VFS):
    """The OS VFS, except that the next ``fail_reads`` reads raise SQLITE_IOERR."""

    def __init__(self) -> None:
        self.fail_reads = 0
        self.injected = 0
        super().__init__("quill-flaky", "")

    def xOpen(self, name, flags):  # noqa: N802 (apsw's name)
        return _FlakyFile(self, name, flags)


class _FlakyFile(apsw.VFSFile):
    def __init__(self, vfs, name, flags):
        self.vfs = vfs
        super().__init__("", name, flags)

    def xRead(self, amount, offset):  # noqa: N802
        if self.vfs.fail_reads > 0:
            self.vfs.fail_reads -= 1
            self.vfs.injected += 1
            raise apsw.IOError("injected read error")
        return super().xRead(amount, offset)


def test_a_read_is_retried_after_an_io_error_and_a_persistent_one_surfaces(tmp_path):
    """SQLite only: the fault is injected through an apsw VFS (PostgreSQL's I/O errors are the
    server's; a lost connection is covered by the PostgreSQL writer's reconnect tests)."""
    from quill.store.errors import StoreIOError

    store = Store(tmp_path)
    store.apply(
        "messages.append", {"session_id": "io", "messages": [{"role": "user", "content": "x"}]}
    )
    tmp = tmp_path
    vfs = _FlakyVFS()
    try:
        with Reader(tmp / "state.db", vfs="quill-flaky") as r:
            vfs.fail_reads = 1
            assert r.figures()["messages"] == 1  # retried, then answered
            assert vfs.injected == 1
        with Reader(tmp / "state.db", vfs="quill-flaky") as r:  # a cold page cache
            vfs.fail_reads = 100
            with pytest.raises(StoreIOError):
                r.get_messages("io")  # persistent: surfaces, typed
            assert vfs.injected > 1 + 1  # it was retried before giving up
    finally:
        vfs.unregister()
        store.close()
