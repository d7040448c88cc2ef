"""Quill's fleet: the supervisor and its children (writer, scheduler, job consumer)."""
