"""Click parameter types the command modules share: text from any bytes (``UTF8``), a time as
epoch seconds or an ISO date (``EPOCH``) and a yes/no filter (``YESNO``)."""

from __future__ import annotations

import datetime as dt
import math
import os
from typing import Any

import click


class Utf8Text(click.ParamType):
    """A text argument from any bytes: the command line is bytes, and Python hands
    non-UTF-8 bytes over as lone surrogates (``surrogateescape``), which no UTF-8 consumer
    (SQLite, the terminal, JSON output) accepts. Undecodable bytes become U+FFFD — what the
    store writes for them — and a note on stderr says so."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if not isinstance(value, str):
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            fixed = os.fsencode(value).decode("utf-8", errors="replace")
            click.echo(
                f"quill: {param.human_readable_name if param else 'argument'} is not valid UTF-8; "
                f"undecodable bytes read as U+FFFD: {fixed!r}",
                err=True,
            )
            return fixed
        return value


UTF8 = Utf8Text()


class Epoch(click.ParamType):
    """``--since``/``--until``: finite epoch seconds, or an ISO date/datetime (UTC when no zone),
    converted at parse time so a bad value is a usage error."""

    name = "TIME"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, float):
            return value
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if not math.isfinite(number):
                self.fail(f"{value!r} is not a finite number of epoch seconds", param, ctx)
            return number
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"{value!r} is neither epoch seconds nor an ISO date", param, ctx)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return parsed.timestamp()


EPOCH = Epoch()

#: ``--archived`` / ``--pinned`` / ``--hidden``: only yes, only no, or (absent) both.
YESNO = click.Choice(["yes", "no"])
