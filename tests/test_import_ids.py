"""Session ids of imported conversations whose format carries no id of its own (OpenAI chat,
ShareGPT, Gemini without sessionId): unique per conversation, stable on re-import and growth,
and compatible with stores made when the id was the file name (or line). Real files in tmp
dirs, the real CLI (docs/importers.md, "Session ids")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CORPUS
from importers_helpers import (  # noqa: F401 (store: a fixture, used by name)
    cc,
    codex_assistant,
    codex_user,
    store,
    write_jsonl,
)

from quill.ops.importers import parse_file

A = [
    {"role": "user", "content": "project A question alpha"},
    {"role": "assistant", "content": "answer A"},
]
B = [
    {"role": "user", "content": "project B question bravo"},
    {"role": "assistant", "content": "answer B"},
    {"role": "user", "content": "more B"},
]
HERMES = CORPUS / "sharegpt" / "hermeswith__trajectory_samples.jsonl"


def write(path: Path, value) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    return path


def sessions(quill) -> dict[str, list[str]]:
    """``{session id: [message texts]}`` of the store."""
    out = {}
    for s in quill.json("sessions", "list", "--all")["sessions"]:
        shown = quill.json("sessions", "show", s["id"])
        out[s["id"]] = [m["content"] for m in shown["messages"]]
    return out


def run_until_idle(quill) -> str:
    """``quill run --until-idle``; returns its stderr (where quarantines are reported). Exit 1
    exactly when it reports records quarantined (the README's exit codes)."""
    ran = quill.run("run", "--until-idle", "--timeout", "60", check=False)
    assert ran.returncode == (1 if "quarantined during this run" in ran.stderr else 0), ran.stderr
    return ran.stderr


def drain(quill) -> None:
    """Drain the spool in-process with the production writer (no fleet)."""
    quill.drain()


def quarantined(quill) -> int:
    return quill.json("spool", "status")["quarantined"]


def test_same_named_chat_files_in_two_folders_are_two_sessions(quill, tmp_path):
    write(tmp_path / "coll" / "a" / "chat.json", A)
    write(tmp_path / "coll" / "b" / "chat.json", B)
    out = quill.run("import", str(tmp_path / "coll")).stdout
    assert "spooled 5 new message(s) from 2 file(s)" in out, out
    assert "quarantined" not in run_until_idle(quill)
    held = sessions(quill)
    assert sorted(held.values()) == [[m["content"] for m in A], [m["content"] for m in B]]
    assert all(sid.startswith("openai-chat:chat.json:") for sid in held)
    assert len(quill.json("search", "bravo")["hits"]) == 1 and quarantined(quill) == 0
    again = quill.json("import", str(tmp_path / "coll"))
    assert [(e["new"], e["already_stored"]) for e in again] == [(0, 2), (0, 3)]


@pytest.mark.corpus
def test_same_named_sharegpt_files_keep_every_trajectory(quill, tmp_path):
    lines = HERMES.read_text().splitlines()
    for folder, picked in (("x", lines[0:2]), ("y", lines[4:6])):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "traj.jsonl").write_text("\n".join(picked) + "\n")
    report = quill.json("import", str(tmp_path / "x"), str(tmp_path / "y"))
    assert sum(e["new"] for e in report) == 12
    assert "quarantined" not in run_until_idle(quill)
    assert quarantined(quill) == 0
    held = quill.json("sessions", "list", "--all")["sessions"]
    assert len(held) == 4 and sum(s["message_count"] for s in held) == 12
    assert (
        sum(e["new"] for e in quill.json("import", str(tmp_path / "x"), str(tmp_path / "y"))) == 0
    )


