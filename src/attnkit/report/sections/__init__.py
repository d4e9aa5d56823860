"""The report's sections that are not experiments: what attention computes (intro), masks, cost
(with bench and backends), relative positions, the KV cache, the ring (context-parallel) check, and
the older-than-the-Transformer comparison."""
