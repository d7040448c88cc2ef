"""The OpenAI Agents SDK session protocol on Quill: swap ``SQLiteSession`` for ``QuillSession``.

::

    from quill.integrations.openai_agents import QuillSession
    result = await Runner.run(agent, "hi", session=QuillSession("conversation-1"))

Each SDK item becomes one Quill message (so search, the display view and maintenance work on
it): role, text and tool columns are derived from the item — ``function_call`` and
``custom_tool_call`` → an assistant message with one tool call, ``function_call_output`` and
``custom_tool_call_output`` → a ``tool`` message (the writer names it from its call, even one
added in an earlier batch: ``store.apply.tool_names``), ``reasoning`` → an
assistant message whose ``reasoning`` is the summary — and the item itself is kept verbatim in
the message's ``openai_agents_item`` field, which is what ``get_items`` returns. Item ids are
*not* used as Quill message ids: the SDK reuses them (``assistant_message()``'s
``"scripted-message"``). Items other producers wrote in chat shape are converted back.

Contract (the SDK's ``memory/session.py`` docstrings):

* ``add_items(items)`` is one ``messages.append`` op — one batch, all or nothing, in the
  caller's order — and returns once the writer applied it (read-your-writes: the next
  ``get_items``, in any process, sees it). Needs a running fleet (``quill run``): when
  nothing drains the spool — no fleet (nor writer) for ``writer_grace`` seconds (2 s: a
  fleet starting or a writer restarting is waited for), or a halted writer — it raises
  ``quill.NotDrainingError`` at once, saying which, instead of waiting out ``wait_timeout``;
  a writer that runs but has not applied the batch within ``wait_timeout`` seconds raises
  ``quill.WaitTimeoutError`` (``NotDrainingError`` is one too). Either way the batch is
  durable in the spool and is applied once a writer runs: never append it again (batch
  ids make a retry of the same items a second batch). A refused batch raises
  ``quill.QuarantinedError`` with the reason. ``pop_item`` and ``clear_session`` wait alike.
* ``get_items(limit)`` returns the latest ``limit`` live items oldest first (``None``: the
  session settings' limit, else all). A limit ≤ 0 returns ``[]`` (like the SDK's Redis session
  and ``SimpleListSession``).
* ``pop_item()`` never deletes: the newest live item is *rewound* (kept for audit, search
  with ``--audit``) by a ``messages.replace`` guarded by the head's id, so two concurrent
  pops never return the same item (the loser's op is refused — ``stale-head`` / ``not-live``,
  kept in the quarantine — and it looks again).
* ``clear_session()`` never deletes: every live item is rewound; the session id stays, and
  the next ``add_items`` continues it as a fresh conversation.
* ``_get_compaction_snapshot(limit)``: the private hook through which the SDK's
  ``OpenAIResponsesCompactionSession`` compacts automatically, as on its own sessions. Its
  ``replace_suffix`` is one ``messages.replace`` guarded by the head's id: the replaced
  items are rewound (kept for audit) and the compacted output appended, or nothing changes
  when the session moved since the read. The wrapper's manual path (``clear_session`` +
  ``add_items(compacted)``) is likewise a rewind plus new items.

Each message gets a producer id (``EXT_PREFIX`` + hex) and the ops name rows by it
(``from_ext_id``, ``expect_head_ext_id``), never by store id: store ids are the applying
store's own, and a spool replayed into another store keeps only what the spool holds.

Two SDK runs on one session at once interleave at batch granularity (the SDK reads history
once per run); Quill keeps both runs' batches whole and ordered.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

try:
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except (
    ImportError
) as exc:  # the SDK is the caller's dependency, not Quill's (pip install -e . lacks it)
    raise ImportError(
        "quill.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'openai-agents>=0.21' (a Quill checkout: pip install -e '.[agents]')",
        name=exc.name,
    ) from exc

try:  # SDK >= 0.24 converts and checks a dict of settings as its own sessions do
    from agents.memory.session_settings import coerce_session_settings
except ImportError:  # older SDKs: a dict of SessionSettings' fields

    def coerce_session_settings(value: Any) -> SessionSettings:
        return SessionSettings(**value) if isinstance(value, dict) else value


try:  # SDK >= 0.24: the hook through which OpenAIResponsesCompactionSession compacts a suffix
    from agents.memory.session import _CompactionSnapshot
except ImportError:  # older SDKs compact by clear_session + add_items only
    _CompactionSnapshot = None

from quill.ops.client.aclient import AsyncClient
from quill.ops.client.errors import NotFoundError, QuarantinedError
from quill.ops.client.wait import WRITER_GRACE_S

#: The message field that keeps the SDK item verbatim.
ITEM_FIELD = "openai_agents_item"
#: Prefix of the producer id (``ext_id``) each message gets: pops and compactions name rows by
#: it, not by store id, so they replay as they applied into a store that numbers rows
#: differently (a switch to PostgreSQL while other hosts write, a restored dump).
EXT_PREFIX = "openai-agents:"
#: ``pop_item`` retries this many times when another pop (or append) moved the head first.
POP_ATTEMPTS = 20
#: Refusals that mean another producer changed the session between our read and our op (a
#: concurrent pop rewound the head: ``not-live``; something was appended: ``stale-head``).
#: The refused op is quarantined (kept, never applied) and the pop looks again.
_MOVED = ("stale-head", "not-live")


def _text(parts: Any) -> str | None:
    if isinstance(parts, list):
        texts = [
            p.get("text") for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
        return "\n".join(texts) if texts else None
    return parts if isinstance(parts, str) else None


def item_to_message(item: dict[str, Any]) -> dict[str, Any]:
    """One SDK item (``TResponseInputItem``) → one Quill message (docs/ops.md "Message
    objects") carrying the item verbatim in ``ITEM_FIELD``."""
    kind = item.get("type")
    if kind in (None, "message") and isinstance(item.get("role"), str):
        message: dict[str, Any] = {"role": item["role"], "content": item.get("content")}
    elif kind in ("function_call", "custom_tool_call"):
        args = item.get("arguments") if kind == "function_call" else item.get("input")
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": item.get("call_id"),
                    "type": "function" if kind == "function_call" else "custom",
                    "function": {"name": item.get("name"), "arguments": args},
                }
            ],
        }
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        message = {
            "role": "tool",
            "tool_call_id": item.get("call_id"),
            "content": output if isinstance(output, (str, list)) else _text(output),
        }
    elif kind == "reasoning":
        message = {
            "role": "assistant",
            "content": None,
            "reasoning": _text(item.get("summary")) or "",
        }
    else:  # hosted tool calls and outputs, compaction, item references …: kept, not searchable text
        message = {"role": "assistant", "content": None}
    message[ITEM_FIELD] = item
    return message


