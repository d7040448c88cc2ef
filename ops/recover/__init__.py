"""Rebuilding a store: spool verify and replay, and ``quill recover`` on SQLite (newest
snapshot + replay, swapped in) and on PostgreSQL (replay from the store's cursor)."""
