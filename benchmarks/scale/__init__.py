"""Benchmarks of how sampling, broadcast, fan-in and learning scale with cores, hosts and ranks."""
