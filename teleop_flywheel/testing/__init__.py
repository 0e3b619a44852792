"""Synthetic sessions and datasets: fixtures the tests, benchmarks and `eval --simulate` use."""
