"""Benchmarks: they print figures and ratios against a reference measured in the same run."""
