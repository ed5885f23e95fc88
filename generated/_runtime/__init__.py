# Copied by `layoutc compile` from layoutc/runtime/__init__.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""The layout runtime: the torch code every generated module runs.

This package is ordinary, tested Python. `layoutc compile` copies it into the
output package as `_runtime/` (each file unchanged below a two-line header), so
a generated package needs only torch. Nothing here imports the compiler (lark, jinja2, z3), and this file
imports nothing, so the compiler can read `interface.py` without torch.

- `errors`: the named exceptions every generated function raises.
- `interface`: the declared interface of each glue (stdlib only).
- `params`: plan-argument checks and integer helpers for `plan()`.
- `plans`: validation of `Plan` objects (a forged or modified plan is refused).
- `layout`: pad, unpad and shard by axis tables (`Axis`).
- `routing`: checks of router outputs and hidden states.
- `activations`: the exact activation formulas the Python glues compute.
- `packed`: `KernelConfig` and `PackedWeight`, the typed prepacked weights.
- `twin`: one runtime per process: the copy's `errors`, `interface`, `packed` and
  `experts` are layoutc's own when layoutc is importable and its runtime is the same text.
- `glue/*`: one module per kernel: its INTERFACE and the code that calls it.
"""