def message_to_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A Quill message → the SDK item(s) it stands for: the stored item when there is one,
    else the SDK's own mapping of a chat message (tool calls → ``function_call`` items, a
    tool result → ``function_call_output``, other roles → an easy message)."""
    if isinstance(message.get(ITEM_FIELD), dict):
        return [message[ITEM_FIELD]]
    role, content = message.get("role"), message.get("content")
    if role in ("tool", "function"):
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": content if isinstance(content, (str, list)) else "",
            }
        ]
    items: list[dict[str, Any]] = []
    if content not in (None, "", []):
        items.append({"role": role, "content": content})
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": fn.get("name"),
                "arguments": fn.get("arguments") or "{}",
            }
        )
    return items


def _with_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` as Quill messages, each with a fresh producer id (``EXT_PREFIX`` + hex)."""
    return [{**item_to_message(i), "id": EXT_PREFIX + uuid.uuid4().hex} for i in items]


def _named(message: dict[str, Any], id_key: str, ext_key: str) -> dict[str, Any]:
    """The op field naming ``message``: ``ext_key`` = its producer id when this module gave
    it one (unique, carried in the spool), else ``id_key`` = its store id (rows written
    before producer ids were given, or by another producer)."""
    ext = message.get("id")
    if isinstance(ext, str) and ext.startswith(EXT_PREFIX):
        return {ext_key: ext}
    return {id_key: message["message_id"]}


