"""Test harness shared by the test suite and the benchmarks (no pytest dependency)."""
