"""A record over a database limit never wedges a host, on either backend.

* Ids (session, message, tool call, response, key, batch) have one limit on both backends,
  512 characters and 1024 UTF-8 bytes (``spool.record.MAX_ID_*``): producers refuse a longer
  one before the ack (precheck; ``quill push`` exits 2 with nothing appended), and a record
  already in a spool is quarantined with its reason while the rest of its chunk is applied.
* PostgreSQL's own limit class (SQLSTATE 54, "program limit exceeded") is ``OverLimitError``:
  the op is quarantined (``over-limit``), never a writer crash.
* A message whose word document would pass tsvector's 1 MB limit is stored whole, with a
  shorter prefix of it indexed.
Real SQLite files, a real PostgreSQL server, the real spool and CLI."""

from __future__ import annotations

import json
import random
import time

import psycopg
import pytest
from conftest import QuillCLI
from semantics_helpers import Store

from quill.spool import Quarantine, Spool
from quill.spool.record import MAX_ID_BYTES, MAX_ID_CHARS, encode
from quill.spool.segments import segment_name

RNG = random.Random(24)


def _random_ascii(n: int) -> str:
    """Incompressible text: a compressible one could squeeze under PostgreSQL's index limit."""
    return "".join(RNG.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


def _wide(n: int) -> str:
    """``n`` characters of 4 bytes each in UTF-8 (CJK extension B)."""
    return "".join(chr(0x20000 + RNG.randrange(40_000)) for _ in range(n))


LONG_IDS = {
    "message id": {"role": "user", "content": "x", "id": _random_ascii(3000)},
    "tool call id": {"role": "tool", "content": "x", "tool_call_id": _random_ascii(3000)},
    "wide message id": {"role": "user", "content": "x", "id": _wide(300)},  # 1200 bytes
}


def _append_raw(spool_dir, body: dict) -> None:
    """Append a record as an older producer (no id limit) would have written it."""
    seg = spool_dir / segment_name(1)
    with open(seg, "ab") as f:
        f.write(encode({"v": 1, "producer": "old", "seq": 1, "ts": time.time(), **body}))


def test_records_with_ids_over_the_limit_are_quarantined_and_the_rest_applied(tmp_path, backend):
    store = Store(tmp_path, backend)
    try:
        store.spool.append(
            "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": "a"}]}
        )
        for msg in LONG_IDS.values():
            store.spool.append("messages.append", {"session_id": "s", "messages": [msg]})
        store.spool.append(
            "messages.append",
            {"session_id": _wide(300), "messages": [{"role": "user", "content": "wide sid"}]},
        )
        store.spool.close()
        _append_raw(
            tmp_path / "spool",
            {
                "op": "messages.append",
                "batch": _random_ascii(3000),
                "data": {"session_id": "s", "messages": [{"role": "user", "content": "b"}]},
            },
        )
        store.spool = Spool(tmp_path / "spool")
        store.spool.append(
            "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": "c"}]}
        )

        reasons = store.drain()  # one chunk: the refused ones must not take the others down

        assert reasons == [
            "invalid-field",
            "invalid-field",
            "invalid-field",
            "invalid-session-id",
            "invalid-batch",
        ], store.last_rejects
        details = [r[1] for r in store.last_rejects]
        assert all(("characters" in d or "bytes" in d) for d in details), details
        assert [
            r[0] for r in store.conn.execute("SELECT quill_text(content) FROM messages ORDER BY id")
        ] == [
            "a",
            "c",
        ]
        held = [e["reason"] for e in Quarantine(tmp_path / "spool").entries()]
        assert held == reasons
    finally:
        store.close()


