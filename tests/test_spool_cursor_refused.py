"""What the writer refuses at its start, ``quill status`` and ``quill doctor`` say too.

The writer checks the store's cursor against its own spool before applying anything
(``spool.cursor_proof.check``) and refuses a cursor that is not this spool's or that points
past the spool's end (``CursorMismatchError``): ``quill run`` exits 5. The refusal is published
only while that writer lives, so once the fleet stopped (``--until-idle``, or a crash loop
ended by the operator) status and doctor must find it themselves, from the same check, and
exit 1 naming it with the next step — not report a healthy store. And when the segment the
cursor points into is gone with everything after it (an operator's ``rm``, a restore that
left the spool behind), the records after the cursor were acknowledged and never applied:
the spool's classification (``spool.integrity``) counts that as loss, as it does a segment
cut shorter than the cursor.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
from service_helpers import served

from quill.spool import Spool
from quill.spool.segments import list_segments, segment_name


def _append(home: Path, session: str, n: int, text: str = "m", segment_bytes: int | None = None):
    kw = {"segment_bytes": segment_bytes} if segment_bytes else {}
    with Spool(home / "spool", **kw) as sp:
        for i in range(n):
            sp.append(
                "messages.append",
                {"session_id": session, "messages": [{"role": "user", "content": f"{text}{i}"}]},
            )


def _assert_status_and_doctor_say(quill, words: str) -> dict:
    proc = quill.run("status", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert words in proc.stdout, proc.stdout
    status = quill.json("status", check=False)
    doctor = {c["check"]: c for c in quill.json("doctor", check=False)}
    failed = [c for c in doctor.values() if c["status"] == "fail"]
    assert failed, doctor
    return status


def test_the_cursors_segment_deleted_with_everything_after_it_is_loss(quill, home):
    quill.run("status")  # creates the data dir
    _append(home, "s", 5)
    quill.drain()
    _append(home, "s", 3, text="acked, never applied ")  # pending when the spool goes
    for n in list_segments(home / "spool"):
        (home / "spool" / segment_name(n)).unlink()
    verify = quill.run("spool", "verify", "--json", check=False)
    assert verify.returncode == 1, verify.stdout
    report = json.loads(verify.stdout)
    assert report["lost"] and report["missing_segments"] == [1], report
    status = _assert_status_and_doctor_say(quill, "ACKNOWLEDGED RECORDS LOST")
    assert status["spool"]["integrity"]["lost"]
    assert status["metrics"]["spool_loss_detected"] == 1


def test_the_newest_segments_deleted_past_an_older_one_is_loss(quill, home):
    quill.run("status")
    _append(home, "s", 30, segment_bytes=1024)
    quill.drain()
    segments = list_segments(home / "spool")
    assert len(segments) >= 3
    for n in segments[-2:]:  # the cursor's segment and the one before it
        (home / "spool" / segment_name(n)).unlink()
    report = json.loads(quill.run("spool", "verify", "--json", check=False).stdout)
    assert report["lost"] and segments[-1] in report["missing_segments"], report
    _assert_status_and_doctor_say(quill, "ACKNOWLEDGED RECORDS LOST")


def test_a_cursor_of_another_spool_is_named_by_status_after_the_run_exits(quill, home, tmp_path):
    """state.db copied in from another data dir: its cursor ends no entry of this spool. The
    writer refuses it (exit 5); status and doctor must say so after the run ended."""
    other = tmp_path / "other"
    from conftest import QuillCLI

    other_quill = QuillCLI(other)
    other_quill.run("status")
    _append(other, "theirs", 4, text="x" * 50)
    other_quill.drain()
    quill.run("status")
    _append(home, "mine", 6, text="y" * 300)
    quill.drain()
    for suffix in ("", "-wal", "-shm"):
        (home / f"state.db{suffix}").unlink(missing_ok=True)
    shutil.copy(other / "state.db", home / "state.db")
    run = quill.run("run", "--until-idle", check=False, timeout=120)
    assert run.returncode == 5, run.stdout + run.stderr
    status = _assert_status_and_doctor_say(quill, "quill recover")
    mismatch = status["spool"]["cursor_mismatch"]
    assert mismatch and mismatch["next"] == "quill recover", mismatch
    doctor = {c["check"]: c for c in quill.json("doctor", check=False)}
    assert doctor["spool cursor"]["status"] == "fail", doctor["spool cursor"]
    with served(quill) as base:  # the dashboard's fleet page says it too
        page = httpx.get(f"{base}/fleet", timeout=30).text
    assert 'id="cursor-refused"' in page and "quill recover" in page
    # After the recovery the documented next step performs, both are clean again.
    quill.run("recover", timeout=120)
    proc = quill.run("status", "--json", check=False)
    assert json.loads(proc.stdout)["spool"]["cursor_mismatch"] is None, proc.stdout
    doctor = {c["check"]: c for c in quill.json("doctor", check=False)}
    assert doctor["spool cursor"]["status"] == "ok", doctor["spool cursor"]
