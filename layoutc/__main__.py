"""`python -m layoutc` runs the command-line interface."""

from layoutc.cli import entry

entry()
