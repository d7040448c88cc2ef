"""What the search indexes hold, as SQL over a message row aliased ``m``: the word index's
columns (``SEARCH_COLUMNS_SQL``, and the search kinds that select them), the scope and text of
the trigram index (``store.schema``'s module doc says why it is scoped), and the decoding of
the tool-call text. The tables themselves are ``store.schema.FTS_DDL``; a change here is a
new ``store.schema.FTS_LAYOUT``.
"""

from __future__ import annotations

import re

from quill.store import packed

#: Roles of tool-result rows: their ``tool_name`` is the tool's name (on other roles ``name`` is
#: a participant's name, not searchable as a tool).
TOOL_RESULT_ROLES = ("tool", "function")
#: Trigram scope (``store.schema``'s module doc): roles indexed, indexed prefix of ``content``.
TRIGRAM_ROLES = ("user", "assistant")
TRIGRAM_PREFIX_CHARS = 2000
#: SQL expression: the text of a row aliased ``m`` (its ``content`` unpacked: ``store.packed``).
CONTENT_SQL = packed.text_sql("m.content")
#: SQLite's trigram index (``messages_trigram``) holds, of a row aliased ``m``:
#: * a packed ``content`` (``store.packed``: a BLOB, never empty), whatever the role: the
#:   whole text. A search then never unpacks a row to learn that it does not hold a term:
#:   unpacking costs ~7 µs a row where ``instr`` over plain text cost ~1 (bench/RESULTS.md);
#: * a plain ``content`` of a ``TRIGRAM_ROLES`` row: its first ``TRIGRAM_PREFIX_CHARS``
#:   characters.
#: The form is read from the stored value's type, so no row is unpacked to decide. Every write
#: that turns a plain text into a packed one re-indexes the row (``jobs.store_jobs.pack_stored``
#: via ``store.sqlite.indexer.reindex_trigram``); a revision re-indexes it anyway.
#: PostgreSQL stores no packed text: its trigram index is the prefix alone (``PREFIX_WHOLE_SQL``).
TRIGRAM_SCOPE_SQL = (
    f"(typeof(m.content) = 'blob' OR m.role IN {TRIGRAM_ROLES!r} "
    "AND m.content IS NOT NULL AND m.content != '')"
)
#: SQL expression: the trigram-indexed text of a row aliased ``m`` in ``TRIGRAM_SCOPE_SQL``.
TRIGRAM_TEXT_SQL = (
    f"CASE WHEN typeof(m.content) = 'blob' THEN {packed.TEXT_FUNCTION}(m.content) "
    f"ELSE substr(m.content, 1, {TRIGRAM_PREFIX_CHARS}) END"
)
#: SQL condition (row ``m``): the trigram index holds the row's whole ``content`` (or it has
#: none to hold), decided without unpacking (SQLite; the layout above).
TRIGRAM_WHOLE_SQL = (
    f"(typeof(m.content) = 'blob' OR m.role IN {TRIGRAM_ROLES!r} "
    f"AND coalesce(length(m.content), 0) <= {TRIGRAM_PREFIX_CHARS})"
)
#: ``TRIGRAM_WHOLE_SQL`` for an index of the prefix alone (PostgreSQL's ``messages_trigram``).
PREFIX_WHOLE_SQL = (
    f"m.role IN {TRIGRAM_ROLES!r} AND coalesce(length({CONTENT_SQL}), 0) <= {TRIGRAM_PREFIX_CHARS}"
)

#: The word index's columns (``messages_fts``), each an SQL expression over a row aliased ``m``:
#: * ``content`` – the message text;
#: * ``tools`` – the tool calls as text: the tool's name on a tool result (``tool_name`` of a
#:   ``TOOL_RESULT_ROLES`` row, so searching ``Bash`` finds the calls and their results) and
#:   every string and number in ``tool_calls`` (names and arguments, not the call ids/types),
#:   with a string that is itself a JSON object or array (OpenAI's ``arguments``) decoded once
#:   more, so words after an escaped newline or tab or inside escaped quotes are words, not
#:   ``nsecondword``;
#: * ``reasoning`` – reasoning/thinking text.
#: The search kinds (``text``/``tool``/``reasoning``) select these columns.
SEARCH_COLUMNS_SQL: dict[str, str] = {
    "content": CONTENT_SQL,
    "tools": f"""(
    SELECT group_concat(CASE WHEN j.type = 'text' AND json_valid(j.atom)
                                  AND json_type(j.atom) IN ('object', 'array')
        THEN (SELECT group_concat(k.atom, ' ') FROM json_tree(j.atom) AS k
              WHERE k.type IN ('text', 'integer', 'real'))
        ELSE j.atom END, ' ')
    FROM (SELECT 'text' AS type, m.tool_name AS atom, '' AS key, '$' AS path
          WHERE m.role IN {TOOL_RESULT_ROLES!r} AND m.tool_name IS NOT NULL
          UNION ALL SELECT type, atom, key, path FROM json_tree(
              CASE WHEN json_valid(m.tool_calls) THEN m.tool_calls ELSE '[]' END)) AS j
    WHERE j.type IN ('text', 'integer', 'real')
      AND NOT (j.key IN ('id', 'type') AND instr(j.path, '.') = 0))""",
    "reasoning": "m.reasoning",
}
#: SQL (row ``m``): non-NULL when the row has a ``tools`` text (tool calls, or a tool result's
#: tool name): a snippet reads that text only then.
HAS_TOOLS_SQL = (
    f"coalesce(m.tool_calls, CASE WHEN m.role IN {TOOL_RESULT_ROLES!r} THEN m.tool_name END)"
)
#: The ``tools`` text as a read returns it: a BLOB, decoded by ``tools_text``. ``json_tree``
#: decodes an escaped lone surrogate in stored argument JSON (``"\\ud83d"``, a cut emoji) into
#: bytes that are not UTF-8, which a strict decode of a TEXT result would raise on.
TOOLS_BLOB_SQL = f"CAST({SEARCH_COLUMNS_SQL['tools']} AS BLOB)"


def tools_text(value: bytes | str | None) -> str | None:
    """A ``TOOLS_BLOB_SQL`` result as text: bytes that are not UTF-8 become U+FFFD (what the
    store's normaliser writes for a lone surrogate), so no stored row can make a read fail."""
    if not isinstance(value, bytes):
        return value
    try:  # a lone surrogate, as SQLite writes it (3 bytes), is one character: one U+FFFD
        text = value.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        text = value.decode("utf-8", "replace")
    return _LONE_SURROGATE.sub("\ufffd", text)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


#: Search kind (API/CLI) → word-index column.
KIND_COLUMNS = {"text": "content", "tool": "tools", "reasoning": "reasoning"}
