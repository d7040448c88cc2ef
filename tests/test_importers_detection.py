"""Format detection refuses what no importer reads: a file of no known format (notes, plain JSON,
a JSONL log) is detected as nothing and parses to an empty ParsedFile."""

from __future__ import annotations

from quill.ops.importers import (
    ParsedFile,
    detect_format,
    parse_file,
)


def test_text_of_no_known_format_is_not_detected(tmp_path):
    for name, text in (
        ("notes.md", "# Meeting notes\n\n- item\n"),
        ("data.json", '{"rows": [1, 2, 3]}'),
        ("log.jsonl", '{"level": "info", "msg": "started"}\n'),
    ):
        path = tmp_path / name
        path.write_text(text)
        assert detect_format(path) is None, name
        assert parse_file(path) == ParsedFile(str(path), None, [], [])
