"""The product API agents use: ``quill.Client`` and ``quill.AsyncClient`` (writes, reads,
waits), the public error tree and the one way ops opens the store for reading."""
