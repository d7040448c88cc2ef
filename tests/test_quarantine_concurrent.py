"""The quarantine read while another process resolves entries (``quill spool quarantine
retry/drop``, a purge): a listing, a count of torn writes or a purge meets files that were
listed but are gone. Each leaves the resolved entry out; none ends in ``FileNotFoundError``
(a traceback in ``quill spool quarantine list``, the dashboard's quarantine page, ``quill
status`` and ``quill push --wait``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from quill.spool import Position
from quill.spool.quarantine import Quarantine
from quill.spool.torn import TORN_WRITE


def _put(q: Quarantine, offsets: range, reason: str = "invalid-op") -> list[str]:
    out = []
    for off in offsets:
        pos = Position(1, off * 100)
        q.put(pos, reason, "a bad record", b'{"op": "x", "batch": "b%d"}' % off)
        out.append(str(pos))
    return out


def _in_another_process(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)])


def test_an_entry_resolved_by_another_process_during_a_listing_is_left_out(tmp_path):
    q = Quarantine(tmp_path / "spool")
    first, second, third = _put(q, range(1, 4))
    listing = q.entries()
    assert next(listing)["id"] == first  # the folder is listed; the rest is read lazily
    other = _in_another_process(
        f"""
        from quill.spool.quarantine import Quarantine
        Quarantine({str(q.dir.parent)!r}).resolve({second!r}, "drop", "operator")
        """
    )
    assert other.wait(timeout=60) == 0
    assert [e["id"] for e in listing] == [third]
    assert [e["id"] for e in q.entries()] == [first, third]


def test_counting_and_purging_while_another_process_resolves_entries(tmp_path):
    """A second process puts and drops torn-write entries for a while; meanwhile this one
    lists, counts torn writes and purges nothing: every call answers, and at the end the
    counts agree with what is left."""
    q = Quarantine(tmp_path / "spool")
    _put(q, range(1, 200), TORN_WRITE)
    other = _in_another_process(
        f"""
        import time
        from quill.spool import Position
        from quill.spool.quarantine import Quarantine
        q = Quarantine({str(q.dir.parent)!r})
        end, n = time.monotonic() + 3, 0
        while time.monotonic() < end:
            n += 1  # another torn line each round: a dropped one is not quarantined again
            for off in range(1, 200):
                q.resolve(str(Position(1, off * 100)), "drop", "operator")
                q.put(Position(1, off * 100), {TORN_WRITE!r}, "torn", b"{{%d" % n)
        """
    )
    calls = 0
    try:
        while other.poll() is None:
            assert 0 <= q.torn_count() <= 199
            assert len(list(q.entries())) <= 199
            assert q.purge(lambda rec, pos: False, "operator") == []
            calls += 1
    finally:
        if other.poll() is None:
            other.kill()
        other.wait(timeout=60)
    assert other.returncode == 0 and calls > 0
    assert q.torn_count() == q.count() == len(list(q.entries())) == 199