def test_a_copy_of_a_file_is_the_same_conversation_stored_once(quill, tmp_path):
    """Decision (docs/importers.md, "Session ids"): the id names the conversation, not the
    file, as a Claude Code sessionId does; a copied file is the same conversation, kept once,
    without quarantine."""
    folder = tmp_path / "in"
    write(folder / "a" / "chat.json", B)
    write(folder / "b" / "chat.json", B)
    quill.run("import", str(folder))
    drain(quill)
    assert list(sessions(quill).values()) == [[m["content"] for m in B]] and quarantined(quill) == 0
    assert [e["already_stored"] for e in quill.json("import", str(folder))] == [3, 3]
    # the same conversation twice in one file is stored once too, and said so
    line = json.dumps(
        {"conversations": [{"from": "human", "value": "twice"}, {"from": "gpt", "value": "ok"}]}
    )
    (tmp_path / "dup.jsonl").write_text(line + "\n" + line + "\n")
    (entry,) = quill.json("import", str(tmp_path / "dup.jsonl"))
    assert (entry["sessions"], entry["new"], entry["already_stored"]) == (1, 2, 2)
    (problem,) = entry["problems"]
    assert problem["kind"] == "skipped" and "same conversation" in problem["reason"]
    drain(quill)
    assert len(sessions(quill)) == 2 and quarantined(quill) == 0


def test_reimport_after_growth_keeps_the_id_and_adds_only_the_new_message(quill, tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in B[:2]))
    (first,) = quill.json("import", str(path))
    drain(quill)
    with path.open("a") as fh:
        fh.write(json.dumps(B[2]) + "\n")
    (grown,) = quill.json("import", str(path))
    assert grown["session_ids"] == first["session_ids"] and (
        grown["new"],
        grown["already_stored"],
    ) == (1, 2)
    drain(quill)
    assert list(sessions(quill).values()) == [[m["content"] for m in B]]
    (again,) = quill.json("import", str(path))
    assert (again["new"], again["already_stored"]) == (0, 3)


def _push_old_scheme(quill, path: Path) -> list[str]:
    """Store ``path``'s conversations as the importer before content ids did: the same
    session payload and messages under the file-name (or line) id. Returns those ids."""
    ops, old = [], []
    for s in parse_file(path).sessions:
        sid = s.legacy_id
        old.append(sid)
        ops.append({"op": "session.create", "data": {**s.session, "session_id": sid}})
        ops.append({"session_id": sid, "messages": s.messages})
    quill.run("push", input="\n".join(json.dumps(o) for o in ops) + "\n")
    drain(quill)
    return old


def test_a_store_made_with_file_name_ids_keeps_its_sessions_on_reimport(quill, tmp_path):
    a = write(tmp_path / "a" / "chat.json", A)
    b = write(tmp_path / "b" / "chat.json", B)
    (old,) = _push_old_scheme(quill, a)
    assert old == "openai-chat:chat.json"
    (again,) = quill.json("import", str(a))
    assert again["session_ids"] == [old] and (again["new"], again["already_stored"]) == (0, 2)
    # the other folder's file is another conversation: a session of its own, never merged
    (other,) = quill.json("import", str(b))
    assert other["session_ids"] != [old] and other["new"] == 3
    drain(quill)
    held = sessions(quill)
    assert held[old] == [m["content"] for m in A] and sorted(held.values()) == sorted(
        [[m["content"] for m in A], [m["content"] for m in B]]
    )
    assert quarantined(quill) == 0


@pytest.mark.corpus
def test_a_store_made_with_line_ids_keeps_its_sharegpt_sessions(quill, tmp_path):
    lines = HERMES.read_text().splitlines()
    x = tmp_path / "x" / "traj.jsonl"
    y = tmp_path / "y" / "traj.jsonl"
    x.parent.mkdir()
    y.parent.mkdir()
    x.write_text("\n".join(lines[0:2]) + "\n")
    y.write_text("\n".join(lines[4:6]) + "\n")
    old = _push_old_scheme(quill, x)
    assert old == ["sharegpt:traj.jsonl:1", "sharegpt:traj.jsonl:2"]
    (again,) = quill.json("import", str(x))
    assert again["session_ids"] == old and again["new"] == 0
    (other,) = quill.json("import", str(y))
    assert not set(other["session_ids"]) & set(old) and other["new"] == 6
    drain(quill)
    held = quill.json("sessions", "list", "--all")["sessions"]
    assert (
        len(held) == 4 and sum(s["message_count"] for s in held) == 12 and quarantined(quill) == 0
    )


