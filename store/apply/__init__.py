"""Turning spool ops into rows: the chunk transaction with its cursor (``chunk``), the op
appliers (``sessions``, ``messages``, ``deletes``, ``restore``, ``usage``, ``reprice``), the content
rules every producer and applier share (``checks``, ``precheck``, ``rules``) and the row
encodings (``normalize``, ``blobs``, ``context``, ``pricing``). Both backends apply ops with
these rules; only ``ledger.Ledger`` differs per backend."""
