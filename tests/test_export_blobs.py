"""A Quill export carries each binary payload the store keeps once (store/apply/blobs.py) once
per session, not once per row that refers to it; imported into an empty data dir it gives the
same store, and a row referring to a blob the import does not hold is refused, never stored
with a reference nothing resolves."""

from __future__ import annotations

import json
import uuid

import pytest
from conftest import CORPUS, QuillCLI
from test_export_round_trip import canonical

#: A real Claude Code session with two pasted PNG screenshots (156 KB and 283 KB of base64)
#: in one user record (line 7).
REAL = CORPUS / "claude-code" / "context-evaluator__51723c80-7be9-4bc5-9795-7bd86f32165d.jsonl"
PASTES = 10


def _repasted(tmp_path):
    """The real session continued the way a user re-pastes a screenshot: the record holding
    the two images is sent again ``PASTES - 1`` times (new uuids, new text), each answered by
    25 assistant lines, so the copies span several ``messages.restore`` chunks (200 rows).
    Returns ``(file, [image payloads])``."""
    lines = REAL.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    pasted = next(
        r
        for r in records
        if r.get("type") == "user"
        and any(
            isinstance(b, dict) and b.get("type") == "image"
            for b in r["message"].get("content") or []
        )
    )
    payloads = [b["source"]["data"] for b in pasted["message"]["content"] if b["type"] == "image"]
    reply = next(r for r in records if r.get("type") == "assistant")
    parent = records[-1]["uuid"]
    out = list(lines)
    for n in range(1, PASTES):
        user = json.loads(json.dumps(pasted))
        user["uuid"], user["parentUuid"] = str(uuid.UUID(int=n)), parent
        user["message"]["content"][0] = {"type": "text", "text": f"same screenshots, try {n}"}
        out.append(json.dumps(user))
        parent = user["uuid"]
        for k in range(25):
            answer = json.loads(json.dumps(reply))
            answer["uuid"], answer["parentUuid"] = str(uuid.UUID(int=1000 * n + k)), parent
            answer["message"] = {
                **answer["message"],
                "id": f"msg_repaste_{n}_{k}",
                "content": [{"type": "text", "text": f"looking at it again ({n}.{k})"}],
            }
            out.append(json.dumps(answer))
            parent = answer["uuid"]
    path = tmp_path / REAL.name
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path, payloads


@pytest.mark.corpus
def test_a_screenshot_pasted_ten_times_is_exported_once_and_reads_back_whole(quill, tmp_path):
    path, payloads = _repasted(tmp_path)
    quill.run("import", str(path))
    quill.drain()
    out = tmp_path / "export.jsonl"
    quill.run("export", "-o", str(out))
    text = out.read_text(encoding="utf-8")
    restores = [json.loads(line) for line in text.splitlines()[1:]]
    restores = [op for op in restores if op["op"] == "messages.restore"]
    assert len(restores) >= 2  # the copies span chunks: later ones refer to an earlier op
    payload_chars = sum(len(p) for p in payloads)
    print(f"export {len(text):,} B for {payload_chars:,} B of distinct image payloads")
    for p in payloads:
        assert text.count(p[:4096]) == 1  # inline once, not once per paste
    # each image once plus 0.5 MB of text (inlined per paste it was over 10 × the images)
    assert len(text) < 3 * payload_chars
    referring = [op for op in restores if op["data"].get("blob_refs")]
    assert referring and all(len(op["data"]["blob_refs"]) == 2 for op in referring)

    fresh = QuillCLI(tmp_path / "fresh")
    fresh.run("import", str(out))
    fresh.drain()
    assert fresh.json("spool", "quarantine", "list")["entries"] == []
    assert canonical(fresh.home) == canonical(quill.home)
    # every paste reads back with its whole image, in the fresh store as in the first
    (sid,) = [s["id"] for s in fresh.json("sessions", "list")["sessions"]]
    images = [
        part["image_url"]["url"]
        for m in fresh.json("sessions", "show", sid, "--view", "audit")["messages"]
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    ]
    assert len(images) == 2 * PASTES
    assert {url.split(",", 1)[1] for url in images} == set(payloads)
    again = tmp_path / "again.jsonl"
    fresh.run("export", "-o", str(again))
    assert again.read_text(encoding="utf-8") == text


def test_a_restore_referring_to_a_blob_the_store_lacks_is_refused(quill, tmp_path):
    """The op is quarantined as ``missing-blob`` with nothing of it stored; a reference that
    the op does not name (producer text that only looks like one) is kept as text."""
    sha = "ab" * 32
    ref_url = f"data:image/png;base64,quill-blob:{sha}"
    part = {"type": "image_url", "image_url": {"url": ref_url}}

    def restore(sid, refs):
        data = {
            "session_id": sid,
            "offset": 0,
            "rows": [{"message": {"role": "user", "content": [part]}, "state": "live"}],
        }
        if refs is not None:
            data["blob_refs"] = refs
        return {"op": "messages.restore", "batch": f"b-{sid}", "data": data}

    path = tmp_path / "crafted.jsonl"
    lines = [{"quill_export": 1, "sessions": 2}, restore("named", [sha]), restore("text", None)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    quill.run("import", str(path))
    quill.drain()
    entries = quill.json("spool", "quarantine", "list")["entries"]
    assert [e["reason"] for e in entries] == ["missing-blob"], entries
    assert quill.run("sessions", "show", "named", check=False).returncode != 0
    (m,) = quill.json("sessions", "show", "text", "--view", "audit")["messages"]
    assert m["content"] == [part]