def test_run_says_when_records_were_quarantined(quill, tmp_path):
    """A refused op must not pass silently: `quill run --until-idle` names the quarantines."""
    batch = "11111111-2222-3333-4444-555555555555"
    quill.run(
        "push",
        input=json.dumps({"op": "session.create", "data": {"session_id": "s"}, "batch": batch})
        + "\n",
    )
    assert "quarantined" not in run_until_idle(quill)
    quill.run(
        "push",
        input=json.dumps({"op": "session.create", "data": {"session_id": "t"}, "batch": batch})
        + "\n",
    )
    err = run_until_idle(quill)
    assert "1 record(s) quarantined during this run" in err and "batch-id-reused: 1" in err, err


# ------------------------------------------- id-less Claude Code, Codex and Gemini files


def _idless_pairs(tmp_path: Path) -> dict[str, tuple[Path, Path, str]]:
    """Per format: two same-named files in two folders holding different conversations
    without a conversation id, and the id older versions gave both."""
    out = {}
    for fmt in ("claude", "codex", "gemini"):
        files = []
        for folder, word in (("x", "alpha"), ("y", "bravo")):
            if fmt == "claude":
                files.append(
                    write_jsonl(
                        tmp_path / folder / "s.jsonl",
                        [
                            cc(f"u-{word}", "user", f"ask {word}", None, sid=None),
                            cc(f"a-{word}", "assistant", f"did {word}", f"u-{word}", sid=None),
                        ],
                    )
                )
            elif fmt == "codex":
                files.append(
                    write_jsonl(
                        tmp_path / folder / "rollout.jsonl",
                        [codex_user(f"ask {word}"), codex_assistant(f"did {word}")],
                    )
                )
            else:
                files.append(
                    write(
                        tmp_path / folder / "chat.json",
                        {
                            "messages": [
                                {"id": f"g-{word}", "type": "user", "content": f"ask {word}"},
                                {"id": f"h-{word}", "type": "gemini", "content": f"did {word}"},
                            ]
                        },
                    )
                )
        legacy = {
            "claude": "claude-code:s.jsonl",
            "codex": "codex:rollout.jsonl",
            "gemini": "gemini-cli:chat.json",
        }
        out[fmt] = (*files, legacy[fmt])
    return out


def test_idless_files_of_the_same_name_get_distinct_ids(tmp_path):
    for fmt, (x, y, legacy) in _idless_pairs(tmp_path).items():
        (sx,), (sy,) = parse_file(x).sessions, parse_file(y).sessions
        assert sx.session["session_id"] != sy.session["session_id"], fmt
        assert (
            sx.session["session_id"].startswith(legacy + ":")
            and sx.legacy_id == sy.legacy_id == legacy
        ), fmt
        assert (
            parse_file(x).sessions[0].session["session_id"] == sx.session["session_id"]
        )  # deterministic


def test_idless_files_imported_under_the_file_name_id_keep_it(store, tmp_path):
    """A store filled by the older importer (the file-name id) keeps that session for the
    file it came from; the same-named file of the other folder becomes a session of its own."""
    for fmt, (x, y, legacy) in _idless_pairs(tmp_path).items():
        (old,) = parse_file(x).sessions
        store.spool.append("session.create", {**old.session, "session_id": legacy})
        store.spool.append("messages.append", {"session_id": legacy, "messages": old.messages})
        store.drain()
        again = store.imp(x)
        assert (again.sessions, again.new, again.stored) == ([legacy], 0, 2), fmt
        other = store.imp(y)
        assert other.sessions != [legacy] and other.new == 2, fmt
        assert [m["content"] for m in store.view(legacy, "model")] == ["ask alpha", "did alpha"], (
            fmt
        )
        assert [m["content"] for m in store.view(other.sessions[0], "model")] == [
            "ask bravo",
            "did bravo",
        ], fmt


@pytest.mark.corpus
def test_the_import_counts_add_up_on_files_with_compactions(quill):
    """A re-import said "806 message(s) read: 0 new, 825 already stored" for a Codex rollout:
    compaction summaries counted as stored but not as read."""
    from conftest import CORPUS

    files = [str(p) for p in sorted((CORPUS / "codex").glob("*.jsonl"))]
    first = quill.json("import", *files)
    quill.drain()
    again = quill.json("import", *files)
    for one, two in zip(first, again):
        assert one["messages"] == one["new"] + one["already_stored"], one
        assert two["messages"] == two["already_stored"] and two["new"] == 0, two
    assert any(e["compactions"] for e in first)
