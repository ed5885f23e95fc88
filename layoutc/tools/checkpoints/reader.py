"""A safetensors checkpoint folder: one file or shards with model.safetensors.index.json.

`Checkpoint(folder)` reads config.json and the tensor index; `slice(name)` returns
the memory-mapped `get_slice` object of one tensor (nothing is read until it is
indexed); `tensor(name)` materialises a small tensor (routers, norms). Needs
`safetensors` and torch (framework "pt").
"""

from __future__ import annotations

import difflib
import json
import os
from contextlib import ExitStack
from typing import Any, Self

from layoutc.tools.checkpoints.formats import FormatError

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_CONFIG_BYTES = 16 << 20


class Checkpoint:
    """A checkpoint folder opened for slicing. Use as a context manager (closes the files).

    Raises FormatError: LR110 no folder / config.json, LR111 no safetensors or a bad
    index, LR112 a tensor the format names is absent (closest names listed).
    """

    def __init__(self, folder: str) -> None:
        self.folder = folder
        cfg_path = os.path.join(folder, "config.json")
        if not os.path.isdir(folder) or not os.path.isfile(cfg_path):
            raise FormatError("LR110", f"{folder}: not a checkpoint folder (no config.json)")
        try:
            if os.path.getsize(cfg_path) > MAX_CONFIG_BYTES:
                raise ValueError("larger than 16 MiB")
            with open(cfg_path, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as exc:
            raise FormatError("LR110", f"{cfg_path}: cannot read config.json: {exc}") from None
        if not isinstance(config, dict):
            raise FormatError("LR110", f"{cfg_path}: config.json is not a JSON object")
        self.config: dict[str, Any] = config
        self.weight_map = self._weight_map()
        self._stack = ExitStack()
        self._open: dict[str, Any] = {}

    def _weight_map(self) -> dict[str, str]:
        index = os.path.join(self.folder, INDEX)
        if os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as f:
                    data = json.load(f)
                wm = data["weight_map"]
                if not isinstance(wm, dict):
                    raise ValueError("weight_map is not an object")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise FormatError("LR111", f"{index}: bad index: {exc}") from None
            for fname in set(wm.values()):
                if os.path.basename(str(fname)) != fname or not os.path.isfile(os.path.join(self.folder, fname)):
                    raise FormatError("LR111", f"{index}: names shard {fname!r}, which is not in the folder")
            return {str(k): str(v) for k, v in wm.items()}
        single = os.path.join(self.folder, SINGLE)
        if not os.path.isfile(single):
            raise FormatError("LR111", f"{self.folder}: no {SINGLE} and no {INDEX}")
        from safetensors import safe_open
        with safe_open(single, framework="pt") as f:
            return {k: SINGLE for k in f.keys()}  # noqa: SIM118 (safe_open is not a mapping)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every safetensors file this checkpoint opened."""
        self._stack.close()
        self._open.clear()

    def has(self, name: str) -> bool:
        """Whether the checkpoint's weight map names tensor `name`."""
        return name in self.weight_map

    def _handle(self, name: str) -> Any:
        if name not in self.weight_map:
            close = difflib.get_close_matches(name, list(self.weight_map), n=3, cutoff=0.6)
            hint = f"; closest: {', '.join(close)}" if close else ""
            if name + "_blocks" in self.weight_map:
                hint = (f"; it is stored quantized ({name}_blocks / _scales, e.g. MXFP4): dequantize the "
                        "checkpoint to bf16 first (quantized formats are not declared yet)")
            raise FormatError("LR112", f"{self.folder}: no tensor {name!r} (the declared format names it){hint}")
        fname = self.weight_map[name]
        if fname not in self._open:
            from safetensors import safe_open
            try:
                self._open[fname] = self._stack.enter_context(
                    safe_open(os.path.join(self.folder, fname), framework="pt"))
            except Exception as exc:  # safetensors raises its own error types
                raise FormatError("LR111", f"{fname}: cannot open: {exc}") from None
        return self._open[fname]

    def slice(self, name: str) -> Any:
        """The memory-mapped slice object of `name` (index it to read a region)."""
        return self._handle(name).get_slice(name)

    def tensor(self, name: str) -> Any:
        """`name` as a torch tensor (for small tensors: routers, biases)."""
        return self._handle(name).get_tensor(name)

    def shape(self, name: str) -> tuple[int, ...]:
        """`name`'s stored shape (read from the header; nothing is loaded)."""
        return tuple(int(s) for s in self.slice(name).get_shape())
