"""Benchmark scripts: they print and save JSON under benchmarks/results/; never run as tests."""
