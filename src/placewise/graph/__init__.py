"""Workload graph: IR, importers, counting, fusion, zoo."""
