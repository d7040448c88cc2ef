"""Health: the figures ``quill status``, ``/metrics`` and the dashboard show, and the
checks of ``quill doctor``."""
