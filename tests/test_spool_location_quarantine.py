"""A producer pointed at the data dir still appends where the writer
drains (anything else is refused or flagged), and quarantine is scoped per store and managed
with `quill spool quarantine …`. Real data dirs, real CLI subprocesses, real writer."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from quill.spool import Spool, SpoolError, SpoolLocationError
from quill.spool.segments import resolve_spool_dir


def _bad_and_good(home):
    """One record the writer refuses (a compaction of a session that does not exist yet) and
    one it applies."""
    with Spool(home / "spool") as sp:
        sp.append(
            "messages.compact",
            {"session_id": "later", "messages": [{"role": "user", "content": "sum"}]},
        )
        sp.append(
            "messages.append",
            {"session_id": "s1", "messages": [{"role": "user", "content": "hello"}]},
        )


def test_spool_given_the_data_dir_appends_where_the_writer_drains(quill, home):
    quill.drain()  # creates the data dir layout
    with Spool(home) as sp:
        ack = sp.append(
            "messages.append",
            {"session_id": "via-home", "messages": [{"role": "user", "content": "x"}]},
        )
    assert (home / "spool" / "00000001.jsonl").exists() and not (home / "00000001.jsonl").exists()
    assert ack.position.segment == 1
    quill.drain()
    assert [s["id"] for s in quill.json("sessions", "list")["sessions"]] == ["via-home"]


def test_a_directory_that_is_neither_spool_nor_data_dir_is_refused(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("not a spool")
    with pytest.raises(SpoolLocationError) as info:
        Spool(project)
    assert isinstance(info.value, SpoolError) and info.value.path == str(project)
    assert "README.md" in str(info.value)
    assert list(project.iterdir()) == [project / "README.md"]  # nothing written
    with pytest.raises(SpoolLocationError):
        Spool(project / "README.md")
    assert resolve_spool_dir(tmp_path / "fresh") == tmp_path / "fresh"  # created as a spool
    (tmp_path / "empty").mkdir()
    assert resolve_spool_dir(tmp_path / "empty") == tmp_path / "empty"
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.toml").write_text("")
    assert resolve_spool_dir(tmp_path / "home") == tmp_path / "home" / "spool"


def test_doctor_flags_stray_segments_and_adopt_brings_their_records_in(quill, home):
    quill.drain()
    with Spool(home / "logs" / "misplaced") as sp:  # a producer given a wrong, fresh directory
        sp.append("session.create", {"session_id": "stray", "title": "lost?"})
    checks = {c["check"]: c for c in json.loads(quill.run("doctor", "--json", check=False).stdout)}
    assert checks["stray segments"]["status"] == "fail"
    assert "misplaced/00000001.jsonl" in checks["stray segments"]["detail"]
    out = quill.json("spool", "adopt", str(home / "logs" / "misplaced" / "00000001.jsonl"))
    assert out["adopted"] == 1 and out["damaged"] == []
    quill.drain()
    assert [s["title"] for s in quill.json("sessions", "list")["sessions"]] == ["lost?"]
    checks = {c["check"]: c for c in json.loads(quill.run("doctor", "--json", check=False).stdout)}
    assert checks["stray segments"]["status"] == "ok"


def test_replay_into_a_scratch_file_keeps_its_quarantine_beside_it_and_exits_1(
    quill, home, tmp_path
):
    _bad_and_good(home)
    scratch = tmp_path / "scratch.db"
    proc = quill.run(
        "spool", "replay", "--from", "1:0", "--into", str(scratch), "--json", check=False
    )
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["rejected"] == 1 and result["applied"] == 1
    assert result["quarantine"] == str(scratch) + ".quarantine"
    assert not (home / "spool" / "quarantine").exists()
    assert quill.status()["spool"]["quarantined"] == 0
    assert quill.json("spool", "status")["quarantined"] == 0
    listed = quill.json("spool", "quarantine", "--store", str(scratch), "list")
    assert [e["reason"] for e in listed["entries"]] == ["unknown-session"]
    assert quill.json("spool", "quarantine", "list")["entries"] == []
    # The human output's hint is a command that runs as printed.
    human = quill.run(
        "spool", "replay", "--from", "1:0", "--into", str(tmp_path / "again.db"), check=False
    )
    hinted = re.search(r"`quill (spool quarantine [^`]*)`", human.stderr).group(1)
    assert quill.run(*shlex.split(hinted)).returncode == 0


def test_quarantine_list_show_retry_and_drop(quill, home):
    _bad_and_good(home)
    with Spool(home / "spool") as sp:
        sp.append(
            "session.title", {"session_id": "s1", "title": "x" * 300}
        )  # refused: title-too-long
    quill.drain()
    entries = quill.json("spool", "quarantine", "list")["entries"]
    assert [e["reason"] for e in entries] == ["unknown-session", "title-too-long"]
    compact, title = (e["id"] for e in entries)
    shown = quill.json("spool", "quarantine", "show", compact)
    assert shown["op"] == "messages.compact" and '"later"' in shown["raw"]
    missing = quill.run("spool", "quarantine", "show", "9:9", check=False)
    assert missing.returncode == 3
    # the session the compaction needed now exists: a retry goes through the spool and applies
    with Spool(home / "spool") as sp:
        sp.append(
            "messages.append",
            {"session_id": "later", "messages": [{"role": "user", "content": "q"}]},
        )
    retried = quill.json("spool", "quarantine", "retry", compact)
    assert retried["batch"] != shown["batch"]
    quill.drain()
    assert quill.json("spool", "quarantine", "list")["entries"] == [{**entries[1]}]
    dropped = quill.json("spool", "quarantine", "drop", title)
    assert dropped["dropped"] is True
    assert quill.json("spool", "quarantine", "list")["entries"] == []
    audit = [
        json.loads(line)
        for line in (home / "spool" / "quarantine" / "audit.jsonl").read_text().splitlines()
    ]
    assert [(a["action"], a["id"]) for a in audit] == [("retry", compact), ("drop", title)]
    assert audit[1]["entry"]["reason"] == "title-too-long" and audit[1]["actor"].startswith("user:")
    assert quill.status()["spool"]["quarantined"] == 0
    hits = quill.json("search", "sum")["hits"]
    assert [h["session_id"] for h in hits] == ["later"]
