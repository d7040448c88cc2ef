"""A substring search merges the trigram index's matches with a scan of the rows the index does
not cover (tool calls and results, long text). When the matches are in covered rows, a page of
hits must read, of the uncovered rows, only those newer than its last hit, not every uncovered
row down to the scan's bound before the merge places its first hit. Rows read are counted by
the database's own counters (SQLite's per-statement VM steps, PostgreSQL's tuples fetched
and returned in the search's transaction), never timed.

And the hits are the ones the scan's bound defines (each scan match within ``SCAN_MAX_ROWS``
rows below the previous one, the first among the newest), checked against a Python oracle of
that rule on random stores with a tiny bound, on both backends."""

from __future__ import annotations

import random

import apsw
import pytest
from semantics_helpers import Store, assistant, call, tool, user

from quill.home import DEFAULTS
from quill.store.postgres import scan_index
from quill.store.postgres import search as pg_search
from quill.store.search import candidates, fence, textfold
from quill.store.search import run as search_mod

OLD_UNCOVERED = 1500  # tool calls and results below the page, none holding the term
PG_BULK = 30_000  # more tool results on PostgreSQL (see _fill)
NEWEST = 60  # newest groups: a covered match, a tool call and its result (no match)
#: What the SQL of the scan's statements holds: the rows' window (its count too), or the test
#: of the rows the trigram index does not cover.
_SCAN_SQL = ("SELECT id FROM messages WHERE id < ?", "NOT (m.role IN", "NOT ((typeof(m.content)")


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _fill(store: Store) -> list[int]:
    """The store of the module doc; returns the ids of the covered matches, newest first."""
    old = []
    for i in range(OLD_UNCOVERED // 2):
        old.append(assistant(None, tool_calls=[call(f"o{i}", "bash", f'{{"cmd": "ls {i}"}}')]))
        old.append(tool(f"o{i}", f"listing {i}: a.txt b.txt"))
    assert store.apply("messages.append", {"session_id": "s", "messages": old}) == []
    if store.kind == "postgres":
        # PostgreSQL plans a table this small as one sequential scan whatever the query reads;
        # with PG_BULK more tool results (bulk SQL: the writer would take minutes) it walks the
        # key as on a real store.
        store.conn.execute("INSERT INTO batches (batch_id) VALUES ('bulk')")
        store.conn.execute(
            "INSERT INTO messages (session_id, role, content, tool_name, ts, arrived_at, state, "
            "batch, pos, seq) SELECT 's', 'tool', 'listing ' || g, 'bash', g, g, 'live', "
            "(SELECT id FROM batches WHERE batch_id = 'bulk'), g, g "
            "FROM generate_series(100000, 100000 + ? - 1) AS g",
            (PG_BULK,),
        )
    new = []
    for i in range(NEWEST):
        new.append(user(f"please check the parsedconf setting {i}"))
        new.append(assistant(None, tool_calls=[call(f"n{i}", "bash", f'{{"cmd": "cat {i}"}}')]))
        new.append(tool(f"n{i}", f"contents {i}"))
    assert store.apply("messages.append", {"session_id": "s", "messages": new}) == []
    store.index()
    if store.kind == "postgres":
        store.conn.execute("VACUUM ANALYZE messages")
    return [
        r[0]
        for r in store.conn.execute(
            "SELECT id FROM messages WHERE role = 'user' ORDER BY id DESC"
        ).fetchall()
    ]


def _read(store: Store, text: str) -> tuple[int, list[int]]:
    """(rows the search read by the backend's counter, hit ids) of a substring search."""
    if store.kind == "postgres":
        # Rows read from the table and its indexes (an index scan counts its heap fetches on
        # the index). The counters hold what this backend has not yet reported (earlier
        # transactions too): the search's rows are the difference, inside one transaction.
        conn = store.conn
        counter = (
            "SELECT sum(pg_stat_get_xact_tuples_fetched(r) + pg_stat_get_xact_tuples_returned(r))"
            " FROM (SELECT 'messages'::regclass::oid AS r UNION ALL SELECT indexrelid FROM "
            "pg_index WHERE indrelid = 'messages'::regclass) AS t"
        )
        conn.execute("BEGIN")
        try:
            before = conn.execute(counter).fetchone()[0]
            hits = pg_search.search(conn, text, substring=True, limit=20, context=False)
            read = conn.execute(counter).fetchone()[0] - before
        finally:
            conn.execute("COMMIT")
        return read, [h["message_id"] for h in hits]
    steps = []

    def profile(event: dict) -> None:
        if any(part in event["sql"] for part in _SCAN_SQL):
            steps.append(event["stmt_status"]["SQLITE_STMTSTATUS_VM_STEP"])

    store.conn.trace_v2(apsw.SQLITE_TRACE_PROFILE, profile, id="fenced-scan-test")
    try:
        hits = search_mod.search(store.conn, text, substring=True, limit=20, context=False)
    finally:
        store.conn.trace_v2(0, None, id="fenced-scan-test")
    return sum(steps), [h["message_id"] for h in hits]


def test_a_page_of_covered_matches_reads_only_the_uncovered_rows_above_it(store, monkeypatch):
    # On PostgreSQL, the scan as it runs before its index (``scan_index``) is built: with the
    # index, no uncovered row without the term is read at all (tests/test_pg_scan_index.py).
    monkeypatch.setattr(scan_index, "usable", lambda conn: False)
    matches = _fill(store)
    everything, none = _read(store, "zzqqxxyy")  # no match anywhere: the scan reads every row
    assert none == [] and everything > 0
    read, hits = _read(store, "parsedconf")
    assert hits == matches[:20]
    # The page's 20 hits span about 60 of the 1,620 rows: reading every uncovered row (the
    # unfenced scan asked for 20 matches that are not there) costs as much as no match does.
    assert read * 10 < everything, (read, everything)


def _tools_text(msg: dict) -> str:
    """The tool text of a generated message (tool name of a result; a call's name and
    argument values), enough for the oracle: the term never occurs in it."""
    if msg["role"] == "tool":
        return msg["name"]
    return " ".join(c["function"]["name"] for c in msg.get("tool_calls") or [])


def _oracle(
    msgs: list[dict], ids: list[int], term: str, bound: int, limit: int, packs: bool
) -> list[int]:
    """The hits the rule defines: covered matches (the index) and the scan's matches among
    uncovered rows, each within ``bound`` rows below the previous (the first within the newest
    ``bound`` rows), merged newest first. ``packs``: SQLite, whose trigram index holds a
    packed text (``pack_min_bytes`` or more) whole, whatever its role, and whose scan leaves
    a one-term query's match in a packed text to the index."""
    folded = textfold.fold(term)
    index, scan = set(), []
    for pos, (mid, m) in enumerate(sorted(zip(ids, msgs), key=lambda p: -p[0])):
        content = m.get("content") or ""
        is_packed = packs and len(content.encode()) >= DEFAULTS.pack_min_bytes
        whole = is_packed or m["role"] in ("user", "assistant") and len(content) <= 2000
        covered = whole and not m.get("tool_calls") and m["role"] != "tool"
        indexed = content if is_packed else content[:2000]
        if (is_packed or m["role"] in ("user", "assistant")) and folded in textfold.fold(indexed):
            index.add(mid)
        scanned = ("" if is_packed else content) + " " + _tools_text(m)
        if not covered and folded in textfold.fold(scanned):
            scan.append((pos, mid))
    chained, last = [], -1
    for pos, mid in scan:
        if pos - last > bound:
            break
        chained.append(mid)
        last = pos
    return sorted(index | set(chained), reverse=True)[:limit]


def _random_messages(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        hit = rng.random() < 0.25
        text = f"row {i} " + ("the parsedconf value" if hit else "nothing here")
        kind = rng.choice(["user", "assistant", "long", "call", "tool"])
        if kind == "user":
            out.append(user(text))
        elif kind == "assistant":
            out.append(assistant(text))
        elif kind == "long":  # past the trigram prefix: scanned, its match far from the start
            out.append(assistant("x" * 2100 + " " + text))
        elif kind == "call":
            out.append(assistant(text, tool_calls=[call(f"c{i}", "bash", '{"cmd": "ls"}')]))
        else:
            out.append(tool(f"c{i}", text))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_hits_follow_the_scan_bound_on_random_stores(store, seed, monkeypatch):
    rng = random.Random(seed)
    msgs = _random_messages(rng, 120)
    assert store.apply("messages.append", {"session_id": "s", "messages": msgs}) == []
    store.index()
    ids = [r[0] for r in store.conn.execute("SELECT id FROM messages ORDER BY id").fetchall()]
    search = pg_search.search if store.kind == "postgres" else search_mod.search
    for bound in (1, 3, 8, 200):
        monkeypatch.setattr(candidates, "SCAN_MAX_ROWS", bound)
        for limit in (1, 5, 40):
            got = search(
                store.conn,
                "parsedconf",
                substring=True,
                limit=limit,
                context=False,
                projection="audit",
            )
            want = _oracle(msgs, ids, "parsedconf", bound, limit, store.kind == "sqlite")
            assert [h["message_id"] for h in got] == want, (bound, limit)


def _chain(ids: list[int], hits: set[int], bound: int) -> list[int]:
    """The scan's rule over ``ids`` (newest first): each match within ``bound`` rows below
    the previous one, the first within the newest ``bound``."""
    out, last = [], -1
    for pos, i in enumerate(ids):
        if i in hits:
            if pos - last > bound:
                break
            out.append(i)
            last = pos
    return out


@pytest.mark.parametrize("seed", range(200))
def test_a_scan_read_down_to_any_fences_finds_what_its_bound_allows(seed):
    """``fence.Scan`` on its own contract (``fetch``/``count`` over a list of ids with gaps,
    as the SQL windows answer them): whatever fences it is read down to, in whatever steps
    and batch sizes, it yields the rows of the rule, newest first, each once."""
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(1, 400), rng.randint(0, 120)), reverse=True)
    hits = {i for i in ids if rng.random() < rng.choice((0.02, 0.2, 0.6))}
    bound = rng.choice((1, 2, 5, 17, 1000))
    calls = []

    def fetch(below: int, lo: int, n: int, cap: int) -> list[tuple]:
        window = [i for i in ids if lo <= i < below][:cap]
        calls.append((below, lo))
        return [(i, i, "s") for i in window if i in hits][:n]

    def count(below: int, lo: int, cap: int) -> int:
        return min(cap, sum(1 for i in ids if lo <= i < below))

    scan = fence.Scan(
        fetch, count, top=max(ids, default=0), first=rng.choice((1, 2, 20)), max_rows=bound
    )
    got: list[int] = []
    fences = sorted(rng.sample(range(0, 401), rng.randint(0, 8)), reverse=True) + [0]
    for f in fences:
        rows = list(scan.above(f))
        assert all(r[0] >= f for r in rows)
        got += [r[0] for r in rows]
    assert got == _chain(ids, hits, bound)
    # Reads stay above the fences: no window goes below the fence it was read for.
    assert all(lo in fences for _below, lo in calls)
