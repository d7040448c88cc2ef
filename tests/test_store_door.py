"""One door to the store: only ``store/factory.py`` interprets ``[store] url``.

Every production module (``test_layers.production_modules``) is parsed with ``ast``. Outside
the factory a module may pass the URL on as a value (a job parameter, ``Leadership(url)``,
``open_url(url, ...)``), but it fails this test when it

* branches on it: ``store_url`` inside the test of an ``if``, ``while``, conditional
  expression, ``assert``, comprehension filter or ``match``, in a comparison, or as an operand
  of ``and``/``or``/``not`` (a truthiness test);
* takes it apart: an attribute or a subscript of it (``url.split(...)``, ``url[:10]``);
* calls the factory's URL predicate ``is_postgres_url`` (or the ``kind_of`` it replaced);
* constructs a store or reader class itself: ``SqliteStore``, ``PgStore``,
  ``PostgresBackend``, ``SqliteBackend``, ``PgReader``.

Callers ask ``store.factory.capabilities(settings)`` (``kind``, ``local_file``, ``cluster``,
``maintenance_jobs``) and open through ``open_store``/``open_url``/``open_reader``.
"""

from __future__ import annotations

import ast

import pytest
from modules_helpers import production_modules

FACTORY = "quill.store.factory"
#: Modules allowed one kind of finding, and why.
ALLOWED: dict[tuple[str, str], str] = {
    # Layer 0 validates a value before ``quill config set`` writes it to config.toml; it
    # cannot ask the store layer (layers import downwards only) and opens nothing.
    ("quill.home.settings", "branch"): "settings validation of [store] url's scheme",
    # A PostgreSQL store opens readers on its own database (``PostgresBackend.reader``).
    ("quill.store.postgres", "construct PgReader"): "the store's own reader",
}
URL_NAMES = {"store_url"}
PREDICATES = {"is_postgres_url", "kind_of"}
STORE_CLASSES = {"SqliteStore", "PgStore", "PostgresBackend", "SqliteBackend", "PgReader"}


def _mentions_url(node: ast.AST) -> bool:
    """True when ``node``'s subtree names the store URL (``x.store_url``, a name or the
    string key ``"store_url"``)."""
    for n in ast.walk(node):
        if (
            isinstance(n, ast.Attribute)
            and n.attr in URL_NAMES
            or isinstance(n, ast.Name)
            and n.id in URL_NAMES
            or isinstance(n, ast.Constant)
            and n.value in URL_NAMES
        ):
            return True
    return False


def _is_url(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in URL_NAMES
        or isinstance(node, ast.Name)
        and node.id in URL_NAMES
    )


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def findings(source: str) -> list[tuple[int, str]]:
    """``[(line, kind)]`` of every way ``source`` looks at the store URL or builds a store;
    ``kind`` is ``"branch"``, ``"take apart"``, ``"call NAME"`` or ``"construct NAME"``."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        tests: list[ast.AST] = []
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests.extend(node.ifs)
        elif isinstance(node, ast.Match):
            tests.append(node.subject)
        elif isinstance(node, (ast.Compare, ast.BoolOp)):
            tests.append(node)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            tests.append(node.operand)
        hit = next((t for t in tests if _mentions_url(t)), None)
        if hit is not None:  # (a comprehension has no line of its own: its filter has)
            out.append((hit.lineno, "branch"))
        if isinstance(node, (ast.Attribute, ast.Subscript)) and _is_url(node.value):
            out.append((node.lineno, "take apart"))
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name in PREDICATES:
                out.append((node.lineno, f"call {name}"))
            elif name in STORE_CLASSES:
                out.append((node.lineno, f"construct {name}"))
    return sorted(set(out))


def test_only_the_factory_interprets_the_store_url():
    bad = []
    for module, path in production_modules().items():
        if module == FACTORY:
            continue
        for line, kind in findings(path.read_text()):
            if (module, kind) not in ALLOWED:
                bad.append(f"{path}:{line}: {kind}")
    assert not bad, "outside store/factory.py:\n" + "\n".join(bad)


def test_the_allowances_are_still_needed():
    """An allowance nothing uses any more is removed, not kept as a loophole."""
    mods = production_modules()
    for module, kind in ALLOWED:
        assert kind in {k for _, k in findings(mods[module].read_text())}, (module, kind)


def test_the_factory_itself_is_found_and_looks():
    assert findings(production_modules()[FACTORY].read_text()), "the walk must see the door"


@pytest.mark.parametrize(
    "source, kind",
    [
        ("if cfg.store_url:\n    pass", "branch"),
        ("x = None if cfg.store_url else cfg.state_db", "branch"),
        ("ok = purge and cfg.store_url", "branch"),
        ("ok = not settings.store_url", "branch"),
        ("k = 'postgres' if store_url.startswith('postgres') else 'sqlite'", "branch"),
        ("ok = [j for j in jobs if cfg.store_url]", "branch"),
        ("assert kind(cfg.store_url) == 'postgres'", "branch"),
        ("u = 'x+' + cfg.store_url.split('://', 1)[1]", "take apart"),
        ("s = cfg.store_url[:10]", "take apart"),
        ("pg = factory.is_postgres_url(u)", "call is_postgres_url"),
        ("k = kind_of(u)", "call kind_of"),
        ("b = PostgresBackend(cfg.store_url, spool_id='x')", "construct PostgresBackend"),
        ("r = postgres.PgReader(url)", "construct PgReader"),
        ("s = SqliteStore(path)", "construct SqliteStore"),
    ],
)
def test_the_walk_catches_each_way_of_looking(source, kind):
    assert kind in {k for _, k in findings(source)}


@pytest.mark.parametrize(
    "source",
    [
        "params = {'url': cfg.store_url}",
        "leader = Leadership(cfg.store_url, 'scheduler')",
        "if capabilities(cfg).local_file:\n    pass",
        "store = open_url(store_url, None, 'maintenance')",
        "text = redact(cfg.store_url)",
    ],
)
def test_passing_the_url_on_as_a_value_is_fine(source):
    assert findings(source) == []
