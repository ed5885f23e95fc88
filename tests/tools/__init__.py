"""Tests of layoutc/tools and the CLI."""
