"""Tests of layoutc/compiler."""
