"""`pkg.Client` / `pkg.AsyncClient` against a real data dir and the production writer (in a
thread: the ``writer`` fixture; the fleet's lifecycle is test_fleet's): durable acks,
read-your-writes outcomes, reads equal to the CLI's --json, typed errors, threads, fork."""

from __future__ import annotations

import asyncio
import datetime
import os
import threading

import pytest

import quill as pkg
from quill.spool import START, SpoolReader

CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "grep", "arguments": '{"pattern": "x"}'},
}
TURN = [
    {"role": "user", "content": "where is the config parsed?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "name": "grep", "content": "ops/config.py:12"},
    {"role": "assistant", "content": "In ops/config.py"},
]


def _spooled(home) -> int:
    return (
        len(list(SpoolReader(home / "spool").read(START, max_bytes=1 << 30)))
        if (home / "spool").exists()
        else 0
    )


def test_append_is_durable_and_wait_says_applied(home, writer):
    q = pkg.Client(home)
    ack = q.append("s1", TURN, source="agent", model="gpt-x")
    assert isinstance(ack, pkg.Ack) and _spooled(home) == 2  # session.create (model) + the messages
    outcome = q.wait(ack, timeout=60)
    assert outcome.applied and outcome.status == "applied" and outcome.batch_id == ack.batch_id
    assert [m["content"] for m in q.messages("s1")] == [m["content"] for m in TURN]
    assert q.messages("s1", view="model")[1]["tool_calls"] == [CALL]
    session = q.session("s1")
    assert session["source"] == "agent" and session["model"] == "gpt-x"


def test_every_op_method_applies(home, writer):
    q = pkg.Client(home)
    acks = [
        q.create("s2", source="agent", title="Fix login"),
        q.append("s2", TURN),
        q.flags("s2", pinned=True),
        q.title("s2", "Fix the login"),
        q.append(
            "s2", [{"role": "user", "content": "again"}, {"role": "assistant", "content": "sure"}]
        ),
        q.rewind("s2", user_turn=-1),
        q.replace(
            "s2",
            [{"role": "assistant", "content": "In ops/config.py, line 12"}],
            from_message_id=None,
        ),
        q.mark_read("s2"),
    ]
    assert [o.status for o in q.wait_all(acks, timeout=60)] == ["applied"] * len(acks)
    live = q.messages("s2", view="model")
    assert live == [{"role": "assistant", "content": "In ops/config.py, line 12"}]
    audit = q.messages("s2", view="audit")
    assert sum(m["state"] == "rewound" for m in audit) == 6  # nothing deleted
    compacted = q.compact("s2", [{"role": "user", "content": "[summary] config question"}])
    end = q.end("s2", "user_exit")
    assert all(o.applied for o in q.wait_all([compacted, end], timeout=60))
    s = q.session("s2")
    assert s["title"] == "Fix the login" and s["pinned"] and s["end_reason"] == "user_exit"


def test_wait_reports_quarantined_with_the_reason(home, writer):
    q = pkg.Client(home)
    q.wait(q.append("w", [{"role": "user", "content": "one"}]), timeout=60)
    outcome = q.wait(q.rewind("w", user_turn=7), timeout=60)
    assert (
        not outcome.applied and outcome.status == "quarantined" and outcome.reason == "no-such-turn"
    )


def test_reads_equal_the_cli_json(home, quill, writer):
    q = pkg.Client(home)
    q.wait(q.append("r1", TURN, source="agent"), timeout=60)
    q.wait(q.create("r2", source="other", title="second"), timeout=60)
    assert q.sessions_page() == quill.json("sessions", "list")
    assert q.sessions() == quill.json("sessions", "list")["sessions"]
    assert (
        q.sessions(source="other")
        == quill.json("sessions", "list", "--source", "other")["sessions"]
    )
    assert q.transcript("r1") == quill.json("sessions", "show", "r1")
    assert (
        q.messages("r1", view="audit")
        == quill.json("sessions", "show", "r1", "--view", "audit")["messages"]
    )
    assert (
        q.messages("r1", latest=2)
        == quill.json("sessions", "show", "r1", "--latest", "2")["messages"]
    )
    # the human header gives the view's total, not the count shown (it said messages=2)
    total = q.session("r1")["message_count"]
    assert (
        total > 2
        and f"last 2 of {total} messages"
        in quill.run("sessions", "show", "r1", "--latest", "2").stdout
    )
    assert q.session("r1") == quill.json("sessions", "show", "r1")["session"]
    assert q.search("config") == quill.json("search", "config")["hits"] and q.search("config")


def test_bad_input_raises_before_anything_is_appended(home):
    q = pkg.Client(home)
    with pytest.raises(pkg.InvalidInputError) as err:
        q.append("b", [{"role": "user", "content": "ok"}, {"role": "wizard", "content": "bad"}])
    assert err.value.reason == "invalid-role" and "message 1" in str(err.value) and err.value.hint
    assert isinstance(err.value, ValueError) and isinstance(err.value, pkg.QuillError)
    for call in (
        lambda: q.append("", []),
        lambda: q.rewind("b"),
        lambda: q.flags("b"),
        lambda: q.messages("b", view="nope"),
        lambda: q.messages("b", latest=-1),
        lambda: q.sessions(limit=0),
        lambda: q.search("x", limit=-1),
        lambda: q.sessions(since=float("nan")),
        lambda: q.search("x", until=float("inf")),
        lambda: q.usage(since=float("nan")),
        lambda: q.sessions(limit=True),
        lambda: q.wait(pkg.Ack(None, "x"), -1),
        # values a Python caller can pass that JSON cannot carry: refused as input, not TypeError
        lambda: q.append("b", [{"role": "user", "content": "x", "meta": {"a", "b"}}]),
        lambda: q.append("b", [{"role": "user", "content": "x", "at": datetime.datetime.now()}]),
        lambda: q.submit("session.create", {"session_id": "b", "title": b"raw"}),
        # a lone surrogate cannot be stored or read back under the same id
        lambda: q.append("b\udc80", [{"role": "user", "content": "x"}]),
        lambda: q.session("b\udc80"),
        lambda: q.search("x", session_id="b\ud800"),
    ):
        with pytest.raises(pkg.InvalidInputError):
            call()
    assert _spooled(home) == 0


def test_errors_say_what_to_do(home):
    q = pkg.Client(home)
    with pytest.raises(pkg.NotFoundError) as missing:
        q.session("nope")
    assert missing.value.exit_code == 3 and "quill run" in missing.value.hint
    assert q.sessions() == [] and q.search("anything") == []
    ack = q.append("t", [{"role": "user", "content": "x"}])
    with pytest.raises(pkg.WaitTimeoutError) as late:  # no writer is running
        q.wait(ack, timeout=0.3)
    assert (
        isinstance(late.value, TimeoutError)
        and "quill run" in late.value.hint
        and late.value.exit_code == 4
    )


def test_data_dir_from_argument_or_environment(home, monkeypatch):
    monkeypatch.setenv("QUILL_HOME", str(home))
    assert pkg.Client().home == home == pkg.Client(str(home)).home
    (home / "config.toml").parent.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[writer]\nchunk_rowz = 5\n")
    with pytest.raises(pkg.StorageError) as bad:
        pkg.Client(home)
    assert "configuration.md" in bad.value.hint


def test_safe_across_threads_and_after_fork(home, quill):
    q = pkg.Client(home)
    q.append("fork", [{"role": "user", "content": "parent before fork"}])

    def producer(n: int) -> None:
        for i in range(20):
            q.append(f"t{n}", [{"role": "user", "content": f"thread {n} message {i}"}])

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    pid = os.fork()
    if pid == 0:  # the child uses the very same client object
        try:
            for i in range(10):
                q.append("fork", [{"role": "user", "content": f"child {i}"}])
        finally:
            os._exit(0)
    for t in threads:
        t.join()
    assert os.waitpid(pid, 0)[1] == 0
    q.append("fork", [{"role": "user", "content": "parent after fork"}])
    records = list(SpoolReader(home / "spool").read(START, max_bytes=1 << 30))
    assert len(records) == 1 + 6 * 20 + 10 + 1
    producers = {r.record["producer"] for r in records}
    assert len(producers) >= 8  # main thread, 6 threads, the child: one spool handle each
    quill.drain()
    for n in range(6):
        assert [m["content"] for m in q.messages(f"t{n}")] == [
            f"thread {n} message {i}" for i in range(20)
        ]
    forked = [m["content"] for m in q.messages("fork")]
    assert forked[0] == "parent before fork" and sorted(forked[1:]) == sorted(
        [f"child {i}" for i in range(10)] + ["parent after fork"]
    )


def test_short_lived_threads_leak_no_descriptors(home):
    q = pkg.Client(home)
    q.append("fd", [{"role": "user", "content": "warm up"}])
    before = len(os.listdir("/proc/self/fd"))
    for i in range(30):
        t = threading.Thread(
            target=q.append, args=("fd", [{"role": "user", "content": f"thread {i}"}])
        )
        t.start()
        t.join()
    assert len(os.listdir("/proc/self/fd")) < before + 5
    assert _spooled(home) == 31


def test_async_client_has_every_client_method():
    import inspect

    public = {
        n for n, f in inspect.getmembers(pkg.Client, inspect.isfunction) if not n.startswith("_")
    }
    aq = pkg.AsyncClient("/nonexistent/quill-home")
    missing = [n for n in public if not inspect.iscoroutinefunction(getattr(aq, n, None))]
    assert not missing, f"AsyncClient lacks coroutine versions of {missing}"


def test_async_client(home, writer):
    async def main() -> None:
        aq = pkg.AsyncClient(home)
        acks = await asyncio.gather(
            *(aq.append(f"a{i}", [{"role": "user", "content": f"async {i}"}]) for i in range(10))
        )
        outcomes = await aq.wait_all(list(acks), timeout=60)
        assert [o.status for o in outcomes] == ["applied"] * 10
        assert (await aq.messages("a3"))[0]["content"] == "async 3"
        assert len(await aq.sessions(limit=100)) == 10
        assert await aq.search("async")
        assert await aq.usage() == pkg.Client(home).usage()
        bad = await aq.wait(await aq.rewind("a1", user_turn=5), timeout=60)
        assert bad.reason == "no-such-turn"
        with pytest.raises(pkg.NotFoundError):
            await aq.session("nope")
        with pytest.raises(pkg.InvalidInputError):
            await aq.append("a1", [{"role": "wizard"}])

    asyncio.run(main())


def test_async_cancelled_append_still_completes(home):
    async def main() -> None:
        aq = pkg.AsyncClient(home)
        task = asyncio.create_task(
            aq.append("c", [{"role": "user", "content": "cancelled mid-write"}])
        )
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _spooled(home) == 1  # finished before the cancellation propagated
        with pytest.raises(pkg.WaitTimeoutError):
            await aq.wait(await aq.append("c", [{"role": "user", "content": "x"}]), timeout=0.2)

    asyncio.run(main())


@pytest.mark.parametrize("bogus", ["bogus", None, 42, {"batch_id": "x"}])
def test_wait_on_something_that_is_not_an_ack_is_a_typed_error(home, bogus):
    q = pkg.Client(home)
    for call in (
        lambda: q.wait(bogus, timeout=0),
        lambda: q.wait_all([bogus], timeout=0),
        lambda: q.applied(bogus),
        lambda: asyncio.run(pkg.AsyncClient(home).wait(bogus, timeout=0)),
    ):
        with pytest.raises(pkg.InvalidInputError) as err:
            call()
        assert err.value.exit_code == 2 and err.value.hint


def test_waiting_on_the_pair_delete_sessions_returns_says_how_to_unpack_it(home):
    q = pkg.Client(home)
    pair = (
        ["gone"],
        q.append("gone", [{"role": "user", "content": "x"}]),
    )  # the shape delete_sessions returns
    with pytest.raises(pkg.InvalidInputError) as err:
        q.wait(pair, timeout=0)
    assert "delete_sessions" in err.value.message and "ids, ack =" in err.value.hint


def test_not_found_errors_share_one_message_and_hint(home, quill):
    """Every "no such session" has the same shape, in the client and the CLI, before and after
    the store exists."""
    q = pkg.Client(home)
    before = [
        pytest.raises(pkg.NotFoundError, f).value
        for f in (
            lambda: q.session("nope"),
            lambda: q.transcript("nope"),
            lambda: q.context("nope"),
            lambda: q.delete_sessions(["nope"]),
        )
    ]
    assert {(e.message, e.hint) for e in before} == {
        (
            "no session 'nope' (no store yet: nothing has been applied)",
            "push or import something, then `quill run` applies it",
        )
    }
    quill.run("push", "--session", "t", input='{"role": "user", "content": "x"}')
    quill.drain()
    after = [
        pytest.raises(pkg.NotFoundError, f).value
        for f in (
            lambda: q.session("nope"),
            lambda: q.transcript("nope"),
            lambda: q.context("nope"),
            lambda: q.delete_sessions(["nope"]),
        )
    ]
    assert {(e.message, e.hint) for e in after} == {
        ("no session 'nope'", "`quill sessions list` shows the session ids")
    }
    cli = quill.run("sessions", "show", "nope", check=False)
    assert (
        cli.returncode == 3
        and "no session 'nope'" in cli.stderr
        and "`quill sessions list`" in cli.stderr
    )
