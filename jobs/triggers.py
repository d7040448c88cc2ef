"""Schedule triggers as people write and read them: ``--cron`` in crontab's own meaning, and
one wording of a trigger ("every 6 hours", "cron 30 3 * * sun") for every listing — the CLI's
``schedule list|add`` and ``jobs list``, the dashboard's jobs page — instead of APScheduler's
``repr``-like ``interval[6:00:00]`` / ``cron[hour='3', minute='30']``.

Crontab numbers the days of the week 0-7 with 0 and 7 Sunday; APScheduler 3's ``CronTrigger``
numbers them 0-6 from Monday, and its ``from_crontab`` passes the field through unchanged, so
``30 4 * * 0`` would fire on Mondays. ``crontab`` turns numeric days into names (``sun``),
which mean the same to both.

APScheduler is imported only by ``crontab``: listings that only describe stay light.
"""

from __future__ import annotations

import re
from typing import Any

#: Crontab's day numbers (0 and 7: Sunday) as names, which APScheduler reads unambiguously.
CRONTAB_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: APScheduler 3's own day numbers (0: Monday), for describing a trigger that holds numbers.
APSCHEDULER_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: The crontab fields in order, with the value that means "any".
CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")
_UNIT_S = (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1))
_INTERVAL_ARGS = {"weeks": 604_800, "days": 86_400, "hours": 3_600, "minutes": 60, "seconds": 1}
_DAY_TOKEN = re.compile(r"^(\*|\d+)(?:-(\d+))?(?:/(\d+))?$")


def crontab(expr: str) -> Any:
    """An APScheduler ``CronTrigger`` (UTC) for the five-field crontab ``expr`` ("minute hour
    day month day-of-week"), days of the week numbered as crontab does (0 or 7 Sunday) or
    named. Raises ``ValueError`` saying what is wrong."""
    from apscheduler.triggers.cron import CronTrigger

    values = expr.split()
    if len(values) != 5:
        raise ValueError(f"a crontab expression has 5 fields, got {len(values)}")
    fields = dict(zip(CRON_FIELDS, values, strict=True))
    fields["day_of_week"] = _crontab_days(fields["day_of_week"])
    return CronTrigger(**fields, timezone="UTC")


def _crontab_days(field: str) -> str:
    """Crontab's day-of-week ``field`` with every numeric part as day names: ``0`` → ``sun``,
    ``1-5`` → ``mon,tue,wed,thu,fri``, ``*/2`` → ``sun,tue,thu,sat``; ``*`` and named parts
    (``mon-fri``) unchanged. Raises ``ValueError`` for a day number over 7."""
    return _named_days(field, CRONTAB_DAYS, "crontab numbers the days 0-7 (0, 7: Sunday)")


def _named_days(field: str, names: tuple[str, ...], numbering: str) -> str:
    """Day-of-week ``field`` with every numeric part (``N``, ``N-M``, ``*/S``, ``N-M/S``,
    ``N/S``) as the names ``names`` gives the numbers (``names[N]``; ``*`` spans 0-6);
    ``*`` and named parts unchanged. Raises ``ValueError`` (saying ``numbering``) for a day
    number past ``names``."""
    out: list[str] = []
    for part in field.split(","):
        m = _DAY_TOKEN.match(part)
        if part == "*" or m is None:  # "*" or names: APScheduler reads them as crontab does
            out.append(part)
            continue
        start, end, step = m.group(1), m.group(2), int(m.group(3) or 1)
        if start == "*":
            lo, hi = 0, 6
        else:
            lo = int(start)
            hi = int(end) if end is not None else (6 if m.group(3) else lo)
        if max(lo, hi) >= len(names) or step < 1:
            raise ValueError(f"day of week {part!r}: {numbering}")
        days = [names[n] for n in range(lo, hi + 1, step)]
        out.extend(n for n in days if n not in out)
    return ",".join(out)


