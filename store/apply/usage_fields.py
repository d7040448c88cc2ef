"""A model call's usage as producers send it: normalising the token shapes of each provider and
the content rules of the attributes beside it (model, provider, response_id, task). Pure: no
store access; ``store.apply.usage`` writes the rows, ``store.apply.checks`` and
``store.apply.precheck`` check ops with these rules.

Token fields, after normalising (the convention of the ``genai-prices`` package, which prices
them): ``input_tokens`` = every prompt token *including* cache reads and cache writes;
``cache_read_tokens`` and ``cache_write_tokens`` are parts of it; ``output_tokens`` includes
``reasoning_tokens``. Shapes accepted as sent:

* Quill's own: ``input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
  reasoning_tokens``;
* Anthropic: ``input_tokens`` (uncached only), ``cache_creation_input_tokens``,
  ``cache_read_input_tokens``, ``output_tokens``;
* OpenAI chat: ``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details.cached_tokens``,
  ``completion_tokens_details.reasoning_tokens``;
* OpenAI Responses / Codex: ``input_tokens`` (cached included), ``input_tokens_details
  .cached_tokens`` or ``cached_input_tokens``, ``output_tokens``, ``output_tokens_details
  .reasoning_tokens`` or ``reasoning_output_tokens``;
* Gemini ``usageMetadata`` (camelCase as the REST API sends it, snake_case as the Python SDK
  does): ``promptTokenCount`` (cached included) plus ``toolUsePromptTokenCount``,
  ``cachedContentTokenCount``, ``candidatesTokenCount`` and ``thoughtsTokenCount`` — a
  thinking model's thoughts are billed as output *beside* the candidates, so output is their
  sum and reasoning the thoughts.

A usage object in none of these shapes (no key any of them has) is refused as
``invalid-usage``: a shape Quill cannot read is never recorded as zero tokens.
"""

from __future__ import annotations

import time
from typing import Any

from quill.spool.record import MAX_ID_CHARS, id_size_problem
from quill.store.apply.normalize import timestamp
from quill.store.apply.rules import no_nul, opt, session_id
from quill.store.errors import InvalidOpError

TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
#: Tasks producers are told about; any other short name is accepted (a new kind of call must
#: not be refused) but must be a plain identifier.
TASKS = ("turn", "compression", "title", "background_review", "auxiliary", "embedding")
_QUILL_KEYS = frozenset({"cache_read_tokens", "cache_write_tokens", "reasoning_tokens"})
_ANTHROPIC_KEYS = frozenset(
    {"cache_creation_input_tokens", "cache_read_input_tokens", "cache_creation"}
)
#: Gemini ``usageMetadata`` keys, as the REST API (camelCase) and the SDK (snake_case) spell them.
_GEMINI = {
    name: (camel, snake)
    for name, camel, snake in (
        ("prompt", "promptTokenCount", "prompt_token_count"),
        ("tool_prompt", "toolUsePromptTokenCount", "tool_use_prompt_token_count"),
        ("cached", "cachedContentTokenCount", "cached_content_token_count"),
        ("candidates", "candidatesTokenCount", "candidates_token_count"),
        ("thoughts", "thoughtsTokenCount", "thoughts_token_count"),
        ("total", "totalTokenCount", "total_token_count"),
    )
}
_GEMINI_KEYS = frozenset(k for pair in _GEMINI.values() for k in pair)
#: Keys the Responses/Codex shape (the fall-through) needs at least one of.
_PLAIN_KEYS = frozenset({"input_tokens", "output_tokens"})
_MAX_TOKENS = 1 << 40  # ~1e12 tokens in one call is a producer bug, not a bill


def _count(obj: Any, *path: str) -> int:
    """A non-negative integer at ``path`` in ``obj`` (absent/None = 0), else ``invalid-usage``."""
    for key in path:
        if not isinstance(obj, dict):
            return 0
        obj = obj.get(key)
    if obj is None:
        return 0
    if (
        isinstance(obj, bool)
        or not isinstance(obj, (int, float))
        or obj != obj
        or obj < 0
        or obj > _MAX_TOKENS
    ):
        raise InvalidOpError(
            "invalid-usage",
            f"usage field {'.'.join(path)!r} must be a non-negative token count, got {obj!r}",
        )
    if isinstance(obj, float) and not obj.is_integer():
        raise InvalidOpError(
            "invalid-usage", f"usage field {'.'.join(path)!r} must be a whole number, got {obj!r}"
        )
    return int(obj)


