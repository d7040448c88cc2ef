"""``since`` and ``until`` of a session listing are one rule, on both backends: both bound the
session's last activity (its newest message's time, else its start: the ``last_active`` the
listing shows, orders by and pages on), inclusive (store/read/listing.py)."""

from __future__ import annotations

from semantics_helpers import store, user  # noqa: F401 (store: fixture)

T0 = 1_700_000_000


def _listed(store, **bounds) -> list[str]:
    with store.reader() as r:
        return sorted(s["id"] for s in r.list_sessions(lineage="all", limit=100, **bounds))


def test_since_and_until_both_bound_the_last_activity(store):
    # "long": started at T0, last active at T0+300; "early": T0..T0+50; "late": T0+200..T0+250;
    # "quiet": no message, started at T0+100
    for sid, start, times in (
        ("long", T0, (T0 + 10, T0 + 300)),
        ("early", T0, (T0 + 50,)),
        ("late", T0 + 200, (T0 + 250,)),
        ("quiet", T0 + 100, ()),
    ):
        assert store.apply("session.create", {"session_id": sid, "started_at": start}) == []
        msgs = [user(f"m{i}", id=f"{sid}-{i}", timestamp=t) for i, t in enumerate(times)]
        if msgs:
            assert store.apply("messages.append", {"session_id": sid, "messages": msgs}) == []
    # "long" started before T0+100 but was last active after it: --until leaves it out, as
    # --since T0+100 keeps it (a bound on the start would have listed it under both)
    assert _listed(store, until=T0 + 100) == ["early", "quiet"]
    assert _listed(store, since=T0 + 100) == ["late", "long", "quiet"]
    assert _listed(store, since=T0 + 100, until=T0 + 260) == ["late", "quiet"]
    # inclusive at both ends, on the exact last-activity value
    assert _listed(store, since=T0 + 300, until=T0 + 300) == ["long"]
    assert _listed(store, since=T0 + 100, until=T0 + 100) == ["quiet"]
    # the bound agrees with what each row shows as its last activity
    with store.reader() as r:
        rows = r.list_sessions(lineage="all", limit=100, until=T0 + 260)
    assert rows and all((s["last_active"] or s["started_at"]) <= T0 + 260 for s in rows)
