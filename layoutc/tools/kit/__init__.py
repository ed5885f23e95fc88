"""`layoutc kit`: self-contained pytest modules that hold an engine's own pad code to a contract (docs/kits.md)."""
