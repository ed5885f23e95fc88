"""Reading a config: a file, a folder's ``config.json`` or a bundled name, within bounds.

Reading is bounded (issue 16): the file is read through ``safeio.read_bounded``
(at most :data:`MAX_CONFIG_BYTES`, never blocking on a FIFO or a device), JSON
nested deeper than :data:`MAX_JSON_DEPTH`, integers longer than :data:`MAX_INT_DIGITS`
digits, and more values than :func:`max_json_items` allows for the text's size (which keeps
the parsed objects within a few times the file) are refused with :class:`ModelConfigError`.
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
from importlib.resources.abc import Traversable
from pathlib import Path

from layoutc.tools.checkpoints.errors import ModelConfigError
from layoutc.tools.checkpoints.jsonread import parse_json
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.hfconfig.parse import parse_model_config

MAX_CONFIG_BYTES = 8 << 20  # real config.json files are well under 1 MiB


def _models_dir() -> Traversable:
    """The bundled ``models`` folder (``layoutc/tools/models``) as an importlib.resources Traversable."""
    try:
        return importlib.resources.files("layoutc.tools").joinpath("models")
    except (ModuleNotFoundError, TypeError):
        # Imported outside the package: the folder next to this package.
        return Path(__file__).resolve().parents[1] / "models"


def bundled_model_names() -> list[str]:
    """Names of the configs shipped in ``layoutc/tools/models``, sorted.

    A name is a file stem, e.g. ``"gpt-oss-120b"`` for ``gpt-oss-120b.json``;
    pass it to :func:`load_model_config`. Raises nothing; returns ``[]`` if the
    folder is missing.
    """
    folder = _models_dir()
    if not folder.is_dir():
        return []
    return sorted(
        entry.name[: -len(".json")]
        for entry in folder.iterdir()
        if entry.name.endswith(".json") and entry.is_file()
    )


def _unknown_name_error(name: str, available: list[str]) -> ModelConfigError:
    lowered = name.lower()
    suggestions = difflib.get_close_matches(lowered, available, n=3, cutoff=0.5)
    # A fragment such as "mixtral" should find "mixtral-8x7b" even when the
    # ratio is low.
    for candidate in available:
        if lowered and lowered in candidate and candidate not in suggestions:
            suggestions.append(candidate)
    hint = (
        f" (did you mean {', '.join(repr(s) for s in suggestions)}?)"
        if suggestions
        else ""
    )
    return ModelConfigError(
        f"{name!r} is neither a config file nor a bundled model{hint}; "
        f"bundled models: {', '.join(available) or '(none)'}",
        source=name,
    )



def load_model_config(path_or_name: str | os.PathLike[str]) -> MoEModelConfig:
    """Load an MoE model config from a file, a folder, or a bundled name.

    Args:
        path_or_name: a ``config.json`` path; a folder holding ``config.json``;
            or a bundled name from :func:`bundled_model_names` (case-insensitive).
            An existing path always wins over a bundled name.

    Returns:
        The model's :class:`MoEModelConfig` (sizes in elements, counts in
        layers/experts).

    Raises:
        ModelConfigError: the file is missing or unreadable; the JSON is bad
            (the message gives line and column); the name is not bundled (the
            message lists the bundled names and close matches); a required
            field is missing (the message names the file, the field and every
            alias tried) or has a bad value; the activation is unknown.
    """
    text_arg = os.fspath(path_or_name)
    path = Path(text_arg)
    if path.is_dir():
        path = path / "config.json"
    if os.path.lexists(path):
        source = str(path)
        text = _read_text(path, source)
        return parse_model_config(
            parse_json(text, source), source=source, default_name=_default_name(path)
        )

    looks_like_path = (
        os.sep in text_arg or "/" in text_arg or text_arg.endswith(".json")
    )
    if looks_like_path:
        raise ModelConfigError(f"{text_arg}: no such file", source=text_arg)

    available = bundled_model_names()
    by_lower = {name.lower(): name for name in available}
    stem = by_lower.get(text_arg.lower())
    if stem is None:
        raise _unknown_name_error(text_arg, available)
    resource = _models_dir().joinpath(f"{stem}.json")
    source = f"layoutc/tools/models/{stem}.json"
    return parse_model_config(
        parse_json(_read_text(resource, source), source),
        source=source,
        default_name=stem,
    )


def _read_text(path: Path | Traversable, source: str) -> str:
    """The file as text, read through safeio.read_bounded (a Traversable is read as is:
    it is a bundled file)."""
    from layoutc.compiler.safeio import ReadError, read_bounded

    try:
        raw = read_bounded(path, MAX_CONFIG_BYTES) if isinstance(path, Path) else path.read_bytes()
    except ReadError as error:
        raise ModelConfigError(f"{source}: cannot read: {error.reason}", source=source) from None
    except OSError as error:
        raise ModelConfigError(f"{source}: cannot read: {error.strerror or error}", source=source) from None
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark, as contracts allow
    except UnicodeDecodeError as error:
        raise ModelConfigError(
            f"{source}: cannot read: not UTF-8 (byte 0x{raw[error.start]:02x} at offset {error.start})",
            source=source,
        ) from None


def _default_name(path: Path) -> str:
    # A folder's config.json is named after the folder (the usual hub layout).
    return (
        path.parent.name
        if path.name == "config.json" and path.parent.name
        else path.stem
    )