def normalize_usage(raw: Any) -> dict[str, int]:
    """The ``TOKEN_FIELDS`` counts of a usage object in any accepted shape (module doc).

    Raises ``InvalidOpError('invalid-usage')`` for a non-object, a negative or non-integer
    count, or parts larger than their whole (cache > input, reasoning > output).
    """
    if not isinstance(raw, dict):
        raise InvalidOpError("invalid-usage", f"usage must be an object, got {type(raw).__name__}")
    keys = raw.keys()
    if keys & _QUILL_KEYS:
        out = {f: _count(raw, f) for f in TOKEN_FIELDS}
    elif keys & _ANTHROPIC_KEYS:
        read, write = (
            _count(raw, "cache_read_input_tokens"),
            _count(raw, "cache_creation_input_tokens"),
        )
        out = {
            "input_tokens": _count(raw, "input_tokens") + read + write,
            "output_tokens": _count(raw, "output_tokens"),
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "reasoning_tokens": 0,
        }
    elif "prompt_tokens" in keys or "completion_tokens" in keys:
        out = {
            "input_tokens": _count(raw, "prompt_tokens"),
            "output_tokens": _count(raw, "completion_tokens"),
            "cache_read_tokens": _count(raw, "prompt_tokens_details", "cached_tokens"),
            "cache_write_tokens": 0,
            "reasoning_tokens": _count(raw, "completion_tokens_details", "reasoning_tokens"),
        }
    elif keys & _GEMINI_KEYS:
        out = _gemini(raw)
    elif not keys & _PLAIN_KEYS:
        shown = ", ".join(sorted(map(str, keys))[:8]) or "none"
        raise InvalidOpError(
            "invalid-usage",
            f"usage shape not recognised (keys: {shown}); send Quill's, OpenAI's, "
            "Anthropic's or Gemini's token fields (docs/ops.md)",
        )
    else:  # OpenAI Responses / Codex (and the plain {input_tokens, output_tokens} both share)
        out = {
            "input_tokens": _count(raw, "input_tokens"),
            "output_tokens": _count(raw, "output_tokens"),
            "cache_read_tokens": (
                _count(raw, "input_tokens_details", "cached_tokens")
                or _count(raw, "cached_input_tokens")
            ),
            "cache_write_tokens": 0,
            "reasoning_tokens": (
                _count(raw, "output_tokens_details", "reasoning_tokens")
                or _count(raw, "reasoning_output_tokens")
            ),
        }
    if out["cache_read_tokens"] + out["cache_write_tokens"] > out["input_tokens"]:
        raise InvalidOpError("invalid-usage", "cache tokens exceed input tokens")
    if out["reasoning_tokens"] > out["output_tokens"]:
        raise InvalidOpError("invalid-usage", "reasoning tokens exceed output tokens")
    return out


def _gemini(raw: dict) -> dict[str, int]:
    """Gemini ``usageMetadata`` (module doc) as ``TOKEN_FIELDS`` counts."""

    def count(name: str) -> int:
        camel, snake = _GEMINI[name]
        return _count(raw, camel if camel in raw else snake)

    thoughts = count("thoughts")
    return {
        "input_tokens": count("prompt") + count("tool_prompt"),
        "output_tokens": count("candidates") + thoughts,
        "cache_read_tokens": count("cached"),
        "cache_write_tokens": 0,
        "reasoning_tokens": thoughts,
    }


def _id_text(value: Any, key: str) -> str | None:
    """An id attribute (``response_id``): ``_text`` within the id limits of every store
    (``spool.record.id_size_problem``). Raises ``InvalidOpError('invalid-field')``."""
    text = _text(value, key, MAX_ID_CHARS)
    problem = None if text is None else id_size_problem(text, repr(key))
    if problem:
        raise InvalidOpError("invalid-field", problem)
    return text


def _text(value: Any, key: str, limit: int = 256) -> str | None:
    if value is None:
        return None
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not text or len(text) > limit or "\x00" in text:
        # PostgreSQL text cannot hold NUL (op_common.no_nul)
        raise InvalidOpError(
            "invalid-field",
            f"{key!r} must be a non-empty string of at most {limit} characters without NUL",
        )
    return text


def check_task(task: str) -> None:
    """Raise ``InvalidOpError('invalid-field')`` unless ``task`` is a plain identifier of at
    most 64 characters."""
    if not task.replace("_", "").isalnum() or len(task) > 64:
        raise InvalidOpError(
            "invalid-field", f"task must be an identifier such as {', '.join(TASKS)}"
        )


def check_call(holder: dict) -> dict[str, Any]:
    """The content rules of one model call's usage: the attributes beside it (``fields``),
    the usage object (``normalize_usage``), the task name, in the order ``record`` meets
    them. ``holder`` is a message carrying ``usage`` (or its ``extra``) or a ``usage.record``
    op's data. Returns the attributes (model not defaulted). Raises ``InvalidOpError``
    (``invalid-field``, ``invalid-usage``). Shared by ``store.apply.precheck`` and the writer
    (``store.apply.checks``)."""
    attrs = fields(holder)
    normalize_usage(holder.get("usage"))
    check_task(attrs["task"])
    return attrs


def check_usage_record(data: dict) -> tuple[str, str | None, dict[str, Any]]:
    """``usage.record``'s content rules (``store.apply.checks.CHECKS``): ``usage`` present,
    ``source`` and ``message_ext_id`` strings, ``ts`` a readable time, then ``check_call``.
    Returns ``(session id, source, attributes)``. Raises ``InvalidOpError``
    (``invalid-session-id``, ``invalid-usage``, ``invalid-field``)."""
    sid = session_id(data)
    if "usage" not in data:
        raise InvalidOpError("invalid-usage", "usage.record needs a 'usage' object")
    source = opt(data, "source", str)
    no_nul(data, "source")
    opt(data, "message_ext_id", str)
    timestamp(data.get("ts"), time.time())  # present but unreadable: refused before the ack
    return sid, source, check_call(data)


def usage_holder(msg: dict) -> dict:
    """Where a message's usage attributes are: the message itself, or — when it has no
    ``usage`` key — its ``extra`` object (imports and exports keep unknown fields there; both
    are stored as the same ``extra``)."""
    if "usage" in msg or not isinstance(msg.get("extra"), dict):
        return msg
    return msg["extra"]


def carries_usage(msg: Any) -> bool:
    """Whether a message dict has a ``usage`` (on it or in its ``extra``)."""
    return isinstance(msg, dict) and usage_holder(msg).get("usage") is not None


def fields(holder: dict, default_model: str | None = None) -> dict[str, Any]:
    """The optional usage attributes of a message or op: model, provider, response_id, task.
    Raises ``InvalidOpError('invalid-field')``."""
    return {
        "model": _text(holder.get("model"), "model") or default_model,
        "provider": _text(holder.get("provider"), "provider"),
        "response_id": _id_text(holder.get("response_id"), "response_id"),
        "task": _text(holder.get("task"), "task", 64) or "turn",
    }
