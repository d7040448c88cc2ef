"""``--purge``: removing deleted sessions' content from the spool, the quarantine, the
snapshots and the live store, and finding purges asked for and not finished."""
