"""The message sets every comparison uses.

* ``real_messages()``: every message the importers parse from ``../shared/corpus`` (Claude
  Code, Codex, ShareGPT, OpenAI chat): the real size and role mix (median ~0.9 KB, mean ~2.8 KB,
  tool results and tool calls included). Cycled to reach a size; each repetition gets its own
  message ids so no system can deduplicate its way to a better figure.
* ``synthetic_messages(n)``: a deterministic stream for scale (10k … 1M): ~0.9 KB median,
  Zipf-distributed words over a 30k-word vocabulary, the real role mix, tool calls, and
  planted terms with known frequencies for the search section (``RARE``, ``PHRASE``, ``CJK``,
  ``SUBSTRING``; ``COMMON`` is the most frequent vocabulary word).

``calls(stream, batch, session_len)`` turns a message stream into producer calls
``(session_id, [batch messages])``: sessions of ``session_len`` messages, as agents send them.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

#: The shared corpus next to the checkout (/work/main) or next to a worktree's folder.
CORPUS = next(
    (
        p / "shared" / "corpus"
        for p in Path(__file__).resolve().parents
        if (p / "shared" / "corpus").is_dir()
    ),
    Path(__file__).resolve().parent.parent.parent / "shared" / "corpus",
)

RARE = "zyzzogeton"  # 1 in ~20k messages
PHRASE = "connection refused"  # ~1 %
CJK = "数据库连接失败"  # ~0.5 % (a 7-character CJK term: trigram index)
SUBSTRING = "parsedconf"  # inside the token "reparsedconfig", ~0.2 %
SESSION_LEN = 50  # messages per session in every workload


@functools.lru_cache(maxsize=1)
def real_messages() -> tuple[dict[str, Any], ...]:
    """All messages the importers parse from the shared corpus, in file order."""
    from quill.ops.importers import iter_transcript_files, parse_file

    out: list[dict[str, Any]] = []
    for path in iter_transcript_files([CORPUS]):
        try:
            parsed = parse_file(path)
        except OSError:
            continue
        for s in parsed.sessions:
            out.extend(s.messages)
    if not out:
        raise RuntimeError(f"no messages parsed from {CORPUS}")
    return tuple(out)


def real_stream(n: int, offset: int = 0) -> Iterator[dict[str, Any]]:
    """``n`` real messages starting at ``offset`` (cycled); ids made unique per repetition."""
    base = real_messages()
    for i in range(offset, offset + n):
        m = dict(base[i % len(base)])
        rep = i // len(base)
        if rep and "id" in m:
            m["id"] = f"{m['id']}#{rep}"
        if rep and m.get("tool_call_id"):
            m["tool_call_id"] = f"{m['tool_call_id']}#{rep}"
        if rep and m.get("tool_calls"):
            m["tool_calls"] = [
                dict(tc, id=f"{tc.get('id')}#{rep}") if isinstance(tc, dict) else tc
                for tc in m["tool_calls"]
            ]
        yield m


def real_stats() -> dict[str, Any]:
    msgs = real_messages()
    sizes = sorted(len(json.dumps(m, ensure_ascii=False).encode()) for m in msgs)
    return {
        "messages": len(msgs),
        "median_bytes": sizes[len(sizes) // 2],
        "mean_bytes": round(sum(sizes) / len(sizes)),
        "max_bytes": sizes[-1],
    }


# -- synthetic ---------------------------------------------------------------------------

_SYLL = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "ti",
    "vo",
    "pe",
    "da",
    "go",
    "fu",
    "zen",
    "tor",
    "bel",
    "cor",
    "dex",
    "fin",
    "gal",
    "hex",
    "jin",
    "kor",
    "lum",
    "mar",
    "nix",
    "pol",
    "qua",
    "ren",
]
_ROLES = ["assistant"] * 61 + ["tool"] * 34 + ["user"] * 4 + ["system"]


@functools.lru_cache(maxsize=1)
def _vocab() -> tuple[list[str], list[float]]:
    rng = random.Random(1234)
    words = {"the"}
    ordered = ["the"]
    while len(ordered) < 30_000:
        w = "".join(rng.choice(_SYLL) for _ in range(rng.randint(1, 4)))
        if w not in words and len(w) > 2:
            words.add(w)
            ordered.append(w)
    weights = [1.0 / (r + 1) ** 1.05 for r in range(len(ordered))]
    cum = list(itertools.accumulate(weights))
    return ordered, cum


COMMON = "the"


def synthetic_messages(n: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    """``n`` deterministic synthetic messages (same seed → same messages)."""
    words, cum = _vocab()
    rng = random.Random(seed)
    t0 = 1_700_000_000.0
    for i in range(n):
        k = max(3, min(2500, int(rng.lognormvariate(4.6, 0.9))))  # median ~100 words
        toks = rng.choices(words, cum_weights=cum, k=k)
        if i % 20011 == 7:
            toks.insert(rng.randrange(len(toks)), RARE)
        if i % 97 == 3:
            toks.insert(rng.randrange(len(toks)), PHRASE)
        if i % 499 == 11:
            toks.insert(rng.randrange(len(toks)), "reparsedconfig")
        text = " ".join(toks)
        if i % 211 == 5:
            text += f" 错误：{CJK}，请检查配置。"
        role = _ROLES[i % len(_ROLES)] if i % 50 else "user"
        m: dict[str, Any] = {
            "id": f"syn-{seed}-{i}",
            "role": role,
            "content": text,
            "timestamp": t0 + i * 0.5,
        }
        if role == "assistant" and i % 3 == 0:
            m["tool_calls"] = [
                {
                    "id": f"call-{seed}-{i}",
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "arguments": json.dumps({"cmd": " ".join(toks[:6])}),
                    },
                }
            ]
        if role == "tool":
            m["tool_call_id"] = f"res-{seed}-{i}"
            m["name"] = "bash"
        yield m


# -- producer calls ----------------------------------------------------------------------


def calls(
    stream: Iterable[dict[str, Any]], batch: int, session_len: int = SESSION_LEN, prefix: str = "s"
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Group a message stream into calls of ``batch`` messages, ``session_len`` per session."""
    it = iter(stream)
    s = 0
    while True:
        sid = f"{prefix}{s}"
        left = session_len
        while left > 0:
            chunk = list(itertools.islice(it, min(batch, left)))
            if not chunk:
                return
            yield sid, chunk
            left -= len(chunk)
        s += 1


def text_of(m: dict[str, Any]) -> str:
    """The message text a naive writer stores and indexes (content, or its parts as JSON)."""
    c = m.get("content")
    if isinstance(c, str):
        return c
    return "" if c is None else json.dumps(c, ensure_ascii=False)