def with_day_names(trigger: Any) -> Any | None:
    """For a ``CronTrigger`` whose day-of-week field holds numbers — stored by Quill before
    ``--cron`` took crontab's numbering, or written as APScheduler arguments — an equal
    trigger with those days *named as APScheduler 3 reads the numbers* (``0``: Monday,
    ``*/2``: ``mon,wed,fri,sun``): it fires at exactly the same times, and its stored form no
    longer depends on whose numbering a reader assumes (crontab's ``0`` is Sunday, and so is
    APScheduler 4's). Every other field, the start and end dates, the time zone and the
    jitter are kept. None for any other trigger (nothing to rename)."""
    fields = getattr(trigger, "fields", None)
    if fields is None:
        return None
    given = {f.name: str(f) for f in fields if not f.is_default}
    day = given.get("day_of_week")
    if day is None or not re.search(r"\d", day):
        return None
    from apscheduler.triggers.cron import CronTrigger

    given["day_of_week"] = _named_days(day, APSCHEDULER_DAYS, "APScheduler 3 numbers them 0-6")
    return CronTrigger(
        **given,
        start_date=trigger.start_date,
        end_date=trigger.end_date,
        timezone=trigger.timezone,
        jitter=trigger.jitter,
    )


def every(seconds: float) -> str:
    """An interval in the largest whole unit: ``every 6 hours``, ``every 90 minutes``,
    ``every day``, ``every 45 seconds``."""
    whole = int(seconds)
    for unit, size in _UNIT_S:
        if whole == seconds and whole % size == 0 and whole >= size:
            n = whole // size
            return f"every {unit}" if n == 1 else f"every {n} {unit}s"
    return f"every {seconds:g} seconds"


def describe_args(kind: str | None, args: dict[str, Any]) -> str:
    """A trigger given as APScheduler arguments (a catalog default: ``("interval",
    {"minutes": 5})``, ``("cron", {"hour": 3, "minute": 30})``) in words: ``every 5 minutes``,
    ``cron 30 3 * * *``; ``on demand`` for None."""
    if kind is None:
        return "on demand"
    if kind == "interval":
        return every(sum(float(v) * _INTERVAL_ARGS[k] for k, v in args.items()))
    fields = {k: str(v) for k, v in args.items()}
    extra = {
        k: v
        for k, v in fields.items()
        if k not in CRON_FIELDS and not (k == "second" and v == "0") and v != "*"
    }
    if kind != "cron" or extra:  # not expressible as crontab: every field named
        return f"{kind} " + " ".join(f"{k}={v}" for k, v in fields.items() if v != "*")
    return "cron " + " ".join(fields.get(k, "*") for k in CRON_FIELDS)


def describe(trigger: Any) -> str:
    """An APScheduler trigger in the words of ``describe_args``. Numeric days of the week are
    named as APScheduler reads them (``0``: Monday), so a listing says when it really fires."""
    interval = getattr(trigger, "interval", None)
    if interval is not None:
        return every(interval.total_seconds())
    fields = getattr(trigger, "fields", None)
    if fields is None:
        return str(trigger)
    args = {f.name: str(f) for f in fields}
    if "day_of_week" in args:
        args["day_of_week"] = re.sub(
            r"\d+", lambda m: APSCHEDULER_DAYS[int(m.group()) % 7], args["day_of_week"]
        )
    return describe_args("cron", args)


def as_json(trigger: Any) -> dict[str, Any]:
    """The machine form beside the words: ``{"every_s": 21600}`` for an interval,
    ``{"cron": "30 3 * * sun"}`` for a crontab-shaped cron trigger, else ``{}``."""
    interval = getattr(trigger, "interval", None)
    if interval is not None:
        return {"every_s": interval.total_seconds()}
    text = describe(trigger)
    if text.startswith("cron ") and "=" not in text:
        return {"cron": text[len("cron ") :]}
    return {}
