"""Maintenance jobs: the catalog (what, where, when) and the huey queues that carry them."""
