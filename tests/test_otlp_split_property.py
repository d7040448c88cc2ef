"""Exactly once across requests, as a seeded property: a real framework's export (Pydantic AI,
offline, its own OpenTelemetry instrumentation) split at random into requests sent in a
random order, in either encoding, gzip or not, with random requests retried, gives the same
stored transcript as the whole export sent in one request to another `quill serve`: the same
messages (ids, roles, texts, tool calls and results, times), context, usage and delegate
child. Each seed is a fresh run of the agent (a fresh conversation), sent once keeping the
exporter's own order (a tool span never before the chat span holding its call) and once
without it; ``QUILL_OTLP_SEEDS=N`` runs N seeds of each (20 by default).

Also here: one export's records are made durable by one ``fdatasync`` of the spool, and the
200 is written to the socket only after it (``strace`` on the real server process).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time

import psutil
import pytest
from conftest import QuillCLI
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export import SpanExportResult
from otlp_helpers import exporter, post_json, run_agent
from service_helpers import served
from test_otlp_input import _event_form_spans

from quill.ops.client.client import Client
from quill.ops.service.tokens import TokenStore

PROMPTS = ["what is x?", "please delegate this", "and y?", "and z, finally?"]
#: Seeds of the default run; ``QUILL_OTLP_SEEDS=N`` runs N (each is a fresh agent run).
SEEDS = range(int(os.environ.get("QUILL_OTLP_SEEDS", "20")))


def _server(tmp_path_factory, name: str):
    home = tmp_path_factory.mktemp(name) / "home"
    home.mkdir()
    token = TokenStore(home / "tokens.db").create("w", ["write"])[0]
    q = QuillCLI(home)
    return q, home, token


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Two data dirs, each with its `quill serve`: ``split`` takes the export in pieces,
    ``whole`` in one request."""
    split, whole = _server(tmp_path_factory, "split"), _server(tmp_path_factory, "whole")
    with served(split[0]) as split_base, served(whole[0]) as whole_base:
        yield {
            "split": {"quill": split[0], "home": split[1], "token": split[2], "base": split_base},
            "whole": {"quill": whole[0], "home": whole[1], "token": whole[2], "base": whole_base},
        }


#: Message fields that differ between two stores by nature: ``message_id`` is the store's
#: numbering of messages in arrival order over all sessions (a client's id is ``id``).
STORE_IDS = ("message_id",)


def _sessions(svc: dict, spans, ignore=STORE_IDS) -> dict:
    """Every session the export's conversations made, read back whole (the audit view)
    but for the message fields in ``ignore``."""
    svc["quill"].drain()
    client = Client(home=str(svc["home"]))
    convs = sorted(
        {s.attributes["gen_ai.conversation.id"] for s in spans if s.name.startswith("chat")}
    )
    out = {}
    for conv in convs:
        sid = f"otlp:{conv}"
        got = client.transcript(sid, view="audit")
        session = {
            k: got["session"].get(k)
            for k in ("parent_id", "parent_kind", "meta", "model", "source", "started_at")
        }
        messages = [{k: v for k, v in m.items() if k not in ignore} for m in got["messages"]]
        out[sid] = {
            "session": session,
            "messages": messages,
            "context": got["context"],
            "usage": client.usage(session_id=sid),
        }
    return out


def _diff(a, b, path: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ (paths and both values), for the failure message."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d
            for k in sorted(set(a) | set(b), key=str)
            for d in _diff(a.get(k), b.get(k), f"{path}.{k}")
        ]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def _caller(tool, spans):
    """The chat span whose output makes ``tool``'s call (by its call id), or None."""
    call = tool.attributes.get("gen_ai.tool.call.id")
    return next(
        (s for s in spans if call and call in str(s.attributes.get("gen_ai.output.messages"))),
        None,
    )


