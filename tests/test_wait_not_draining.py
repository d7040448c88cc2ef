"""A wait that fails fast when nothing drains the spool (``ops.client.wait.Draining``):
``QuillSession`` (the Agents SDK integration) with no fleet running used to sit out its whole
``wait_timeout`` (30 s) before a bare timeout. It now says at once, within its grace, that no
fleet is running — ``quill.NotDrainingError``, a ``WaitTimeoutError`` of Quill's tree — and
the append is never lost: a writer started afterwards applies it."""

from __future__ import annotations

import asyncio
import time

import pytest
from harness import WriterThread

import quill as pkg
from quill.home import RunDir, load

pytest.importorskip("agents")

from quill.integrations.openai_agents import QuillSession  # noqa: E402

ITEM = {"role": "user", "content": "said while no fleet ran"}


def test_add_items_with_no_fleet_fails_fast_and_keeps_the_append(home):
    session = QuillSession("nofleet", home=home)  # the default wait_timeout: 30 s
    started = time.monotonic()
    with pytest.raises(pkg.NotDrainingError) as err:
        asyncio.run(session.add_items([ITEM]))
    took = time.monotonic() - started
    assert isinstance(err.value, pkg.WaitTimeoutError)  # callers catching timeouts still do
    assert took < session.wait_timeout, took  # told within the grace, not after 30 s
    assert "no fleet is running" in err.value.message
    assert "quill run" in err.value.message + err.value.hint
    assert err.value.kind == "not_draining" and err.value.exit_code == 4

    cfg = load(home)
    writer = WriterThread(cfg)  # the fleet comes up: the durable append is applied
    try:
        writer.idle()
        assert asyncio.run(QuillSession("nofleet", home=home).get_items()) == [ITEM]
    finally:
        writer.close()


def test_a_running_writer_is_waited_for_past_the_grace(home):
    """Only "nothing drains" stops early: with a writer up the wait is a normal wait."""
    cfg = load(home)
    cfg.ensure_dirs()
    writer = WriterThread(cfg)
    try:
        session = QuillSession("served", home=home, writer_grace=0.0)
        asyncio.run(session.add_items([ITEM]))
        assert asyncio.run(session.get_items()) == [ITEM]
    finally:
        writer.close()


def test_client_wait_fails_fast_only_when_asked(home):
    client = pkg.Client(home)
    ack = client.append("sync", [{"role": "user", "content": "x"}])
    with pytest.raises(pkg.NotDrainingError) as err:
        client.wait(ack, timeout=60, without_writer=0.2)
    assert "no fleet is running" in err.value.message
    with pytest.raises(pkg.WaitTimeoutError) as plain:  # the default: wait out the timeout
        client.wait(ack, timeout=0.3)
    assert not isinstance(plain.value, pkg.NotDrainingError)
    assert not RunDir(home).fleet_running()
