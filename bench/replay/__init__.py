"""Replay of public MoE pad bugs against released engine wheels (see docs/replay.md).

`bugs.py` is the table (report, releases, function, configurations), `fetch.py` downloads a
release's wheel and unpacks only its Python into the ignored `.engines/` (the repository's one
wheel fetcher: tests/support/vllm_release.py uses it too), `child.py` runs one release's checks in a
fresh interpreter whose path starts at that release, `drivers.py` holds one
driver per engine function, `compare.py` the byte comparison that names rows. Kits
(`layoutc kit`) can absorb a driver: each takes (engine module, generated module, config)
and returns the mismatches, with no layoutc import.
"""