def test_ids_at_the_limit_are_stored_on_both_backends(tmp_path, backend):
    """The limit is one both engines can hold: two ids at it share one index row."""
    store = Store(tmp_path, backend)
    try:
        sid = _wide(MAX_ID_BYTES // 4)  # 256 wide characters: 1024 bytes
        ext = _random_ascii(MAX_ID_CHARS)
        wide_call = _wide(MAX_ID_BYTES // 4)
        reasons = store.apply(
            "messages.append",
            {
                "session_id": sid,
                "messages": [
                    {"role": "user", "content": "q", "id": ext},
                    {"role": "tool", "content": "r", "tool_call_id": wide_call, "id": _wide(256)},
                ],
            },
        )
        assert reasons == [], store.last_rejects
        assert len(store.ids(sid)) == 2
    finally:
        store.close()


@pytest.mark.parametrize(
    ("op", "data", "batch", "reason"),
    [
        (
            "messages.append",
            {"session_id": "s", "messages": [LONG_IDS["message id"]]},
            None,
            "invalid-field",
        ),
        (
            "messages.append",
            {"session_id": "s", "messages": [LONG_IDS["tool call id"]]},
            None,
            "invalid-field",
        ),
        (
            "messages.append",
            {"session_id": "s", "messages": [LONG_IDS["wide message id"]]},
            None,
            "invalid-field",
        ),
        ("session.create", {"session_id": _wide(300)}, None, "invalid-session-id"),
        ("session.create", {"session_id": "s", "key": _wide(300)}, None, "invalid-field"),
        (
            "session.create",
            {"session_id": "s", "parent_id": "p" * 600, "parent_kind": "branch"},
            None,
            "invalid-field",
        ),
        (
            "messages.append",
            {
                "session_id": "s",
                "messages": [
                    {
                        "role": "assistant",
                        "content": "x",
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                        "response_id": _wide(300),
                    }
                ],
            },
            None,
            "invalid-field",
        ),
        ("session.create", {"session_id": "s"}, _random_ascii(MAX_ID_CHARS + 1), "invalid-batch"),
    ],
)
def test_precheck_refuses_ids_no_backend_can_store(op, data, batch, reason):
    from quill.store.apply.precheck import precheck
    from quill.store.errors import InvalidOpError

    with pytest.raises(InvalidOpError) as refused:
        precheck(op, data, batch)
    assert refused.value.reason == reason
    assert str(MAX_ID_CHARS) in refused.value.detail or str(MAX_ID_BYTES) in refused.value.detail


def test_quill_push_refuses_a_long_id_before_anything_is_appended(tmp_path):
    quill = QuillCLI(tmp_path / "home")
    long_id = {"session_id": "s", "messages": [{"role": "user", "content": "x", "id": "m" * 600}]}
    long_batch = {"session_id": "s", "batch": "b" * 600, "messages": [{"role": "user"}]}
    for bad, reason in ((long_id, "invalid-field"), (long_batch, "invalid-batch")):
        ok = {"session_id": "s", "messages": [{"role": "user", "content": "ok"}]}
        lines = "\n".join(json.dumps(v) for v in (ok, bad)) + "\n"
        proc = quill.run("push", "--json", input=lines, check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        err = json.loads(proc.stdout or proc.stderr)["error"]
        assert err["kind"] == "usage" and err["exit_code"] == 2
        assert f"batch 1: {reason}:" in err["message"] and "600" in err["message"]
    spool = tmp_path / "home" / "spool"
    assert not any(p.stat().st_size for p in spool.glob("*.jsonl"))  # nothing was appended


def test_class_54_is_over_limit_and_a_missing_table_structural(pg_store_url):
    """The mapping, on the server's own answers (never message text)."""
    from quill.store.contract import BadDataError, OverLimitError
    from quill.store.errors import StructuralError
    from quill.store.postgres import PgConnection

    conn = PgConnection(pg_store_url)
    try:
        with pytest.raises(OverLimitError) as over:
            text = " ".join(_wide(400) for _ in range(750))  # 1.2 MB of distinct lexemes
            conn.execute("SELECT to_tsvector('simple', ?)", (text,)).fetchall()
        assert over.value.sqlstate == "54000" and isinstance(over.value, BadDataError)
        with pytest.raises(StructuralError) as gone:
            conn.execute("SELECT * FROM no_such_table_here").fetchall()
        assert gone.value.sqlstate == "42P01"
    finally:
        conn.close()


def test_a_message_past_the_tsvector_limit_is_stored_and_its_prefix_searchable(
    tmp_path, pg_store_url
):
    """Three parts of 100,000 four-byte characters in distinct words: 1.2 MB of lexemes."""

    def words(tag: str) -> str:
        out = [tag]
        while sum(len(w) + 1 for w in out) < 100_000:
            out.append(_wide(RNG.randint(100, 400)))
        return " ".join(out)[:100_000]

    big = {
        "role": "assistant",
        "content": words("firstcontent"),
        "reasoning": words("firstreasoning"),
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "t", "arguments": words("firsttool")},
            }
        ],
    }
    store = Store(tmp_path, pg_store_url)
    try:
        reasons = store.apply(
            "messages.append",
            {"session_id": "s", "messages": [{"role": "user", "content": "before"}, big]},
        )
        assert reasons == [], store.last_rejects
        assert len(store.ids("s")) == 2
        found = {
            w: store.conn.execute(
                "SELECT count(*) FROM messages WHERE words @@ to_tsquery('simple', ?)", (w,)
            ).fetchone()[0]
            for w in ("firstcontent", "firsttool", "firstreasoning", "before")
        }
        assert found == dict.fromkeys(found, 1), found
        with psycopg.connect(pg_store_url, autocommit=True) as c:
            size = c.execute(
                "SELECT octet_length(content) FROM messages WHERE role = 'assistant'"
            ).fetchone()[0]
        assert size == len(big["content"].encode())  # stored whole, only its index is cut
    finally:
        store.close()


