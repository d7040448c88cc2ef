"""Ops that name a message must mean the same message when the spool is replayed into another
store. Store ids are assigned by the store that applies the rows: a SQLite data dir switched
to a shared PostgreSQL store (the README's "Running on several machines": its writer replays
its whole spool) gets other ids as soon as another host's rows landed first. An
``expect_head_id`` or ``from_message_id`` recorded against the SQLite ids then names another
row (or none): the op is refused (``stale-head``) or rewinds the wrong rows. The Agents SDK
session names its messages by producer ids (``ext_id``, carried in the spool) instead, so
its pops replay as they applied. Real SQLite data dir, real writer, real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

agents = pytest.importorskip("agents")

import harness  # noqa: E402
from conftest import pg_data_dir  # noqa: E402

import quill as pkg  # noqa: E402
from quill import home as config  # noqa: E402
from quill.integrations.openai_agents import QuillSession  # noqa: E402
from quill.ops import logs  # noqa: E402
from quill.ops.recover.postgres import drain  # noqa: E402


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _said(text: str) -> dict:
    return {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _audit(client: pkg.Client, sid: str) -> list[tuple[str, str]]:
    """(state, text) of every row of ``sid`` in transcript order: what the ops did."""
    rows = client.messages(sid, view="audit")
    return [(m["state"], str(m.get("content"))) for m in rows]


def test_agents_session_pops_replay_into_postgres_as_they_applied(tmp_path, pg_store_url):
    home = tmp_path / "laptop"
    cfg = config.load(home)
    cfg.ensure_dirs()
    writer = harness.WriterThread(cfg)
    try:
        client = pkg.AsyncClient(home)

        async def converse() -> None:
            session = QuillSession("conv", client=client)
            await session.add_items([_user("first question"), _said("first answer")])
            popped = await session.pop_item()
            assert popped is not None and popped["content"][0]["text"] == "first answer"
            await session.add_items([_said("better answer")])
            await session.add_items([_user("second question"), _said("second answer")])
            assert (await session.pop_item())["content"][0]["text"] == "second answer"

        asyncio.run(converse())
    finally:
        writer.close()
    on_sqlite = _audit(pkg.Client(home), "conv")
    assert [s for s, _ in on_sqlite].count("rewound") == 2

    # another host's rows land in the shared store first: its ids come before ours
    pg_data_dir(tmp_path / "gateway", pg_store_url, 3)
    (home / "config.toml").write_text(f'[store]\nurl = "{pg_store_url}"\n')
    figures = drain(config.load(home), logs.configure(None, "test"))

    assert figures.get("rejected", 0) == 0, figures
    assert not list((home / "spool" / "quarantine").glob("*")), "an op was refused on replay"
    assert _audit(pkg.Client(home), "conv") == on_sqlite
