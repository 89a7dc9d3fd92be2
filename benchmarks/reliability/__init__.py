"""Benchmarks of faults: lost nodes, bad messages, chaos and long runs."""
