"""Quill's benchmark suite: ``python -m bench.run [--quick|--full]`` (docs/benchmarks.md).

Every fleet a benchmark starts inherits this process's environment; ``[watch]`` is on by
default and follows the agent folders under ``$QUILL_AGENT_HOME`` (else the user's home). So
that no benchmark ever reads — or times the import of — the real ``~/.claude`` and its peers,
the agent home is an empty temp folder unless the caller named one (as ``tests/conftest.py``
does for tests); a benchmark of the watcher names its own folders in ``[watch] roots``.
"""

import os
import tempfile

if not os.environ.get("QUILL_AGENT_HOME"):
    os.environ["QUILL_AGENT_HOME"] = tempfile.mkdtemp(prefix="quill-bench-agents-")
