"""Re-importing a transcript while its ``sessions.delete`` is still in the spool (the writer
not running, or behind): the import decides as if the delete were applied, so the session
and its delegate children come back once the writer drains — an unconditional delete — or
the session is skipped with a clear problem — a conditional one, whose outcome only the
writer decides. Real data dirs and real ``quill`` subprocesses, the real corpus file."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS

FILE = (
    CORPUS / "claude-code" / "d-kimuson__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
)  # 6 sessions, 437 messages


def _drain(quill) -> None:
    quill.drain()


def _counts(quill, sids) -> dict[str, int]:
    """Audit rows per session (absent sessions: -1)."""
    out = {}
    for sid in sids:
        proc = quill.run("sessions", "show", sid, "--view", "audit", "--json", check=False)
        out[sid] = len(json.loads(proc.stdout)["messages"]) if proc.returncode == 0 else -1
    return out


@pytest.mark.corpus
def test_reimport_while_a_delete_is_pending_brings_the_sessions_back(quill, home):
    [first] = quill.json("import", str(FILE))
    assert (first["sessions"], first["messages"], first["new"]) == (6, 437, 437)
    _drain(quill)
    sids = first["session_ids"]
    before = _counts(quill, sids)
    assert min(before.values()) > 0
    main = sids[0]
    quill.run("sessions", "delete", main, "--yes")  # no fleet: the delete waits in the spool
    [again] = quill.json("import", str(FILE))
    assert again["new"] == 437 and again["already_stored"] == 0, again
    _drain(quill)
    assert _counts(quill, sids) == before  # the main session and its 5 delegate children are back
    [third] = quill.json("import", str(FILE))  # now the store holds it again: nothing new
    assert third["new"] == 0 and third["already_stored"] == 437
    _drain(quill)
    assert _counts(quill, sids) == before
    assert quill.json("spool", "quarantine", "list")["entries"] == []


@pytest.mark.corpus
def test_a_pending_conditional_delete_skips_the_session_and_says_so(quill, home):
    [first] = quill.json("import", str(FILE))
    _drain(quill)
    sids = first["session_ids"]
    before = _counts(quill, sids)
    main = sids[0]
    # a job's kind of delete: applied only if its conditions hold when the writer applies it
    quill.run(
        "push",
        input=json.dumps(
            {
                "op": "sessions.delete",
                "data": {
                    "session_ids": [main],
                    "reason": "retention",
                    "actor": "job:test",
                    "only_if": {"unpinned": True},
                },
            }
        ),
    )
    [again] = quill.json("import", str(FILE))
    assert again["new"] == 0 and set(again["session_ids"]).isdisjoint(sids), again
    skipped = [p["reason"] for p in again["problems"] if p["kind"] == "skipped"]
    assert len(skipped) == 6 and all("conditional delete" in r and "pending" in r for r in skipped)
    human = " ".join(quill.run("import", str(FILE)).stdout.split())  # the terminal may wrap lines
    assert "conditional delete" in human and "quill run --until-idle" in human
    _drain(quill)
    assert set(_counts(quill, sids).values()) == {-1}  # the delete applied
    [after] = quill.json("import", str(FILE))  # applied now: the import brings it back
    assert after["new"] == 437
    _drain(quill)
    assert _counts(quill, sids) == before


def test_orphan_adoption_skips_a_session_whose_delete_is_pending(quill, home):
    ops = [
        {"op": "session.create", "data": {"session_id": "a", "source": "bot", "key": "k1"}},
        {
            "op": "messages.append",
            "data": {"session_id": "a", "messages": [{"role": "user", "content": "q"}]},
        },
        {
            "op": "session.create",
            "data": {
                "session_id": "b",
                "source": "bot",
                "parent_id": "a",
                "parent_kind": "compression",
            },
        },
        {
            "op": "messages.append",
            "data": {"session_id": "b", "messages": [{"role": "user", "content": "r"}]},
        },
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    _drain(quill)
    [orphan] = quill.json("sessions", "orphans")["orphans"]
    assert (orphan["session_id"], orphan["predecessor"]) == ("b", "a")
    quill.run("sessions", "delete", "b", "--yes")  # pending: no fleet
    [row] = quill.json("sessions", "orphans", "--adopt")["orphans"]
    assert row["adopted"] is False
    _drain(quill)
    assert quill.run("sessions", "show", "b", check=False).returncode == 3  # not brought back bare


def test_a_damaged_delete_in_the_spool_is_not_pending(tmp_path):
    """The writer quarantines a delete whose checksum fails, it never applies it: the import
    must not treat its sessions as deleted (it would re-spool them under new batch ids)."""
    from quill.ops.transfer.pending_deletes import pending_deletes_from
    from quill.spool import Spool

    spool_dir = tmp_path / "spool"
    with Spool(spool_dir) as sp:
        sp.append("sessions.delete", {"session_ids": ["kept"], "reason": "x", "actor": "t"})
        sp.append("sessions.delete", {"session_ids": ["gone"], "reason": "x", "actor": "t"})
    seg = spool_dir / "00000001.jsonl"
    seg.write_bytes(
        seg.read_bytes().replace(b'"kept"', b'"kepT"', 1)
    )  # a flipped byte: checksum fails
    found = pending_deletes_from(spool_dir, None)
    assert found.certain == {"gone"} and "kepT" not in found and "kept" not in found
