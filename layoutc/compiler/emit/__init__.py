"""The emitter: renders a checked, verified contract into a standalone Python module."""
