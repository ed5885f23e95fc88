"""layoutc inside vLLM: check, or replace, the engine's own CPU MoE padding.

Registered on vLLM's `vllm.general_plugins` entry point (pyproject.toml), so vLLM
calls `register()` in every process it starts (front end, engine core, workers).
Off unless `LAYOUTC_VLLM` is set:

- `LAYOUTC_VLLM=check`: after vLLM processes each unquantized CPU MoE layer's
  weights, the layer is held to the contract of the route it took
  (`vllm_cpu_grouped_gemm` for the grouped-GEMM kernel, `zentorch_fused_moe` for
  zentorch). A mismatch raises `LayoutcVllmError` and the engine does not start.
- `LAYOUTC_VLLM=replace`: the layer's weights are padded and prepacked by the
  generated module instead of vLLM's `_pad_moe_intermediate`; the forward is still
  vLLM's `_C::cpu_fused_moe` (or zentorch) on those weights.

- `,strict` after either mode (`LAYOUTC_VLLM=check,strict`): every MoE layer the engine builds
  must be held by a contract; one that is not (a quantized experts class, survey.py) stops the
  engine. Without it such a layer is named at start-up as not held, with its class and why.

A refusal raised in a worker reaches the process that called `vllm.LLM(...)` as a
`LayoutcVllmError` with layoutc's message (relay.py). `register()` imports neither torch nor
vllm when the plugin is off. See docs/vllm_plugin.md.
"""

from __future__ import annotations

import os

from layoutc.compiler.diagnostics import shown
from layoutc.tools.vllm_plugin.errors import LayoutcVllmError

ENV = "LAYOUTC_VLLM"
MODES = ("check", "replace")
# Options after the mode, comma-separated (`check,strict`): strict refuses a MoE layer no contract holds.
OPTIONS = ("strict",)

__all__ = ["ENV", "MODES", "OPTIONS", "LayoutcVllmError", "mode", "options", "register"]


def mode() -> str | None:
    """The mode `LAYOUTC_VLLM` asks for: "check", "replace", or None when unset/empty/"off".

    The mode may be followed by options (`OPTIONS`), comma-separated: `check,strict` (see `options`).
    Raises LayoutcVllmError (LC802) for any other value (so a typo stops the engine
    instead of silently running unchecked); the message shows the value escaped
    (non-ASCII as `\\uXXXX`) and cut at 80 characters with its length.
    """
    return _parsed()[0]


def options() -> frozenset[str]:
    """The options after the mode in `LAYOUTC_VLLM` (`strict`); empty when off. Raises as `mode`."""
    return _parsed()[1]


def _parsed() -> tuple[str | None, frozenset[str]]:
    raw = os.environ.get(ENV, "")
    value, *rest = [part.strip() for part in raw.strip().lower().split(",")]
    if value in ("", "0", "off", "none") and not rest:
        return None, frozenset()
    # compared as given: a homoglyph of `check` (Cyrillic U+0435 for e) is refused, and shown escaped
    if value not in MODES or any(option not in OPTIONS for option in rest):
        raise LayoutcVllmError(f"layoutc: error[LC802]: {ENV}={shown(raw)} is not one of check, replace (or off), "
                               f"optionally followed by ,strict")
    return value, frozenset(rest)


def register() -> None:
    """vLLM general-plugin entry point: install the hooks for `mode()`, once per process.

    Does nothing when the plugin is off. Raises LayoutcVllmError on a bad mode.
    Source: vllm 0.32.0 vllm/plugins/__init__.py (load_general_plugins runs this
    in every process).
    """
    wanted = mode()
    if wanted is None:
        return
    from layoutc.tools.vllm_plugin import hook, relay

    relay.forget()  # a refusal file a dead process with this pid left (relay.py)
    hook.install(wanted, strict="strict" in options())
