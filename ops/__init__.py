"""Operating Quill: configuration (read once, here), logging, ingest and the ``quill`` CLI."""
