"""The embedded SQLite store (apsw): the writer's ``SqliteStore`` (``store``), connections
(``connection``), the file guard against a replaced file or WAL (``guard``), FTS slices and
FTS-only repair (``indexer``, ``fts_repair``), WAL checkpoints (``wal``), job-run records
(``job_runs``), swapping a rebuilt file in (``swap``) and salvage from a damaged one."""
