"""Helpers of the tests: imported by them, run as scripts or with python -m; no tests."""
