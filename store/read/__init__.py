"""Reading the store: the ``Reader`` (``reader``), the model/display/audit projections of a
transcript (``projections``), session listings, lineage walks, conversation keys (``resume``)
and usage totals (``usage``)."""
