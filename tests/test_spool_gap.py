"""Spool segments deleted before the writer applied them (an operator's ``rm``, a script
"cleaning" old-looking files): the segment holding the store's cursor, with records past it,
and the whole segment after it. The writer must not move on to the next segment left as if
nothing happened — the records are acknowledged, and the move loses them without a word
(``status`` then says 0 pending and no loss, ``spool verify`` says intact). It refuses
(``SpoolGapError``: nothing applied) and ``status`` counts the segments as lost until
``quill recover --accept-loss``, after which the records left are applied. Real data dirs,
the production writer, both backends."""

from __future__ import annotations

import pytest
from conftest import QuillCLI

from quill.ops.client.client import Client
from quill.ops.client.errors import NotFoundError
from quill.spool import Spool
from quill.spool.segments import list_segments, segment_name
from quill.store.errors import SpoolGapError

SPOOL = "[spool]\nsegment_bytes = 4096\n"


def _push(root, session: str, n: int) -> None:
    with Spool(root / "spool", segment_bytes=4096) as spool:
        for i in range(n):
            msg = {"role": "user", "content": f"{session} {i} " + "x" * 900}
            spool.append("messages.append", {"session_id": session, "messages": [msg]})


def _count(root, session: str) -> int:
    return len(Client(root).messages(session, "audit"))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_segments_deleted_before_they_were_applied_are_refused_not_skipped(
    tmp_path, backend, request
):
    root = tmp_path / "h"
    root.mkdir()
    config = SPOOL
    if backend == "postgres":
        config += f'[store]\nurl = "{request.getfixturevalue("pg_store_url")}"\n'
    (root / "config.toml").write_text(config)
    quill = QuillCLI(root)
    _push(root, "early", 10)
    cursor = quill.drain()["to"]
    _push(root, "late", 10)
    cursor_segment = int(cursor.split(":")[0])
    segments = list_segments(root / "spool")
    assert segments[-1] >= cursor_segment + 2  # late records past the cursor, then more
    for n in range(1, cursor_segment + 2):  # the cursor's segment and the one after it
        (root / "spool" / segment_name(n)).unlink()

    integrity = quill.status()["spool"]["integrity"]
    assert integrity["lost"] and integrity["missing_segments"][:2] == [
        cursor_segment,
        cursor_segment + 1,
    ], integrity
    assert quill.run("status", check=False).returncode == 1
    with pytest.raises(SpoolGapError):
        quill.drain()
    assert _count(root, "early") == 10
    with pytest.raises(NotFoundError):  # nothing of the late session was applied
        _count(root, "late")

    quill.run("recover", "--accept-loss")
    quill.drain()
    left = sum(
        1
        for n in list_segments(root / "spool")
        for line in (root / "spool" / segment_name(n)).read_bytes().splitlines()
        if b'"late ' in line
    )
    assert 0 < left < 10
    assert _count(root, "late") == left
    assert _count(root, "early") == 10
    assert not quill.status()["spool"]["integrity"]["lost"]  # the loss was accepted
