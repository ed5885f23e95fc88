"""Tests of house rules over the whole repository."""
