"""``quill usage reprice``: costs of records priced with an older genai-prices
table are recomputed with the installed one and applied through the spool as
``usage.reprice`` ops, which carry the numbers (a rebuild applies the same ones)."""

from __future__ import annotations

import json

from rebuild_helpers import dump

from quill.ops.recover.replay import replay
from quill.spool import Quarantine
from quill.store.apply.usage import price_version
from quill.store.sqlite.connection import open_reader, open_writer

OLD = "genai-prices==0.0.1"


def _usage(home) -> list[tuple]:
    conn = open_reader(home / "state.db")
    try:
        return conn.execute(
            "SELECT id, model, cost_usd, price_version FROM usage ORDER BY id"
        ).fetchall()
    finally:
        conn.close()


def test_reprice_through_the_spool(quill, tmp_path):
    ops = [
        {"op": "session.create", "data": {"session_id": "s", "source": "cli"}},
        {
            "op": "usage.record",
            "data": {
                "session_id": "s",
                "task": "turn",
                "model": "gpt-4o",
                "ts": 1_760_000_000,
                "usage": {"prompt_tokens": 1000, "completion_tokens": 200},
            },
        },
        {
            "op": "usage.record",
            "data": {
                "session_id": "s",
                "task": "title",
                "model": "no-such-model-xyz",
                "ts": 1_760_000_001,
                "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            },
        },
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.drain()
    (priced, _, cost, version), (unknown, _, none, unversioned) = _usage(quill.home)
    assert version == price_version() and cost > 0 and none is None and unversioned is None
    # a store whose first row was priced by an older table (at twice today's price)
    conn = open_writer(quill.home / "state.db")
    conn.execute(
        "UPDATE usage SET price_version = ?, cost_usd = ? WHERE id = ?", (OLD, cost * 2, priced)
    )
    conn.close()
    before = quill.json("usage")["usage"][0]["cost_usd"]

    dry = quill.json("usage", "reprice", "--dry-run")
    assert (dry["considered"], dry["repriced"], dry["still_unpriced"], dry["batches"]) == (
        2,
        1,
        1,
        [],
    )
    assert abs(dry["cost_change_usd"] + cost) < 1e-9
    assert _usage(quill.home)[0][3] == OLD  # nothing appended
    out = quill.json("usage", "reprice")
    assert out["repriced"] == 1 and len(out["batches"]) == 1
    quill.drain()
    assert _usage(quill.home) == [
        (priced, "gpt-4o", cost, price_version()),
        (unknown, "no-such-model-xyz", None, None),
    ]
    assert abs(quill.json("usage")["usage"][0]["cost_usd"] - (before - cost)) < 1e-9
    # the op is on record in the spool, with the numbers it applied
    records = [
        json.loads(line)
        for seg in sorted((quill.home / "spool").glob("*.jsonl"))
        for line in seg.read_text().splitlines()
    ]
    [op] = [rec for rec in records if rec["op"] == "usage.reprice"]
    assert (
        op["data"]["rows"] == [[priced, OLD, cost]]
        and op["data"]["price_version"] == price_version()
    )
    # nothing left to re-price but the unknown model; a second run appends nothing new for it
    again = quill.json("usage", "reprice")
    assert (again["considered"], again["repriced"], again["batches"]) == (1, 0, [])
    # a rebuild from scratch equals the live store
    target = tmp_path / "rebuilt.db"
    replay(quill.home / "spool", target, None, quarantine=Quarantine.for_store(target))
    assert dump(target)["usage"] == dump(quill.home / "state.db")["usage"]


def test_reprice_op_applies_only_to_rows_still_on_the_old_version_and_refuses_bad_payloads(quill):
    ops = [
        {
            "op": "usage.record",
            "data": {
                "session_id": "s",
                "task": "turn",
                "model": "gpt-4o",
                "usage": {"prompt_tokens": 10, "completion_tokens": 2},
            },
        }
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.drain()
    [(rid, _, cost, version)] = _usage(quill.home)
    stale = {
        "op": "usage.reprice",
        "data": {"price_version": "genai-prices==9.9.9", "rows": [[rid, OLD, 123.0]]},
    }
    quill.run("push", input=json.dumps(stale))
    quill.drain()
    assert _usage(quill.home) == [
        (rid, "gpt-4o", cost, version)
    ]  # decided against a version it no longer has
    for bad in (
        {"price_version": "", "rows": [[rid, None, 1.0]]},
        {"price_version": "v", "rows": []},
        {"price_version": "v", "rows": [[rid, None, -1.0]]},
        {"price_version": "v", "rows": [[True, None, 1.0]]},
        {"price_version": "v", "rows": [[rid, None, float("nan")]]},
    ):
        assert (
            quill.run(
                "push", input=json.dumps({"op": "usage.reprice", "data": bad}), check=False
            ).returncode
            == 2
        )
