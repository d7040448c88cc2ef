"""OpenHands condensations: a ``condensation`` action is a compaction. What the model is fed
afterwards — every event no condensation forgot, with the latest summary inserted as a user
message at its ``summary_offset`` (OpenHands' ``View.from_events``) — is the session's model
view in the store; everything forgotten stays in the audit view and in search.

No public trajectory with a condensation was found, so the file is a real CodeActAgent run
from the corpus (``openhands__multi_swe_bench__output.jsonl``) with condensation events in
the shape OpenHands serialises ``CondensationAction`` / ``CondensationRequestAction``
(``event_to_dict``: ``args`` holds the dataclass fields) inserted where a condenser would
add them, the stream renumbered as OpenHands numbers it. The expected view is computed here
from the events by OpenHands' rule, and its messages taken from an import of the run
without condensations."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS

from quill.ops.importers import parse_file

pytestmark = pytest.mark.corpus

EVAL = CORPUS / "other" / "openhands__multi_swe_bench__output.jsonl"
SUMMARY = "USER_CONTEXT: fix the ponyc segfault on single element tuples. zanzibar-summary"


def _condensation(**args) -> dict:
    full = {
        "forgotten_event_ids": None,
        "forgotten_events_start_id": None,
        "forgotten_events_end_id": None,
        "summary": None,
        "summary_offset": None,
        **args,
    }
    message = (
        f"Summary: {full['summary']}" if full["summary"] else "Condenser is dropping the events: …"
    )
    return {"source": "agent", "message": message, "action": "condensation", "args": full}


def _renumbered(events: list[dict]) -> list[dict]:
    """``events`` with ids 0, 1, 2 … in order (``cause`` and forgotten ids follow), as the
    event stream numbers what it is given."""
    new = {e["id"]: n for n, e in enumerate(events) if "id" in e}
    out = []
    for n, e in enumerate(events):
        e = {**e, "id": n}
        if "timestamp" not in e:  # an inserted event: written right after the one before
            e["timestamp"] = out[n - 1]["timestamp"]
        if e.get("cause") is not None:
            e["cause"] = new[e["cause"]]
        args = e.get("args") or {}
        if e.get("action") == "condensation":
            e["args"] = {
                **args,
                **{
                    k: new[args[k]] if args[k] is not None else None
                    for k in ("forgotten_events_start_id", "forgotten_events_end_id")
                },
                "forgotten_event_ids": [new[i] for i in args["forgotten_event_ids"]]
                if args["forgotten_event_ids"] is not None
                else None,
            }
        out.append(e)
    return out


def _condensed_run() -> tuple[list[dict], list[dict]]:
    """(the real run, the same run with two condensations and a request inserted)."""
    run = json.loads(EVAL.read_text().splitlines()[0])["history"]
    ids = [e["id"] for e in run]
    # An LLM-summarising condenser with keep_first = 2 (system prompt, task): it forgets a
    # range and puts the summary back at offset 2.
    first = _condensation(
        forgotten_events_start_id=ids[2],
        forgotten_events_end_id=ids[17],
        summary=SUMMARY,
        summary_offset=2,
    )
    request = {
        "source": "agent",
        "message": "Requesting a condensation",
        "action": "condensation_request",
        "args": {},
    }  # noqa: E501
    # A forgetting condenser: a list of ids and no summary (the earlier summary stays).
    second = _condensation(forgotten_event_ids=ids[18:26])
    mixed = [*run[:22], first, *run[22:32], request, *run[32:36], second, *run[36:]]
    for n, e in enumerate(mixed):
        e.setdefault("id", 10_000 + n)  # placeholder, renumbered below
    return run, _renumbered(mixed)


def _openhands_view(events: list[dict]) -> list[tuple[str, object]]:
    """What OpenHands feeds the model after ``events`` (``View.from_events``):
    ``("event", id)`` per kept event, ``("summary", text)`` for the summary."""
    gone: set = set()
    for e in events:
        if e.get("action") == "condensation":
            a = e["args"]
            gone |= set(
                a["forgotten_event_ids"]
                if a["forgotten_event_ids"] is not None
                else range(a["forgotten_events_start_id"], a["forgotten_events_end_id"] + 1)
            )
            gone.add(e["id"])
        if e.get("action") == "condensation_request":
            gone.add(e["id"])
    kept: list[tuple[str, object]] = [("event", e["id"]) for e in events if e["id"] not in gone]
    with_summary = [e for e in events if e.get("action") == "condensation" and e["args"]["summary"]]
    if with_summary:
        a = with_summary[-1]["args"]
        kept.insert(a["summary_offset"], ("summary", a["summary"]))
    return kept


def _key(m: dict) -> tuple:
    return (
        m["role"],
        m.get("content"),
        m.get("tool_call_id"),
        tuple(c["id"] for c in m.get("tool_calls") or []),
    )


def test_condensations_are_compactions_with_openhands_view_as_model_view(tmp_path, quill):
    run, condensed = _condensed_run()
    plain = tmp_path / "plain" / "trajectory.json"
    plain.parent.mkdir()
    plain.write_text(json.dumps(run))
    (ref,) = parse_file(plain).sessions
    # The messages each real event became, by the event's id in the condensed stream.
    old_to_new = {
        old["id"]: new["id"]
        for old, new in zip(
            run, [e for e in condensed if "condensation" not in e.get("action", "")]
        )
    }
    by_event: dict[int, list[tuple]] = {}
    for m in ref.messages:
        by_event.setdefault(old_to_new[m["extra"]["openhands_event"]["id"]], []).append(_key(m))
    expected = [
        k
        for kind, value in _openhands_view(condensed)
        for k in (by_event.get(value, []) if kind == "event" else [("user", value, None, ())])
    ]
    assert len(expected) < len(ref.messages) - 10  # the condensations forget a lot

    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(condensed))
    parsed = parse_file(path)
    assert parsed.problems == []
    (s,) = parsed.sessions
    # Carried tails: the kept events after the summary (4 real events -> 4 messages, then
    # 10 events -> 10 messages), each a copy of the last live messages in order.
    assert [c["tail_count"] for c in s.compactions] == [4, 10]
    # The summary the second condensation carries is a copy of the first one's.
    second_set = [m["id"] for m in s.compactions[1]["messages"]]
    assert second_set[2] == s.compactions[0]["messages"][2]["id"] + "#2"

    quill.run("import", str(path))
    quill.drain()
    sid = s.session["session_id"]
    model = quill.json("sessions", "show", sid, "--view", "model")["messages"]
    assert [_key(m) for m in model] == expected
    audit = quill.json("sessions", "show", sid, "--view", "audit")
    originals = [m for m in audit["messages"] if "#" not in str(m.get("ext_id") or m["id"])]
    assert {_key(m) for m in ref.messages} <= {_key(m) for m in audit["messages"]}
    assert len(originals) >= len(ref.messages)
    # A forgotten tool result is still found by search.
    forgotten = next(m for m in ref.messages if m["role"] == "tool")
    word = next(w for w in str(forgotten["content"]).split() if len(w) > 8 and w.isalnum())
    hits = quill.json("search", word, "--limit", "200")["hits"]
    assert sid in {h["session_id"] for h in hits}
    assert quill.status()["spool"]["quarantined"] == 0
    again = json.loads(quill.run("import", str(path), "--json").stdout)
    assert sum(e["new"] for e in again) == 0


def test_a_condensation_openhands_would_refuse_is_reported_and_the_rest_kept(tmp_path):
    run, _ = _condensed_run()
    bad = {
        "id": 9999,
        "timestamp": run[5]["timestamp"],
        **_condensation(
            forgotten_event_ids=[1], forgotten_events_start_id=2, forgotten_events_end_id=3
        ),
    }
    summary_only = {
        "id": 9998,
        "timestamp": run[5]["timestamp"],
        "source": "environment",
        "message": "Summary",
        "observation": "condense",
        "content": SUMMARY,
        "extras": {},
    }
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps([*run[:6], bad, summary_only, *run[6:]]))
    parsed = parse_file(path)
    assert [p.kind for p in parsed.problems] == ["skipped"]
    assert "forgotten_event_ids or a start/end range" in parsed.problems[0].reason
    (s,) = parsed.sessions
    assert s.compactions == []
    (condense,) = [m for m in s.messages if m["id"] == "event:9998"]
    assert (condense["role"], condense["content"]) == ("user", SUMMARY)
