"""Benchmarks: scripts that measure side by side in one run and print ratios (see docs/benchmarks.md)."""
