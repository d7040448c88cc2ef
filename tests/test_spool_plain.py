"""A producer's op is walked once for "plain JSON": ``precheck`` says whether it is, and
``Spool.append(plain=True)`` then encodes without walking it again. The bytes written are the
same either way, and a value that is not plain still takes the exact path."""

from __future__ import annotations

import math

import pytest

from quill.spool import Spool, SpoolReader
from quill.spool.segments import Position
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError

PLAIN = {"session_id": "s", "messages": [{"role": "user", "content": "hi", "n": [1, 2.5, None]}]}


def _records(spool_dir):
    return [e.record for e in SpoolReader(spool_dir).read(Position(1, 0), max_bytes=1 << 20)]


def test_precheck_says_whether_the_data_is_plain():
    assert precheck("messages.append", PLAIN) is True
    tupled = {"session_id": "s", "messages": [{"role": "user", "content": "hi", "n": (1, 2)}]}
    assert precheck("messages.append", tupled) is False
    nan = {"session_id": "s", "messages": [{"role": "user", "content": "hi", "x": math.nan}]}
    with pytest.raises(InvalidOpError):
        precheck("messages.append", nan)


def test_plain_append_writes_the_same_record(tmp_path):
    with Spool(tmp_path / "a", fsync=False, producer_id="p") as a:
        a.append("messages.append", PLAIN, batch_id="b1", plain=True)
    with Spool(tmp_path / "b", fsync=False, producer_id="p") as b:
        b.append("messages.append", PLAIN, batch_id="b1")
    (ra,), (rb,) = _records(tmp_path / "a"), _records(tmp_path / "b")
    assert ra["data"] == rb["data"] == PLAIN
    assert {k: v for k, v in ra.items() if k != "ts"} == {k: v for k, v in rb.items() if k != "ts"}


def test_the_client_appends_a_value_that_is_not_plain_exactly(tmp_path):
    """A tuple (not plain: precheck says so) is written as the stdlib path writes it, an
    array, and read back equal to the list the producer meant."""
    from quill import Client

    home = tmp_path / "home"
    c = Client(home)
    c.append("s", [{"role": "user", "content": "hi", "meta_n": (1, 2)}])
    (rec,) = _records(c.config.spool_dir)
    assert rec["data"]["messages"][0]["meta_n"] == [1, 2]
