"""The dashboard's Jinja2 templates (``ops/service/templates``) and the filters and globals
its pages use: times, numbers, dollars, message text, pretty JSON, highlighted snippets.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape

from quill.ops.service.formats import human_number, usd

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))


def _when(ts: Any) -> str:
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M")


def highlight(snippet: str, spans: list[list[int]] | None) -> Markup:
    """``snippet`` HTML-escaped with each ``[start, end)`` character span of the search hit's
    ``highlights`` (computed by the store's search, which knows how it matched) in <mark>."""
    out, at = [], 0
    for start, end in sorted(spans or []):
        if start < at or end > len(snippet) or start >= end:
            continue  # overlapping or out of range: never cut the text
        out += [str(escape(snippet[at:start])), f"<mark>{escape(snippet[start:end])}</mark>"]
        at = end
    out.append(str(escape(snippet[at:])))
    return Markup("".join(out))


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(
            p.get("text", f"<{p.get('type')}>") if isinstance(p, dict) else str(p) for p in content
        )
    return "" if content is None else str(content)


templates.env.filters["when"] = _when
templates.env.filters["num"] = human_number
templates.env.filters["usd"] = usd
templates.env.filters["text"] = _text
templates.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
templates.env.globals["highlight"] = highlight
