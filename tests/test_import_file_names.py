"""A transcript whose file name holds a character no session id may hold (a tab, a newline,
ESC, DEL, a C1 control: all legal in Linux file names; or bytes that are not UTF-8) is
imported with an id the store takes: formats with no conversation id of their own name the
session after the file (``jsonlines.content_session_id``), and the name's bad characters
become U+FFFD. Before, the watcher and ``quill import`` spooled an id the writer refused, and
the whole session was quarantined. A name that is not UTF-8 keeps the id it was stored
under before (the spool's encoder already made U+FFFD of its bytes).

Real files, a real spool, the real writer (in a thread) and SQLite store."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
from harness import WriterThread

from quill import home as data_dir
from quill.ops.transfer.import_spool import import_file
from quill.spool import Position, Quarantine, Spool, SpoolReader
from quill.store.apply.precheck import precheck

NAMES = [
    b"tab\there.jsonl",
    b"new\nline.jsonl",
    b"esc\x1b[31mred.jsonl",
    b"del\x7f.jsonl",
    "c1\x85next.jsonl".encode(),
    b"not-utf8-\xff\xfe.jsonl",
]


def _sharegpt(text: str) -> str:
    turns = [{"from": "human", "value": f"hi {text}"}, {"from": "gpt", "value": "hello"}]
    return json.dumps({"conversations": turns}) + "\n"


@pytest.mark.parametrize("name", NAMES, ids=[repr(n)[2:-1] for n in NAMES])
def test_every_op_of_a_file_with_any_name_is_one_the_store_takes(tmp_path, name):
    folder = os.fsencode(tmp_path)
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(_sharegpt(repr(name)))
    with Spool(tmp_path / "spool") as spool:
        report = import_file(spool, os.fsdecode(path), None)
    assert report.new == 2, report.as_dict()
    ops = list(SpoolReader(tmp_path / "spool").read(Position(1, 0), max_bytes=1 << 20))
    assert len(ops) == 2
    for entry in ops:
        record = entry.record
        precheck(record["op"], record["data"], record["batch"])  # raises InvalidOpError
    [sid] = report.sessions
    assert sid.startswith("sharegpt:") and "\ufffd" in sid


def test_a_file_named_with_a_newline_is_stored_not_quarantined(tmp_path):
    home = tmp_path / "home"
    cfg = data_dir.load(home)
    cfg.ensure_dirs()
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "two\nlines.jsonl").write_text(_sharegpt("newline"))
    (agent / "latin1-\udce9t\udce9.jsonl").write_text(_sharegpt("not utf-8"))
    with Spool.for_settings(cfg) as spool:
        for path in sorted(agent.iterdir()):
            import_file(spool, path, None)
    thread = WriterThread(cfg)
    try:
        thread.idle()
    finally:
        thread.close()
    assert Quarantine(cfg.spool_dir).count() == 0
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        ids = sorted(r[0] for r in conn.execute("SELECT id FROM sessions"))
    finally:
        conn.close()
    assert [i.rsplit(":", 1)[0] for i in ids] == [
        "sharegpt:latin1-\ufffdt\ufffd.jsonl",  # as stored before: unchanged
        "sharegpt:two\ufffdlines.jsonl",
    ]
