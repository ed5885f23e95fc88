"""Helpers of the conformance lane (tests/conformance): the engines' own functions, called."""
