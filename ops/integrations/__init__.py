"""Adapters that plug Quill into agent frameworks (installed as ``quill.integrations``).

* ``quill.integrations.openai_agents.QuillSession`` — the OpenAI Agents SDK session protocol.

Each adapter imports its framework only when its module is imported.
"""
