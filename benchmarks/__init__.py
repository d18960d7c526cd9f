"""Benchmarks, each run from the repository root as ``python -m benchmarks.<name>`` (README.md lists them).

Every module at this level is a benchmark with a command line; what several of them share is in
``benchmarks.common``.
"""
