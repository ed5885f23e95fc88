"""`python -m layoutc` runs the command-line interface."""

from .cli import entry

entry()
