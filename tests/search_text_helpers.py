"""Shared by the search-text tests (test_search_text_content.py, test_search_text_results.py):
a tool call with any ``arguments`` value, and edit arguments whose words follow JSON escapes."""

from __future__ import annotations

import json


def _call(call_id: str, name: str, args: object) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


ISSUE_ARGS = json.dumps(
    {"new_string": 'first line\nsecondword here\tthirdword "quotedword" plainword'}
)