class QuillSession:
    """An Agents SDK session stored in Quill under ``session_id``.

    ``client``: a ``quill.AsyncClient`` (or give ``home``; default ``$QUILL_HOME``).
    ``source``: the Quill session source (listings, prune policy). ``wait_timeout``: seconds
    ``add_items``/``pop_item``/``clear_session`` wait for the writer. ``writer_grace``:
    seconds without a running fleet (or writer) before they raise ``NotDrainingError``
    instead (None: wait out ``wait_timeout`` whatever runs). ``session_settings``: the SDK's
    ``SessionSettings`` (its ``limit`` is ``get_items``' default).
    """

    def __init__(
        self,
        session_id: str,
        *,
        client: AsyncClient | None = None,
        home: str | None = None,
        source: str = "openai-agents",
        wait_timeout: float = 30.0,
        writer_grace: float | None = WRITER_GRACE_S,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ):
        self.session_id = session_id
        # A dict is converted and checked as the SDK's own sessions do (a bad key or value
        # raises here, not later inside Runner.run).
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self.client = client or AsyncClient(home)
        self.source = source
        self.wait_timeout = wait_timeout
        self.writer_grace = writer_grace
        self._closed = False

    def close(self) -> None:
        """Close the session (idempotent): later calls raise ``RuntimeError``, as on the SDK's
        own sessions. Nothing is lost: every item ``add_items`` returned from is durable."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("QuillSession is closed")

    async def _wait(self, ack: Any) -> Any:
        """The outcome of ``ack``'s batch (``AsyncClient.wait``). Raises ``NotDrainingError``
        when nothing drains the spool for ``writer_grace`` s, ``WaitTimeoutError``."""
        return await self.client.wait(ack, self.wait_timeout, without_writer=self.writer_grace)

    async def _applied(self, ack: Any, what: str) -> None:
        outcome = await self._wait(ack)
        if not outcome.applied:
            raise QuarantinedError(
                f"{what} on session {self.session_id!r} was refused: {outcome.reason}: "
                f"{outcome.detail}",
                reason=outcome.reason or "unknown",
                detail=outcome.detail or "",
            )

    async def _live(self, view: str, latest: int | None = None) -> list[dict[str, Any]]:
        try:
            return await self.client.messages(self.session_id, view=view, latest=latest)
        except NotFoundError:
            return []

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The latest ``limit`` items, oldest first (all when ``limit`` and the settings'
        limit are None; ``[]`` when ≤ 0). Deep copies: callers may mutate them."""
        self._check_open()
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        messages = await self._live("model", latest=limit)
        items = [item for m in messages for item in message_to_items(m)]
        return copy.deepcopy(items[-limit:] if limit is not None else items)

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        """Append ``items`` as one batch and return once it is applied. An empty list is a
        no-op. Raises ``quill.InvalidInputError`` (nothing appended), ``QuarantinedError``,
        ``WaitTimeoutError`` (durable; applied when the writer runs)."""
        self._check_open()
        if not items:
            return
        ack = await self.client.append(self.session_id, _with_ids(items), source=self.source)
        await self._applied(ack, "add_items")

    async def pop_item(self) -> dict[str, Any] | None:
        """Rewind the newest live item and return it (``None`` when there is none). Nothing
        is deleted: the item stays in the audit view."""
        self._check_open()
        for _ in range(POP_ATTEMPTS):
            live = [m for m in await self._live("audit") if m.get("state") == "live"]
            if not live:
                return None
            head = live[-1]
            ack = await self.client.replace(
                self.session_id,
                [],
                **_named(head, "from_message_id", "from_ext_id"),
                **_named(head, "expect_head_id", "expect_head_ext_id"),
            )
            outcome = await self._wait(ack)
            if outcome.applied:
                return copy.deepcopy(message_to_items(head)[-1])
            if outcome.reason not in _MOVED:
                raise QuarantinedError(
                    f"pop_item on session {self.session_id!r} was refused: {outcome.reason}",
                    reason=outcome.reason or "unknown",
                    detail=outcome.detail or "",
                )
        raise QuarantinedError(
            f"pop_item on session {self.session_id!r}: the head kept moving",
            reason="stale-head",
            hint="another producer is appending to this session; retry",
        )

    async def _live_rows(self, latest: int) -> list[dict[str, Any]]:
        """The newest ``latest`` live messages with their ids, oldest first (all when the
        session has fewer)."""
        window = await self._live("display", latest=latest)
        if all(m.get("state") == "live" for m in window):
            return window
        # Compacted rows in the window: only the audit view, filtered, is exact.
        return [m for m in await self._live("audit") if m.get("state") == "live"][-latest:]

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[dict[str, Any]], bool] | None = None
    ) -> Any:
        """The SDK's compaction hook (``agents.memory.session._CompactionSnapshot``): the
        newest ``limit`` items, whether they are the whole live history, and
        ``replace_suffix(start, output) -> bool``, which replaces ``items[start:]`` by
        ``output`` in one ``messages.replace`` guarded by ``expect_head_id`` (``False``, nothing
        changed, when the session moved since the read). Nothing is deleted: the replaced
        items are rewound (audit view). ``prune_prefix(item)`` marks the expired items of the
        oldest run of live history: they are rewound in the same op, and the live items
        between them and the suffix are re-appended verbatim ahead of ``output``. ``None``
        (the SDK then reads ``get_items``) for a subclass overriding ``get_items`` or
        ``add_items`` (it may transform items: the hook would bypass that), for an
        SDK without the hook, and when a message stands for other than one item (written by
        another producer in chat shape). Raises ``QuarantinedError`` for any other refusal."""
        self._check_open()
        transforms = (
            type(self).get_items is not QuillSession.get_items
            or type(self).add_items is not QuillSession.add_items
        )
        if transforms or _CompactionSnapshot is None or limit <= 0:
            return None
        rows = await self._live_rows(limit + 1)
        complete = len(rows) <= limit
        rows = rows[-limit:]
        if any(len(message_to_items(m)) != 1 for m in rows):
            return None
        items = [copy.deepcopy(message_to_items(m)[0]) for m in rows]

        async def replace_suffix(start: int, output: list[dict[str, Any]]) -> bool:
            if not rows[start:]:
                return False
            first_row = rows[start]
            first = first_row["message_id"]
            kept: list[dict[str, Any]] = []
            if prune_prefix is not None:
                older = [
                    m
                    for m in await self._live("audit")
                    if m.get("state") == "live" and m["message_id"] < first
                ]
                expired = 0
                for m in older:
                    found = message_to_items(m)
                    if len(found) != 1 or not prune_prefix(found[0]):
                        break
                    expired += 1
                if expired:
                    first_row = older[0]
                    kept = [m[ITEM_FIELD] for m in older[expired:] if ITEM_FIELD in m]
                    if len(kept) != len(older) - expired:  # a chat-shape message: keep all
                        kept, first_row = [], rows[start]
            # An unchanged head means an unchanged live history: every op of one host either
            # appends a new head or rewinds a suffix that includes it. (A row from another
            # host's spool, ordered by its acknowledgement, can land below the head: it is
            # then rewound with the suffix, kept for audit, as with pop_item.)
            ack = await self.client.replace(
                self.session_id,
                _with_ids(kept + list(output)),
                **_named(first_row, "from_message_id", "from_ext_id"),
                **_named(rows[-1], "expect_head_id", "expect_head_ext_id"),
            )
            outcome = await self._wait(ack)
            if outcome.applied:
                return True
            if outcome.reason in _MOVED:
                return False
            raise QuarantinedError(
                f"compaction on session {self.session_id!r} was refused: {outcome.reason}",
                reason=outcome.reason or "unknown",
                detail=outcome.detail or "",
            )

        return _CompactionSnapshot(items, complete, replace_suffix)

    async def clear_session(self) -> None:
        """Rewind every live item (kept for audit): ``get_items`` then returns ``[]``."""
        self._check_open()
        if not await self._live("model", latest=1):
            return
        await self._applied(await self.client.replace(self.session_id, []), "clear_session")
