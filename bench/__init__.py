"""Benchmarks that print JSON (run them as scripts: ``python bench/<name>.py``)."""
