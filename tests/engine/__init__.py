"""Tests of real vLLM engines."""
