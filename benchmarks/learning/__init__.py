"""Benchmarks of what is learned: returns, win rates and exploitability."""
