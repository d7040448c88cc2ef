"""A Gemini CLI ``session-*.jsonl`` log and its subagent log, line by line as Gemini CLI
writes them (google-gemini/gemini-cli ``chatRecordingService.ts``): the importer tests'
synthetic file and a fuzz base."""

from __future__ import annotations

from importers_helpers import write_jsonl

SID = "a1b2c3d4-0000-4000-8000-000000000001"
PROJECT = "4b8ac3" * 10 + "abcd"


def ts(n: int) -> str:
    return f"2026-05-03T16:{n // 60:02d}:{n % 60:02d}.000Z"


def tokens(i: int, o: int, cached: int = 0, thoughts: int = 0) -> dict:
    return {
        "input": i,
        "output": o,
        "cached": cached,
        "thoughts": thoughts,
        "tool": 0,
        "total": i + o + thoughts,
    }


def user(mid, text, n):
    return {"id": mid, "timestamp": ts(n), "type": "user", "content": [{"text": text}]}


def gem(mid, n, text="", calls=None, tokens=None, thoughts=None):
    rec = {"id": mid, "timestamp": ts(n), "type": "gemini", "content": text}
    rec["thoughts"] = thoughts or []
    if calls is not None:
        rec["toolCalls"] = calls
    rec["tokens"] = tokens
    rec["model"] = "gemini-3-flash-preview"
    return rec


def call(cid, name, args, n, output=None, **kw):
    c = {"id": cid, "name": name, "args": args, "status": "executing", "timestamp": ts(n)}
    if output is not None:
        c["status"] = "success"
        c["result"] = [
            {"functionResponse": {"id": cid, "name": name, "response": {"output": output}}}
        ]
    return {**c, **kw}


def set_(**kw):
    return {"$set": kw}


LS = call("run_shell_command_1", "run_shell_command", {"command": "ls"}, 5)
AGENT = call("invoke_agent_2", "codebase_investigator", {"objective": "find tmp"}, 11)
THOUGHT = [{"subject": "Listing", "description": "Run ls.", "timestamp": ts(4)}]
C1 = {"id": "c1", "timestamp": ts(30), "type": "user", "content": [{"text": "<state_snapshot>"}]}
C2 = {"id": "c2", "timestamp": ts(30), "type": "gemini", "content": [{"text": "Got it."}]}
G5 = gem("g5", 21, "Two files, a and b.", tokens=tokens(300, 30))
U3 = user("u3", "never mind; summarise", 20)

#: The main log, line by line as Gemini CLI appends it: a message re-appended whole as its tool
#: call runs and its tokens arrive, a rewind, a title, a compression checkpoint and a rollback.
MAIN = [
    {
        "sessionId": SID,
        "projectHash": PROJECT,
        "startTime": ts(0),
        "lastUpdated": ts(0),
        "kind": "main",
    },
    set_(messages=[{"id": "ctx", "timestamp": ts(1), "type": "user", "content": "<ctx>"}]),
    user("u1", "list files", 2),
    set_(lastUpdated=ts(2)),
    gem("g1", 5, calls=[LS], thoughts=THOUGHT),
    gem("g1", 5, calls=[LS], thoughts=THOUGHT, tokens=tokens(100, 10, cached=40, thoughts=7)),
    gem(
        "g1",
        5,
        calls=[{**LS, **call("run_shell_command_1", "run_shell_command", {}, 6, "a\nb")}],
        thoughts=THOUGHT,
        tokens=tokens(100, 10, cached=40, thoughts=7),
    ),
    gem("g2", 7, "There are two files.", tokens=tokens(120, 8)),
    user("u2", "delete them", 10),
    gem(
        "g3",
        11,
        calls=[call(AGENT["id"], AGENT["name"], AGENT["args"], 12, "found", agentId="sub-1")],
        tokens=tokens(150, 12),
    ),
    gem("g4", 13, "Deleted.", tokens=tokens(170, 3)),
    {"$rewindTo": "u2"},
    U3,
    G5,
    set_(summary="Listing files"),
    set_(messages=[C1, C2, U3, G5], lastUpdated=ts(30)),
    user("u4", "thanks", 31),
    set_(messages=[C1, C2, U3, G5]),
    gem("g6", 33, "Bye.", tokens=tokens(90, 2)),
    {"$set": {"lastUpdated": ts(33)}},
]
SUB = [
    {"sessionId": "sub-1", "projectHash": PROJECT, "startTime": ts(11), "kind": "subagent"},
    user("s1", "find tmp", 11),
    gem("s2", 11, calls=[call("glob_1", "glob", {"pattern": "tmp*"}, 11)]),
    gem("s2", 11, calls=[call("glob_1", "glob", {}, 11, "tmp1")], tokens=tokens(50, 5)),
    gem("s3", 12, "found", tokens=tokens(60, 1)),
]


def write_logs(tmp_path):
    chats = tmp_path / "tmp" / PROJECT / "chats"
    main = write_jsonl(chats / f"session-2026-05-03T16-00-{SID[:8]}.jsonl", MAIN)
    sub = write_jsonl(chats / SID / "sub-1.jsonl", SUB)
    return main, sub
