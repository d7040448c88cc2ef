"""Attack on ``wait``'s outcome read on a shared PostgreSQL store: ``applied_batches`` is keyed
by batch id store-wide and its ``position`` is a position *in the spool that applied it*
(``spool_id``). Host A applies batch ``b`` at its spool position 1:0; host B's client appends
other content under the same batch id, also at 1:0 of B's own spool, and B's writer
quarantines it (``batch-id-reused``). B's client must be told "quarantined" with that
reason: the row at "1:0" is A's, not B's record. Real data dirs, real PostgreSQL, the
production writer."""

from __future__ import annotations

import asyncio

from quill import home as config
from quill.ops import logs
from quill.ops.client.aclient import AsyncClient
from quill.ops.client.client import Client
from quill.ops.recover.postgres import drain


def _data_dir(root, url: str):
    root.mkdir(parents=True)
    (root / "config.toml").write_text(f'[store]\nurl = "{url}"\n')
    return Client(root)


def _drain(root) -> dict:
    return drain(config.load(root), logs.configure(None, "test"))


def test_a_batch_quarantined_on_this_host_is_not_applied_because_another_host_applied_its_id(
    tmp_path, pg_store_url
):
    a = _data_dir(tmp_path / "a", pg_store_url)
    b = _data_dir(tmp_path / "b", pg_store_url)
    ack_a = a.append("sa", [{"role": "user", "content": "from host a"}], batch_id="shared")
    ack_b = b.append("sb", [{"role": "user", "content": "other text, b"}], batch_id="shared")
    assert str(ack_a.position) == str(ack_b.position)  # both first in their own spools
    assert _drain(tmp_path / "a")["applied"] == 1
    assert _drain(tmp_path / "b")["rejected"] == 1

    assert a.wait(ack_a, timeout=10).status == "applied"
    for got in (
        b.wait(ack_b, timeout=10),
        b.wait_all([ack_b, ack_b], timeout=10)[1],
        asyncio.run(AsyncClient(client=b).wait(ack_b, timeout=10)),
    ):
        assert (got.status, got.reason) == ("quarantined", "batch-id-reused"), got
