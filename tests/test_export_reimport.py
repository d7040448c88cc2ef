"""An export imported again: into the store that holds it, it spools nothing (and is already
stored); into a store holding another session of that id, the import says so."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS, QuillCLI
from export_helpers import three_session_export


def test_importing_an_export_again_spools_nothing(quill, tmp_path):
    """The README's promise for every import: a repeat spools only what the store lacks. An
    export imported a second time said "N new" and doubled the spool; its
    ops whose batch ids the store has applied are now skipped and counted as stored."""
    out = three_session_export(quill, tmp_path)
    fresh = QuillCLI(tmp_path / "fresh")
    assert fresh.json("import", str(out))[0]["new"] == 3  # a store without them: everything is new
    fresh.drain()
    before = fresh.json("spool", "status")
    report = fresh.json("import", str(out))[0]
    assert (report["new"], report["already_stored"]) == (0, 3)
    assert fresh.json("spool", "status") == before


@pytest.mark.corpus
def test_an_export_read_back_into_its_own_store_is_already_stored(quill, tmp_path):
    """Imported transcripts (their batch ids are the importer's) exported and read back into
    the same store: every row is already there, images included (stored as blob references),
    so nothing is new and the writer quarantines nothing."""
    quill.run(
        "import",
        str(
            CORPUS / "claude-code" / "context-evaluator__51723c80-7be9-4bc5-9795-7bd86f32165d.jsonl"
        ),
    )
    quill.run("push", "--session", "p", input=json.dumps({"role": "user", "content": "x"}))
    quill.drain()
    out = tmp_path / "export.jsonl"
    quill.run("export", "-o", str(out))
    usage = quill.json("usage", "--by", "session")["usage"]
    report = quill.json("import", str(out))[0]
    assert report["new"] == 0 and report["already_stored"] == report["messages"] > 20, report
    quill.drain()
    assert quill.json("spool", "quarantine", "list")["entries"] == []
    assert (
        quill.json("usage", "--by", "session")["usage"] == usage
    )  # each API response counted once
    again = tmp_path / "again.jsonl"
    quill.run("export", "-o", str(again))
    assert again.read_text() == out.read_text()


def test_an_export_into_a_store_holding_another_session_of_that_id_says_so(quill, tmp_path):
    """Store B has its own session "same"; A's export of "same" can only be refused there:
    the import names it as a conflict, spools nothing for it and exits 1, instead of saying
    "1 new" and leaving the writer to quarantine it."""
    other = QuillCLI(tmp_path / "a")
    other.run("push", "--session", "same", input=json.dumps({"role": "user", "content": "A"}))
    other.run("push", "--session", "mine", input=json.dumps({"role": "user", "content": "A2"}))
    other.drain()
    out = tmp_path / "a.jsonl"
    other.run("export", "-o", str(out))
    quill.run("push", "--session", "same", input=json.dumps({"role": "user", "content": "B"}))
    quill.drain()
    before = quill.json("spool", "status")["end"]
    proc = quill.run("import", str(out), "--json", check=False)
    assert proc.returncode == 1, proc.stderr
    (entry,) = json.loads(proc.stdout)
    assert [p["kind"] for p in entry["problems"]] == ["conflict"] and entry["new"] == 1
    human = quill.run("import", str(out), check=False)
    assert human.returncode == 1 and "conflict" in human.stdout
    quill.drain()
    assert quill.json("spool", "quarantine", "list")["entries"] == []
    assert [m["content"] for m in quill.json("sessions", "show", "same")["messages"]] == ["B"]
    assert [m["content"] for m in quill.json("sessions", "show", "mine")["messages"]] == ["A2"]
    assert quill.json("spool", "status")["end"] != before  # "mine" was spooled
