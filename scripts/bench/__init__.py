"""Helpers of ``scripts/bench.py`` (``make bench``): a hermetic sandbox tree, the trace
analysis, the memory probe and the table. Dev tooling only; nothing in ``fractal/``
imports it. See docs/benchmarks.md.
"""
