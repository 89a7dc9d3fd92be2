"""Benchmarks of what a part costs: memory, CPU time, disk and the test command."""
