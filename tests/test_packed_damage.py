"""A packed message text (store/packed.py) damaged inside the frame's data: a reader gets a
``CorruptError``, never another text in the message's place; the session's other messages,
and other sessions, stay readable."""

from __future__ import annotations

import random

import pytest
from semantics_helpers import Store, user

from quill.spool import Spool
from quill.store import packed
from quill.store.errors import CorruptError
from quill.store.factory import open_url

SID = "s-damaged"
#: A tool output of digits and newlines: Zstandard keeps much of it as literals, where a
#: flipped byte still decodes (to another digit string) unless the frame is checksummed.
_RANDOM = random.Random(5)
OUTPUT = "".join(_RANDOM.choice("0123456789\n") for _ in range(20_000))


def _store(root) -> Store:
    s = Store.__new__(Store)
    s.root, s.spool = root, Spool(root / "spool")
    s.backend = open_url(None, root / "state.db", "test-spool", pack_min_bytes=1024)
    s.kind, s.conn = s.backend.kind, s.backend.conn
    return s


@pytest.mark.parametrize("at", [0.25, 0.5, 0.75])
def test_a_frame_damaged_in_its_data_is_an_error_not_another_text(at):
    value = bytearray(packed.pack(OUTPUT, 0))
    value[int(len(value) * at)] ^= 0x20
    try:
        got = packed.unpack(bytes(value))
    except packed.PackedValueError:
        return
    pytest.fail(f"damaged frame read as a text ({'same' if got == OUTPUT else 'other'} text)")


def test_a_damaged_message_fails_its_read_and_the_rest_read_back(tmp_path):
    store = _store(tmp_path)
    try:
        msgs = [user("short question", id="u1"), user(OUTPUT, id="u2"), user("x" * 3000, id="u3")]
        assert store.apply("messages.append", {"session_id": SID, "messages": msgs}) == []
        other = [user("another session " + "y" * 3000, id="o1")]
        assert store.apply("messages.append", {"session_id": "s-other", "messages": other}) == []
        (bad,) = store.conn.execute("SELECT id FROM messages WHERE ext_id = 'u2'").fetchone()
        with store.conn.blob_open("main", "messages", "content", bad, True) as blob:
            middle = blob.length() // 2
            blob.seek(middle)
            byte = blob.read(1)
            blob.seek(middle)
            blob.write(bytes([byte[0] ^ 0x20]))
        reader = store.reader()
        with pytest.raises(CorruptError):
            reader.get_messages(SID, "audit")
        assert [m["content"] for m in reader.get_messages("s-other", "audit")] == [
            other[0]["content"]
        ]
        texts = store.conn.execute(
            "SELECT quill_text(content) FROM messages WHERE ext_id IN ('u1', 'u3') ORDER BY id"
        ).fetchall()
        assert [t for (t,) in texts] == ["short question", "x" * 3000]
    finally:
        store.backend.close()


def test_the_damage_check_finds_a_damaged_packed_text_and_asks_the_writer_to_halt(tmp_path):
    from quill.jobs.worker_jobs import DamageFound, quick_check

    store = _store(tmp_path)
    try:
        msgs = [user(OUTPUT, id="u1"), user("y" * 4000, id="u2")]
        assert store.apply("messages.append", {"session_id": SID, "messages": msgs}) == []
        db = str(tmp_path / "state.db")
        assert quick_check(db, "queue.db")["result"] == "ok"  # sound packed texts: no finding
        (bad,) = store.conn.execute("SELECT id FROM messages WHERE ext_id = 'u2'").fetchone()
        with store.conn.blob_open("main", "messages", "content", bad, True) as blob:
            blob.seek(blob.length() - 2)
            blob.write(b"\x00\x00")  # the checksum no longer matches the text
        with pytest.raises(DamageFound) as found:
            quick_check(db, "queue.db")
        assert f"packed text of message {bad} is damaged" in str(found.value)
        assert [name for name, _ in found.value.followups] == ["declare_corrupt"]
    finally:
        store.backend.close()
