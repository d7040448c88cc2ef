"""Operating Quill, one package per role: ``client`` (the product API, ``quill.Client``),
``cli`` (the ``quill`` command), ``service`` (``quill serve``), ``status`` (health and doctor),
``recover`` (replay and ``quill recover``), ``purge``, ``transfer`` (import into the spool,
export), ``importers`` (one parser per transcript format) and ``integrations``; beside them the
configuration (read once, here) and the logging set-up every process shares."""
