"""Lost acknowledged records are reported as loss, by producer; torn writes stay harmless.

A real spool (several producers, several segments) is damaged the ways a disk or an operator
damages it: a sealed segment cut to 60 %, a middle segment deleted, a byte flipped in a sealed
segment. ``quill spool verify`` must exit 1 and count what is missing by producer,
``quill status`` and ``quill spool status`` must exit 1 and ``quill doctor`` fail its
``spool integrity`` check. A torn record at the end of the active segment is reported as
what its bytes prove — "a producer killed mid-write, or the spool cut there", every other
record intact — never as "nothing acknowledged was lost": a cut of the newest segment leaves
the same bytes (``spool.torn.TORN_SUMMARY``).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from service_helpers import served

from quill.spool import Spool
from quill.spool.integrity import assess
from quill.spool.segments import list_segments, segment_name
from quill.spool.torn import TORN_SUMMARY

PRODUCERS = 3


def _fill(spool_dir: Path, rounds: int = 60) -> list[Spool]:
    """Three producer handles appending in turn into 2 KiB segments; returns them open."""
    spools = [Spool(spool_dir, segment_bytes=2048) for _ in range(PRODUCERS)]
    for i in range(rounds):
        for p, sp in enumerate(spools):
            sp.append(
                "messages.append",
                {"session_id": f"s{p}", "messages": [{"role": "user", "content": f"m{i} " * 8}]},
            )
    assert len(list_segments(spool_dir)) >= 5
    return spools


def _lines(path: Path) -> list[tuple[int, int, dict]]:
    """(offset, end, record) of each complete line of a segment."""
    out, offset = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        if line.endswith(b"\n"):
            out.append((offset, offset + len(line), json.loads(line)))
        offset += len(line)
    return out


def _detectable(spool_dir: Path, lost: list[dict]) -> dict[str, int]:
    """Per producer: the lost records some later record of the same producer reveals."""
    last: dict[str, int] = {}
    for n in list_segments(spool_dir):
        for _, _, rec in _lines(spool_dir / segment_name(n)):
            last[rec["producer"]] = max(last.get(rec["producer"], 0), rec["seq"])
    out: dict[str, int] = {}
    for rec in lost:
        if rec["seq"] < last.get(rec["producer"], 0):
            out[rec["producer"]] = out.get(rec["producer"], 0) + 1
    return dict(sorted(out.items()))


def _assert_reported_as_loss(quill, expected: dict[str, int]) -> dict:
    proc = quill.run("spool", "verify", "--json", check=False)
    assert proc.returncode == 1, proc.stdout
    report = json.loads(proc.stdout)
    assert report["lost"] and report["verdict"] == "loss", report
    assert report["missing_by_producer"] == expected
    assert "every other record is intact" not in proc.stdout
    human = quill.run("spool", "verify", check=False)
    assert human.returncode == 1 and "ACKNOWLEDGED RECORDS LOST" in human.stdout
    for producer, n in expected.items():
        assert f"producer {producer}: {n} record(s) missing" in human.stdout
    doctor = {c["check"]: c for c in quill.json("doctor", check=False)}
    assert doctor["spool integrity"]["status"] == "fail", doctor["spool integrity"]
    assert "every other record is intact" not in json.dumps(doctor)
    return report


def test_a_sealed_segment_cut_to_60_percent_is_loss_counted_by_producer(quill, home):
    spool_dir = home / "spool"
    for sp in _fill(spool_dir):
        sp.close()
    seg = spool_dir / segment_name(2)
    data = seg.read_bytes()
    cut = int(len(data) * 0.6)
    lost = [rec for _, end, rec in _lines(seg) if end > cut]
    seg.write_bytes(data[:cut])
    expected = _detectable(spool_dir, lost)
    assert sum(expected.values()) >= 2 and len(expected) >= 2  # several producers lost records
    report = _assert_reported_as_loss(quill, expected)
    assert [t["segment"] for t in report["truncated"]] == [2]
    # status (segment structure only, the same classification) says so and exits 1 too
    proc = quill.run("status", "--json", check=False)
    assert proc.returncode == 1
    status = json.loads(proc.stdout)
    assert status["spool"]["integrity"]["lost"] and status["metrics"]["spool_loss_detected"] == 1
    assert "ACKNOWLEDGED RECORDS LOST" in quill.run("status", check=False).stdout
    assert quill.run("spool", "status", check=False).returncode == 1


def test_a_sealed_segment_cut_at_a_line_boundary_is_shorter_than_recorded(quill, home):
    """A cut that leaves whole lines (no torn tail) is still loss: the sealer recorded the
    segment's size, and here only the producers' *last* records are lost (no sequence gap)."""
    spool_dir = home / "spool"
    spools = _fill(spool_dir, rounds=20)
    for p, sp in enumerate(spools):  # small last records: they share the newest segment
        sp.append("session.end", {"session_id": f"s{p}"})
        sp.close()
    # Another producer with a small rotation size seals the newest segment and moves on.
    with Spool(spool_dir, segment_bytes=1) as sp:
        sp.append("session.create", {"session_id": "later"})
    last_seg = list_segments(spool_dir)[-1]
    seg = spool_dir / segment_name(last_seg - 1)
    lines = _lines(seg)
    # Cut the trailing lines that are each their producer's last record: whole lines, and
    # no later record of the same producer shows a gap.
    cut, seen = len(lines), set()
    while cut > 1 and lines[cut - 1][2]["producer"] not in seen:
        seen.add(lines[cut - 1][2]["producer"])
        cut -= 1
    assert cut < len(lines)
    seg.write_bytes(seg.read_bytes()[: lines[cut][0]])
    proc = quill.run("spool", "verify", "--json", check=False)
    assert proc.returncode == 1, proc.stdout
    report = json.loads(proc.stdout)
    assert report["missing_by_producer"] == {}  # no gap shows it: the recorded size does
    assert [t["segment"] for t in report["truncated"]] == [last_seg - 1]
    assert "shorter than" in report["truncated"][0]["detail"]
    assert quill.run("status", check=False).returncode == 1


def test_a_deleted_middle_segment_is_loss(quill, home):
    spool_dir = home / "spool"
    for sp in _fill(spool_dir):
        sp.close()
    seg = spool_dir / segment_name(3)
    lost = [rec for _, _, rec in _lines(seg)]
    seg.unlink()
    report = _assert_reported_as_loss(quill, _detectable(spool_dir, lost))
    assert report["missing_segments"] == [3]
    assert quill.run("status", check=False).returncode == 1
    with served(quill) as base:  # the dashboard's fleet page says it too
        page = httpx.get(f"{base}/fleet", timeout=30).text
    assert 'id="spool-loss"' in page and "00000003.jsonl" in page


def test_a_byte_flipped_in_a_sealed_segment_is_loss_of_that_producers_record(quill, home):
    spool_dir = home / "spool"
    for sp in _fill(spool_dir):
        sp.close()
    seg = spool_dir / segment_name(2)
    lines = _lines(seg)
    offset, _, rec = lines[1]
    data = bytearray(seg.read_bytes())
    data[offset + data[offset:].index(b'"content":"') + 12] ^= 0x01
    seg.write_bytes(bytes(data))
    report = _assert_reported_as_loss(quill, {rec["producer"]: 1})
    assert [d["reason"] for d in report["damaged"]] == ["checksum"]
    # status reads no records itself: the line the writer quarantined as damaged counts
    quill.drain()
    proc = quill.run("status", "--json", check=False)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["spool"]["integrity"]["damaged_lines"] == 1


def test_a_torn_tail_of_the_active_segment_is_a_torn_record_not_proven_harmless(quill, home):
    spool_dir = home / "spool"
    spools = _fill(spool_dir)
    last = spool_dir / segment_name(list_segments(spool_dir)[-1])
    with open(last, "ab") as f:  # a producer killed inside its write()
        f.write(b'{"v":1,"op":"messages.append","batch":"b","producer":"x:1:y","seq":1,"ts":1')
    proc = quill.run("spool", "verify", "--json", check=False)
    assert proc.returncode == 0, proc.stdout
    report = json.loads(proc.stdout)
    assert report["verdict"] == "intact" and report["partial_tail"]  # not yet proven torn
    # The next append terminates it (append protocol step 3): a proven torn write.
    spools[0].append("session.end", {"session_id": "s0"})
    for sp in spools:
        sp.close()
    proc = quill.run("spool", "verify", check=False)
    assert proc.returncode == 0, proc.stdout
    assert "every other record is intact" in proc.stdout
    doctor = {c["check"]: c for c in quill.json("doctor", check=False)}
    assert doctor["spool integrity"]["status"] == "ok"
    assert "every other record is intact" in doctor["spool integrity"]["detail"]
    # The same bytes are what a cut of the segment leaves: no claim that nothing was lost.
    for said in (proc.stdout, doctor["spool integrity"]["detail"]):
        assert TORN_SUMMARY in said and "nothing acknowledged was lost" not in said
    status = quill.json("status", check=False)
    assert not status["spool"]["integrity"]["lost"]
    assert status["metrics"]["spool_loss_detected"] == 0


def test_rotation_terminates_a_torn_tail_before_sealing(tmp_path):
    """A producer killed mid-write at the end of a full segment: the next producer terminates
    the fragment before creating the successor, so the sealed segment ends in a newline and
    the fragment is a proven torn write, not a cut."""
    with Spool(tmp_path, segment_bytes=200) as sp:
        sp.append("session.create", {"session_id": "before", "pad": "x" * 200})
    with open(tmp_path / segment_name(1), "ab") as f:
        f.write(b'{"v":1,"op":"sess')
    with Spool(tmp_path, segment_bytes=200) as sp:
        assert sp.append("session.create", {"session_id": "after"}).position.segment == 2
    assert (tmp_path / segment_name(1)).read_bytes().endswith(b'"op":"sess\n')
    found = assess(tmp_path, scan=True)
    assert found.verdict == "torn-writes-only" and len(found.torn_writes) == 1


def test_a_refused_append_consumes_no_sequence_number(tmp_path):
    """An append refused before its line is written leaves no gap in the producer's
    sequence numbers (a gap means a lost record)."""
    with Spool(tmp_path) as sp:
        sp.append("session.create", {"session_id": "a"})
        try:
            sp.append("session.create", {"session_id": "a", "bad": float("nan")})
        except ValueError:
            pass
        sp.append("session.end", {"session_id": "a"})
    found = assess(tmp_path, scan=True)
    assert found.verdict == "intact" and found.missing_by_producer == {}
