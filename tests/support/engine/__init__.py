"""Engine tests: real vLLM CPU engines run in child processes (see child.py)."""
