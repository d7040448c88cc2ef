"""A stored ``tool_calls`` value damaged on disk is store damage, never "no tool names".

The writer names a tool result from the call it answers (``store.apply.tool_names``), reading
calls stored earlier in the session. It read a value that does not parse as "no names" and
applied the result with no tool name: the damage went unreported and the row was written
differently from the store it would be rebuilt into. Found by the attack helper. Now the read
raises ``DamagedValueError`` (a ``CorruptError``, kind ``damaged``) naming the message.
"""

from __future__ import annotations

import apsw
import pytest
from semantics_helpers import Store, assistant, call

from quill.store.apply.tool_names import stored_names
from quill.store.errors import CorruptError, DamagedValueError


def _damage_last_byte(db, rowid: int) -> None:
    """Turn the closing ``]`` of a stored tool_calls text into a control character, in place
    (the call ids before it stay readable, so the LIKE pre-filter still finds the row)."""
    conn = apsw.Connection(str(db))
    try:
        with conn.blob_open("main", "messages", "tool_calls", rowid, True) as blob:
            blob.seek(blob.length() - 1)
            blob.write(b"\x01")
    finally:
        conn.close()


@pytest.fixture
def damaged(tmp_path):
    store = Store(tmp_path)
    store.apply(
        "messages.append",
        {"session_id": "s", "messages": [assistant("x", tool_calls=[call("c1")])]},
    )
    (mid,) = store.conn.execute("SELECT id FROM messages WHERE tool_calls IS NOT NULL").fetchone()
    _damage_last_byte(tmp_path / "state.db", mid)
    yield store, mid
    store.close()


def test_reading_names_from_a_damaged_stored_call_raises_damage_naming_the_message(damaged):
    store, mid = damaged
    with pytest.raises(DamagedValueError) as found:
        stored_names(store.conn, "s", ["c1"])
    assert f"tool calls of message {mid}" in str(found.value)
    assert isinstance(found.value, CorruptError)


def test_the_writer_does_not_apply_a_result_unnamed_over_a_damaged_call(damaged):
    store, _ = damaged
    result = {"role": "tool", "tool_call_id": "c1", "content": "out"}
    with pytest.raises(CorruptError):
        store.apply("messages.append", {"session_id": "s", "messages": [result]})
    assert store.conn.execute("SELECT count(*) FROM messages WHERE role = 'tool'").fetchone() == (
        0,
    )


def test_a_damaged_postgresql_halt_record_is_named_store_damage(tmp_path, pg_store_url):
    """The halt cause PostgreSQL keeps in ``state_meta`` is JSON the store wrote: a value that
    does not parse is store damage naming it (it escaped as a raw ``JSONDecodeError``)."""
    from quill.store.postgres import halt

    store = Store(tmp_path, pg_store_url)
    try:
        store.conn.execute(
            "INSERT INTO state_meta (key, value) VALUES (?, ?)", (halt.KEY, '{"cause": "x')
        )
        for read in (halt.read, halt.check):
            with pytest.raises(DamagedValueError, match="halt record"):
                read(store.conn)
    finally:
        store.close()
