"""Benchmarks against peer libraries (RLlib, Ray Tune, pymoo) on the same machine."""
