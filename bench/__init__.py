"""Benchmarks: speed targets live here, never in tests. The top layer: may use any package."""
