"""Quill's fleet: the supervisor and its children (writer, scheduler, job consumer)."""

#: The callable every persisted schedule names (``module:function``, resolved by APScheduler
#: when it loads a row of the job store, ``jobs.schedule``). Rows of ``schedule.db`` and of a
#: shared PostgreSQL job store hold this exact string, so it never changes; it lives here, not
#: in ``workers.scheduler``, so that reading schedules (``quill status``) costs no APScheduler.
FIRE_REF = "quill.workers.scheduler:fire"
