"""``quill sessions list`` pages: ``--json`` gives the cursor of the next page as ``next`` and
the note under a full human page gives it too (``--after``), as the API's ``next`` and the
dashboard's "next" link do; before, the only way past the first page was a bigger
``--limit``."""

from __future__ import annotations

import json
import re

from harness import drain, make_home

from quill.spool import Spool

_NEXT = re.compile(r"--after (\S+)")


def test_every_session_is_listed_once_by_following_the_pages(quill, home):
    make_home(home, watch={"enabled": False})
    with Spool(home / "spool") as sp:
        for i in range(5):
            msgs = [{"role": "user", "content": f"hello {i}"}]
            sp.append("messages.append", {"session_id": f"s{i}", "messages": msgs})
    drain(home)
    seen: list[str] = []
    args = ["sessions", "list", "--limit", "2", "--json"]
    for _ in range(5):
        proc = quill.run(*args)
        page = json.loads(proc.stdout)
        assert set(page) == {"sessions", "next"} and proc.stderr == ""
        seen += [row["id"] for row in page["sessions"]]
        if page["next"] is None:
            break
        args = ["sessions", "list", "--limit", "2", "--json", "--after", page["next"]]
    assert sorted(seen) == [f"s{i}" for i in range(5)] and len(seen) == 5, seen
    human = quill.run("sessions", "list", "--limit", "4")
    assert "the next page: --after " in human.stderr
    cursor = _NEXT.search(human.stderr)[1]
    last = quill.run("sessions", "list", "--limit", "4", "--after", cursor, "--json")
    # the fifth session, alone on the second page, the last
    assert len(json.loads(last.stdout)["sessions"]) == 1 and json.loads(last.stdout)["next"] is None
    assert "more sessions match" not in last.stderr
    bad = quill.run("sessions", "list", "--after", "not-a-cursor", check=False)
    assert bad.returncode == 2 and "quill: error:" in bad.stderr
    # a cursor of other filters, or of another listing, is refused the same way
    other = quill.run("sessions", "list", "--source", "cli", "--after", cursor, check=False)
    assert other.returncode == 2 and "another query or filter" in other.stderr
    foreign = quill.run("jobs", "history", "--after", cursor, "--json", check=False)
    assert foreign.returncode == 2 and json.loads(foreign.stdout)["error"]["kind"] == "usage"
