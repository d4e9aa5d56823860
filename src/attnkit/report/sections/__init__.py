"""The report's sections that are not experiments: what attention computes (intro), masks, cost
(with bench and backends), relative positions, the KV cache, and the older-than-the-Transformer comparison."""
