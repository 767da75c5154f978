"""Benchmarks: timing lives here, never in pass/fail tests. Each is `python -m flexnn_ncnn.bench.<name>`."""
