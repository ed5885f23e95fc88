"""Tools that need torch (and a checkpoint): `layoutc run`."""
