"""``quill spool quarantine list``, ``quill sessions orphans`` and ``quill jobs history`` page
like ``quill sessions list`` (``--limit``, ``--after CURSOR``, the next page's cursor as
``next`` in the ``--json`` document, and in a note on stderr without ``--json``), and an
empty listing says so in words (``--json``: the document with no rows) instead of printing
an empty table. In-process CLI runs (``base.run``, the entry
point's error format and exit codes) against real stores, spools and quarantine files."""

from __future__ import annotations

import json
import re
import time

import pytest
from harness import drain, make_home

from quill.jobs import catalog
from quill.jobs.queues import build_for
from quill.ops.cli.base import run
from quill.ops.cli.root import cli
from quill.spool import Quarantine, Spool
from quill.spool.segments import Position

_NEXT = re.compile(r"--after (\S+)")


@pytest.fixture
def cfg(home):
    cfg = make_home(home, watch={"enabled": False})
    with Spool(cfg.spool_dir) as sp:
        sp.append("session.create", {"session_id": "keyed", "source": "cli"})
    drain(home)
    return cfg


def _quill(capsys, home, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(cli, ["--home", str(home), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _all_pages(capsys, home, args: list[str], rows_of) -> tuple[list, int]:
    """Follow the ``next`` cursors of the ``--json`` pages from the first to the last (each
    the cursor the human page's note gives): every row, pages read."""
    seen, pages, after = [], 0, []
    while True:
        code, out, err = _quill(capsys, home, *args, "--json", *after)
        assert code == 0 and err == "", err
        page = json.loads(out)
        seen += rows_of(page)
        pages += 1
        code, _, human_err = _quill(capsys, home, *args, *after)
        found = _NEXT.search(human_err)
        assert (found and found[1]) == (page["next"] or None), human_err
        if page["next"] is None:
            return seen, pages
        assert pages < 10, err
        after = ["--after", page["next"]]


def test_quarantine_list_pages_in_spool_order_and_says_when_empty(capsys, home, cfg):
    code, out, err = _quill(capsys, home, "spool", "quarantine", "list")
    assert code == 0 and out.strip() == f"no quarantined records in {cfg.spool_dir / 'quarantine'}"
    code, out, _ = _quill(capsys, home, "spool", "quarantine", "list", "--json")
    assert json.loads(out)["entries"] == []
    q = Quarantine(cfg.spool_dir)
    for offset in (900, 40, 500, 7, 1200):  # put out of order: listed in spool order
        q.put(Position(1, offset), "invalid-op", "test", b'{"op": "x"}\n')
    ids, pages = _all_pages(
        capsys,
        home,
        ["spool", "quarantine", "list", "--limit", "2"],
        lambda data: [e["id"] for e in data["entries"]],
    )
    assert ids == ["1:7", "1:40", "1:500", "1:900", "1:1200"] and pages == 3
    code, out, err = _quill(capsys, home, "spool", "quarantine", "list", "--limit", "5")
    assert code == 0 and "5 quarantined record(s)" in out and "more" not in err
    code, out, err = _quill(capsys, home, "spool", "quarantine", "list", "--after", "nope")
    assert code == 2 and "quill: error:" in err and "cursor" in err


def test_orphans_page_oldest_first_and_say_when_there_are_none(capsys, home, cfg):
    code, out, err = _quill(capsys, home, "sessions", "orphans")
    assert code == 0 and out.strip() == "no orphans" and err == ""
    code, out, _ = _quill(capsys, home, "sessions", "orphans", "--json")
    assert json.loads(out) == {"orphans": [], "next": None}
    with Spool(cfg.spool_dir) as sp:
        # telegram uses keys (one keyed session, long before): its keyless sessions with
        # messages crashed between routing and create
        sp.append(
            "session.create",
            {"session_id": "k", "source": "telegram", "key": "chat:1", "started_at": 1.6e9},
        )
        for i in range(5):
            sid = f"o{i}"
            sp.append(
                "session.create",
                {"session_id": sid, "source": "telegram", "started_at": 1_700_000_000 + i},
            )
            sp.append(
                "messages.append",
                {
                    "session_id": sid,
                    "messages": [
                        {"role": "user", "content": "are you there", "timestamp": 1_700_000_000 + i}
                    ],
                },
            )
    drain(home)
    ids, pages = _all_pages(
        capsys,
        home,
        ["sessions", "orphans", "--limit", "2"],
        lambda page: [r["session_id"] for r in page["orphans"]],
    )
    assert ids == [f"o{i}" for i in range(5)] and pages == 3
    code, out, err = _quill(capsys, home, "sessions", "orphans", "--limit", "4")
    assert code == 0 and "4 orphan(s)" in out and "more orphans match" in err


def test_job_history_pages_newest_first_and_says_when_there_are_none(capsys, home, cfg):
    code, out, err = _quill(capsys, home, "jobs", "history")
    assert code == 0 and out.strip() == "no job runs" and err == ""
    code, out, _ = _quill(capsys, home, "jobs", "history", "--job", "snapshot", "--json")
    assert json.loads(out) == {"runs": [], "next": None}
    record = build_for(cfg).tasks[catalog.RECORD_RUN]
    t = time.time()
    for i in range(5):
        record(job="snapshot", started_at=t + i, ended_at=t + i + 1, outcome="ok", figures={"n": i})
    drain(home)  # the writer applies the records
    ns, pages = _all_pages(
        capsys,
        home,
        ["jobs", "history", "--job", "snapshot", "--limit", "2"],
        lambda page: [r["figures"]["n"] for r in page["runs"]],
    )
    assert ns == [4, 3, 2, 1, 0] and pages == 3
    code, out, err = _quill(capsys, home, "jobs", "history", "--limit", "5")
    assert code == 0 and "5 run(s)" in out and "more" not in err
    code, out, err = _quill(capsys, home, "jobs", "history", "--after", "bm9wZQ")
    assert code == 2 and "quill: error:" in err and "cursor" in err
