"""The benchmark scripts, by the question they answer (one group folder each), and what they share
(common.py). A package so that the scripts import each other by package path: see common.py."""