def test_the_word_functions_run_in_a_parallel_query(tmp_path, pg_store_url):
    """Their EXCEPTION blocks start subtransactions, which parallel mode refuses (25000): they
    must be labelled PARALLEL UNSAFE so the planner never runs them there (a rebuild of the
    words column or an operator's query over it)."""
    store = Store(tmp_path, pg_store_url)
    try:
        msg = {
            "role": "assistant",
            "content": "x",
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "grep", "arguments": '{"q": "needle"}'},
                }
            ],
        }
        assert store.apply("messages.append", {"session_id": "s", "messages": [msg]}) == []
        with psycopg.connect(pg_store_url, autocommit=True) as c:
            c.execute("SET force_parallel_mode = on")
            n = c.execute(
                "SELECT count(*) FROM messages "
                "WHERE quill_words(content, tool_calls, reasoning, role, tool_name) "
                "@@ 'needle'::tsquery"
            ).fetchone()[0]
        assert n == 1
    finally:
        store.close()


def test_the_client_and_the_http_api_refuse_a_long_id_in_their_error_format(tmp_path):
    import httpx
    from service_helpers import served

    import quill as pkg

    home = tmp_path / "home"
    client = pkg.Client(home)
    with pytest.raises(pkg.InvalidInputError) as refused:
        client.append("s", [{"role": "user", "content": "x", "tool_call_id": "t" * 600}])
    assert refused.value.reason == "invalid-field"
    with pytest.raises(pkg.InvalidInputError) as refused:
        client.append("s", [{"role": "user", "content": "x"}], batch_id="b" * 600)
    assert refused.value.reason == "invalid-batch"

    ok = {"op": "session.create", "data": {"session_id": "fine"}}
    cases = [
        (
            {"op": "session.create", "data": {"session_id": "s2"}, "batch": "b" * 600},
            "invalid-request",  # the API's own batch id pattern: ≤ 128 characters
        ),
        (
            {
                "op": "messages.append",
                "data": {"session_id": "s2", "messages": [LONG_IDS["wide message id"]]},
            },
            "invalid-field",
        ),
    ]
    with served(QuillCLI(home)) as base:
        for bad, reason in cases:
            r = httpx.post(f"{base}/api/v1/ops", json={"ops": [ok, bad]})
            assert r.status_code == 422, r.text
            err = r.json()["error"]
            assert err["reason"] == reason and err["op_index"] == 1, err
    spool = home / "spool"
    assert not any(p.stat().st_size for p in spool.glob("*.jsonl"))
