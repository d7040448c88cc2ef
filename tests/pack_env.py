"""``QUILL_TEST_PACK_MIN_BYTES=N``: run the tests with ``[store] pack_min_bytes = N`` as the
default of every data dir and store they open (0: every message text is stored packed, as a
Zstandard BLOB: store/packed.py), so a test that reads ``messages.content`` raw instead of
through the store's reader or ``quill_text()`` fails, and so does any production read that
does. Unset (the default run): nothing changes.

Where it applies (the README's test section): this test process (``apply`` from conftest: the
``Settings`` default and ``quill.home.DEFAULTS``, which ``store.open``, ``open_url`` and
``packed.register`` read when a store is opened), every CLI call (the fork server applies it
after its imports; a cold call runs ``apply`` first: ``conftest.QuillCLI``) and every data dir
``harness.make_home`` writes (its ``config.toml``, so fleets started on it pack too). A fleet
started on a data dir without a config.toml keeps the production default."""

from __future__ import annotations

import os
import sys

#: The environment variable, and the value it holds (None: unset).
VARIABLE = "QUILL_TEST_PACK_MIN_BYTES"
#: The production default ``pack_min_bytes`` as ``apply`` found it (None: not applied).
_PRODUCTION: int | None = None


def value() -> int | None:
    """The threshold the run asks for (bytes ≥ 0), or None. Raises ``ValueError`` for a value
    that is not an integer ≥ 0."""
    raw = os.environ.get(VARIABLE)
    if raw is None or raw == "":
        return None
    n = int(raw)
    if n < 0:
        raise ValueError(f"{VARIABLE} must be an integer ≥ 0, got {raw!r}")
    return n


def apply() -> int | None:
    """Make ``value()`` the default ``pack_min_bytes`` of this process (``Settings`` built
    from now on, and ``DEFAULTS`` wherever a module imported it). Returns it (None: unset,
    nothing changed)."""
    n = value()
    if n is None:
        return None
    from quill.home import settings

    global _PRODUCTION
    old = settings.DEFAULTS
    if _PRODUCTION is None:
        _PRODUCTION = old.pack_min_bytes
    defaults = dict(settings.Settings._field_defaults, pack_min_bytes=n)
    settings.Settings.__new__.__defaults__ = tuple(
        defaults[f] for f in settings.Settings._fields if f in defaults
    )
    settings.Settings._field_defaults.update(defaults)
    new = old._replace(pack_min_bytes=n)
    for module in list(sys.modules.values()):
        if getattr(module, "DEFAULTS", None) is old:
            module.DEFAULTS = new
    return n


def config_store_section(sections: dict[str, dict]) -> None:
    """Add ``pack_min_bytes`` to ``sections['store']`` (a ``make_home`` config) when the run
    asks for it and the test did not set it itself."""
    n = value()
    if n is not None:
        sections.setdefault("store", {}).setdefault("pack_min_bytes", n)


def production_pack_min_bytes() -> int:
    """The production default of ``pack_min_bytes`` (home/settings.py), whatever the run set:
    for the tests of the default itself (the documented example config, the threshold)."""
    from quill.home import DEFAULTS

    return DEFAULTS.pack_min_bytes if _PRODUCTION is None else _PRODUCTION
