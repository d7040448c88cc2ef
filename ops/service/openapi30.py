"""The service's OpenAPI document in version 3.0, for the bundled Swagger UI (4.15 renders
only 3.0 documents; FastAPI writes 3.1). ``/openapi.json`` stays 3.1 (``docs/openapi.json``);
``/api/docs`` reads ``/api/docs/openapi.json``, this translation of it.

What 3.1 (JSON Schema 2020-12) says differently in 3.0, translated where it occurs:
``anyOf``/``oneOf`` with a ``{"type": "null"}`` branch → the other branch(es) plus
``nullable: true``; ``type: [T, "null"]`` → ``type: T, nullable: true``; ``const: v`` →
``enum: [v]``; ``examples: [...]`` (a schema keyword) → ``example`` (the first);
numeric ``exclusiveMinimum``/``exclusiveMaximum`` → ``minimum``/``maximum`` plus the boolean.
"""

from __future__ import annotations

import copy
from typing import Any

_NULL = {"type": "null"}


def downgrade(document: dict[str, Any]) -> dict[str, Any]:
    """A 3.0.3 copy of the 3.1 ``document`` (the input is not changed)."""
    out = _walk(copy.deepcopy(document), in_schema=False)
    out["openapi"] = "3.0.3"
    return out


#: Keys whose value is a map of schemas or a schema (so ``examples`` below them is the JSON
#: Schema keyword, not the OpenAPI media-type map of named examples).
_SCHEMA_KEYS = {"schema", "schemas", "items", "properties", "additionalProperties", "not"}


def _walk(node: Any, *, in_schema: bool) -> Any:
    if isinstance(node, list):
        return [_walk(v, in_schema=in_schema) for v in node]
    if not isinstance(node, dict):
        return node
    if in_schema:
        node = _schema(node)
    return {
        k: _walk(
            v,
            in_schema=in_schema
            and k not in ("enum", "example", "default")
            or k in _SCHEMA_KEYS
            or (in_schema and k in ("anyOf", "oneOf", "allOf")),
        )
        for k, v in node.items()
    }


def _schema(node: dict[str, Any]) -> dict[str, Any]:
    """One schema object translated (its children are translated by ``_walk``)."""
    node = dict(node)
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and _NULL in branches:
            rest = [b for b in branches if b != _NULL]
            del node[key]
            if len(rest) == 1 and "$ref" not in rest[0]:
                node = {**rest[0], **node}
            elif rest:
                node[key] = rest
            node["nullable"] = True
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [t for t in kind if t != "null"]
        if len(kinds) < len(kind):
            node["nullable"] = True
        node["type"] = kinds[0] if len(kinds) == 1 else kinds
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if isinstance(node.get("examples"), list):
        examples = node.pop("examples")
        if examples:
            node["example"] = examples[0]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = node.get(bound)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            node[plain], node[bound] = value, True
    return node
