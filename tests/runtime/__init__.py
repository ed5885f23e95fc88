"""Tests of layoutc/runtime."""