def _pieces(spans, rng: random.Random, *, calls_first: bool) -> list[list]:
    """``spans`` shuffled and cut into random pieces (requests), a random third of them sent
    again anywhere after their first send (a retry). ``calls_first``: a tool span never
    travels in a request before the one holding the chat span that made its call (an
    exporter sends each span as it ends, and the call's span ends first)."""
    order = list(spans)
    rng.shuffle(order)
    pieces, i = [], 0
    while i < len(order):
        size = rng.randint(1, max(1, len(order) // 2))
        pieces.append(order[i : i + size])
        i += size
    if calls_first:
        where = {id(s): k for k, piece in enumerate(pieces) for s in piece}
        for k, piece in enumerate(pieces):
            for tool in list(piece):
                caller = _caller(tool, spans)
                if caller is not None and where[id(caller)] > k:
                    piece.remove(tool)
                    target = rng.randint(where[id(caller)], len(pieces) - 1)
                    pieces[target].insert(rng.randint(0, len(pieces[target])), tool)
                    where[id(tool)] = target
        pieces = [p for p in pieces if p]
    sent = list(pieces)
    for piece in pieces:
        if rng.random() < 1 / 3:
            first = next(k for k, p in enumerate(sent) if p is piece)
            sent.insert(rng.randint(first + 1, len(sent)), piece)
    return sent


def _send(svc: dict, pieces, rng: random.Random) -> None:
    """Each piece by the real protobuf exporter or as OTLP JSON, gzip or not, at random."""
    for piece in pieces:
        if rng.random() < 0.5:
            out = exporter(svc["base"], svc["token"], gzip_=rng.random() < 0.5)
            assert out.export(piece) is SpanExportResult.SUCCESS
        else:
            resp = post_json(svc["base"], svc["token"], piece, gzip_=rng.random() < 0.5)
            assert resp.status_code == 200, resp.text


def _split_equals_whole(servers, seed: int, *, calls_first: bool, ignore=STORE_IDS) -> None:
    rng = random.Random(seed)
    prompts = PROMPTS[: rng.randint(2, len(PROMPTS))]
    history, spans = run_agent(prompts)
    whole = servers["whole"]
    assert exporter(whole["base"], whole["token"]).export(spans) is SpanExportResult.SUCCESS
    pieces = _pieces(spans, rng, calls_first=calls_first)
    assert len(pieces) > 1
    _send(servers["split"], pieces, rng)
    expected = _sessions(whole, spans, ignore)
    got = _sessions(servers["split"], spans, ignore)
    assert len(expected) == 2  # the main conversation and the delegate helper's
    main = next(s for s in expected.values() if s["session"]["parent_id"] is None)
    assert len(main["messages"]) >= 4 * len(prompts)  # user, call, result, answer per prompt
    assert got == expected, f"seed {seed}, {len(pieces)} requests: {_diff(got, expected)[:10]}"


@pytest.mark.parametrize("seed", SEEDS)
def test_any_split_and_order_of_an_export_equals_the_export_in_one_request(servers, seed):
    _split_equals_whole(servers, seed, calls_first=True)


def test_message_times_do_not_depend_on_which_span_arrives_first(servers):
    """Seed 1 sends the last chat span first: it repeats the whole history, stamped with its
    own (later) start; the earlier spans, arriving later, give each message its own time."""
    _split_equals_whole(servers, 1, calls_first=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_tool_span_delivered_before_its_call_is_stored_in_its_place(servers, seed):
    """Without the exporter's order: a tool span may travel before every chat span holding
    its call (seed 0 does so), and the chat spans before the history they extend."""
    _split_equals_whole(servers, seed, calls_first=False)


def test_an_outputs_finish_reason_survives_its_repeat_arriving_first(servers):
    """The older event form's spans (a chat span whose choice has ``finish_reason``
    ``tool_calls``, the tool span, a chat span repeating that call as an input, without it),
    each in its own request, last first: the same transcript as one request, finish reason,
    times and all."""
    spans = _event_form_spans()
    sid = f"otlp:{spans[0].context.trace_id:032x}"  # no conversation id: the trace
    whole, split = servers["whole"], servers["split"]
    assert exporter(whole["base"], whole["token"]).export(spans) is SpanExportResult.SUCCESS
    genai = [s for s in spans if s.attributes.get("gen_ai.operation.name")]
    for span in sorted(genai, key=lambda s: s.start_time, reverse=True):
        assert exporter(split["base"], split["token"]).export([span]) is SpanExportResult.SUCCESS
    got, expected = [], []
    for svc, out in ((split, got), (whole, expected)):
        svc["quill"].drain()
        read = Client(home=str(svc["home"])).transcript(sid, view="audit")
        out.extend({k: v for k, v in m.items() if k != "message_id"} for m in read["messages"])
        out.append(read["context"])
    assert got == expected, _diff(got, expected)
    assert [m.get("finish_reason") for m in got[:-1]] == [None, None, "tool_calls", None, "stop"]


def _strace(pid: int, out) -> subprocess.Popen:
    """``strace`` attached to every thread of ``pid``, logging its ``fdatasync`` calls and
    socket writes (paths and peers shown) to ``out``, once attached."""
    proc = subprocess.Popen(
        ["strace", "-f", "-qq", "-y", "-s", "16", "-o", str(out), "-p", str(pid)]
        + ["-e", "trace=fdatasync,write,writev,sendto,sendmsg"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while _tracer_of(pid) != proc.pid:
        if proc.poll() is not None:
            pytest.skip(f"strace cannot attach here: {proc.stderr.read().strip()}")
        assert time.monotonic() < deadline, "strace did not attach"
        time.sleep(0.05)
    time.sleep(0.5)  # -f attaches the process's other threads after the first
    return proc


def _tracer_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("TracerPid:"))


def _listener(port: int) -> int:
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            return conn.pid
    raise AssertionError(f"nothing listens on {port}")


def test_one_export_is_made_durable_by_one_fdatasync_before_the_200(servers, tmp_path):
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed: the server's fdatasync calls cannot be counted")
    svc = servers["split"]
    history, spans = run_agent(PROMPTS)
    body = encode_spans(spans).SerializeToString()
    pid = _listener(int(svc["base"].rsplit(":", 1)[1]))
    trace = tmp_path / "strace.txt"
    tracer = _strace(pid, trace)
    try:
        import httpx

        resp = httpx.post(
            f"{svc['base']}/v1/traces",
            content=body,
            headers={
                "Authorization": f"Bearer {svc['token']}",
                "Content-Type": "application/x-protobuf",
            },
            timeout=60,
        )
    finally:
        tracer.terminate()
        tracer.wait(timeout=30)
    assert resp.status_code == 200, resp.text
    lines = trace.read_text().splitlines()
    spool = str(svc["home"] / "spool") + "/"
    syncs = [i for i, line in enumerate(lines) if "fdatasync(" in line and spool in line]
    answer = [i for i, line in enumerate(lines) if "HTTP/1.1 200" in line]
    assert answer, lines[-20:]
    # The export makes several ops (sessions, each chat span's messages, usage, the child);
    # before, each was its own fsync'd append.
    assert len(syncs) == 1, [lines[i] for i in syncs]
    # strace prints a call that another thread interrupted as "PID ... <unfinished ...>" and
    # its return as "PID <... fdatasync resumed>": the sync has returned at that line.
    [at] = syncs
    done = at
    if "<unfinished" in lines[at]:
        tid = lines[at].split()[0]
        done = next(
            i
            for i in range(at + 1, len(lines))
            if lines[i].startswith(tid + " ") and "fdatasync resumed>" in lines[i]
        )
    assert done < answer[0], "the 200 was written before the spool's fdatasync returned"
