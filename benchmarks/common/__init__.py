"""What the benchmarks share: paths, one process per measured mode, models, workloads, servers.

Imported as ``benchmarks.common.<module>``; nothing here is a benchmark of its own.
"""
