"""Turning spool ops into rows: the chunk transaction with its cursor (``chunk``) and the batch
ledger (``ledger``), the op appliers (``sessions``, ``messages``, ``deletes``, ``restore``,
``usage``, ``reprice``), the content rules every producer and applier share (``checks``,
``precheck``, ``rules``, ``usage_fields``) and the row encodings and writes (``normalize``,
``message_rows``, ``blobs``, ``context``, ``pricing``). Both backends apply ops with these rules;
only ``ledger.Ledger`` differs per backend."""
