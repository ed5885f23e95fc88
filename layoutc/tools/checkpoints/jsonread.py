"""Bounded JSON: config.json, a safetensors index and a format file are parsed only when they
nest at most MAX_JSON_DEPTH deep, hold integers of at most MAX_INT_DIGITS digits and no more
values than max_json_items allows for their size (so the parsed objects stay within a few
times the text); else ModelConfigError naming the source. Used by hfconfig.reading and
checkpoints.header (a leaf: it imports nothing of the tools but the error, checkpoints.errors).
"""

from __future__ import annotations

import json
import re
from typing import Any

from layoutc.tools.checkpoints.errors import ModelConfigError

MAX_JSON_DEPTH = 64  # real configs nest 3 to 5 levels
MAX_INT_DIGITS = 30  # sizes are below 2^62; a longer literal is not a size


def _json_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (linear; no recursion)."""
    return _json_shape(text)[0]


# A JSON string (unrolled, possessive: no backtracking state per character or per escape,
# so a 7.9 MiB string costs no memory to skip; `"(?:[^"\\]|\\.)*"` held a mark per character,
# 985 MiB for one such config, issue 40) or a structural character.
_TOKEN = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[\]{},]')


def _json_shape(text: str, limit: int | None = None) -> tuple[int, int]:
    """(deepest nesting of [ and {, number of containers and separators) outside strings:
    linear time, memory independent of the text, no recursion, nothing built; the scan
    stops once the count passes `limit`."""
    depth = deepest = items = 0
    limit = len(text) + 1 if limit is None else limit
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token in "[{":
            depth += 1
            items += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
        elif token == ",":
            items += 1
        if items > limit:
            break
    return deepest, items


def max_json_items(size: int) -> int:
    """The most containers and separators a JSON text of `size` bytes may hold: 10,000 plus one
    per 12 bytes (real configs and indexes hold one per 20 bytes or more), so the parsed
    objects stay within a few times the text (an empty object is 64 bytes in CPython)."""
    return 10_000 + size // 12


class _JsonLimit(Exception):
    pass


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _JsonLimit(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_constant(text: str) -> float:
    raise _JsonLimit(f"{text} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (json.loads keeps the last one silently; a
    config whose `num_experts` appears twice has no one meaning)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                from layoutc.compiler.diagnostics import shown  # here: hfconfig imports no compiler module

                raise _JsonLimit(f"the key {shown(key)} appears twice in one object")
            seen.add(key)
    return out


def parse_json(text: str, source: str) -> dict[str, Any]:
    """The JSON object in `text` (from `source`, named in errors), within the bounds above.
    Raises ModelConfigError: too deep, too many values, a long integer, NaN/Infinity,
    a key given twice in one object, invalid JSON, or a top level that is not an object."""
    depth, items = _json_shape(text, max_json_items(len(text)))
    if depth > MAX_JSON_DEPTH:
        least = "at least " if items > max_json_items(len(text)) else ""  # the scan stopped early
        raise ModelConfigError(
            f"{source}: JSON nested {least}{depth} levels deep (at most {MAX_JSON_DEPTH})", source=source
        )
    if items > max_json_items(len(text)):
        raise ModelConfigError(
            f"{source}: JSON holds over {items - 1} values in {len(text)} bytes (at most "
            f"{max_json_items(len(text))}: parsing it would take many times its size in memory)",
            source=source,
        )
    try:
        raw = json.loads(text, parse_int=_parse_int, parse_constant=_parse_constant, object_pairs_hook=_object)
    except _JsonLimit as error:
        raise ModelConfigError(f"{source}: invalid config: {error}", source=source) from None
    except RecursionError:
        raise ModelConfigError(f"{source}: JSON nested too deeply", source=source) from None
    except json.JSONDecodeError as error:
        raise ModelConfigError(
            f"{source}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}",
            source=source,
        ) from error
    if not isinstance(raw, dict):
        raise ModelConfigError(
            f"{source}: expected a JSON object at the top level, "
            f"got {type(raw).__name__}",
            source=source,
        )
    return raw
