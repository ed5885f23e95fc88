"""The checker's shared state, limits and name rules (``check.py`` builds on it)."""

from __future__ import annotations

import builtins
import difflib
import keyword
import re
from dataclasses import dataclass

from layoutc.compiler import glues, ir
from layoutc.compiler import syntax as A
from layoutc.compiler.diagnostics import Diagnostic, Related, Span, error
from layoutc.compiler.evaluate import Interval

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_NAME = 64
MAX_ENUM = 64
MAX_PARAMS = 64
MAX_ERRORS = 100  # per contract; the rest would only repeat the first causes
# Names the generated module uses itself, plus the layer-level names it binds.
KEYWORDS = frozenset({
    "contract", "source", "policy", "param", "let", "require", "admit", "tensor", "kernel", "glue",
    "if", "then", "else", "and", "or", "not", "match", "true", "false", "in", "int", "enum", "when",
    "shard", "over", "blocks", "of",
})
RESERVED = frozenset({
    "plan", "Plan", "torch", "math", "logging", "itertools", "dataclass", "dataclasses", "Any", "self", "cls",
    "config", "out", "rank", "full", "reason", "supported", "LayoutContractError", "KernelUnavailableError",
    "CONTRACT", "SOURCE_FILE", "SOURCE_SHA256", "SOURCES", "PROVED", "POLICY", "FALLBACK", "PACKAGE",
    "WORKAROUND_ENV", "code", "true", "false",
})
AXIS_NAMES = ("experts", "n", "k")
# Names integrators give the TP degree; `shard_*` and coverage read `tp_size` only (LC414).
TP_ALIASES = ("tp", "tp_degree", "tp_world_size", "tensor_parallel_size", "tensor_parallel", "world_size",
              "num_ranks", "n_ranks", "ranks", "num_shards", "shards")
_STORAGE_BITS = {"int32": 32, "int16": 16, "int8": 8, "uint8": 8}
# float dtype -> (mantissa bits, largest finite value)
_FLOATS = {"float32": (23, 3.4028234663852886e38), "bfloat16": (7, 3.3895313892515355e38),
           "float16": (10, 65504.0), "float8_e4m3fn": (3, 448.0), "float8_e5m2": (2, 57344.0)}


def _float_exact(value: int, mantissa: int, largest: float) -> bool:
    """Whether the integer `value` is exactly representable with `mantissa` fraction bits."""
    if value == 0:
        return True
    if abs(value) > largest:
        return False
    odd = abs(value)
    while odd % 2 == 0:
        odd //= 2
    return odd < (1 << (mantissa + 1))
DTYPES = frozenset({"bfloat16", "float16", "float32", "int32", "int8", "uint8", "int16",
                    "float8_e4m3fn", "float8_e5m2"})


@dataclass(frozen=True)
class GlueSpec:
    """The op slots and argument roles of one glue kind (from its declared interface)."""

    ops: tuple[str, ...]
    args: tuple[str, ...]
    summary: str


def _glue_kinds() -> dict[str, GlueSpec]:
    return {kind: GlueSpec(tuple(slot for slot, _ in g.interface.ops), g.interface.args, g.interface.summary)
            for kind, g in glues.registry().items()}


GLUE_KINDS: dict[str, GlueSpec] = _glue_kinds()


def _side(what: str) -> str:
    return "arguments" if what == "lcm" else ("second argument" if what.isidentifier() else "right side")


def _suggest(name: str, candidates: list[str]) -> str | None:
    """`did you mean X?` among names of similar length (bounded work on huge inputs)."""
    near = [c for c in candidates if abs(len(c) - len(name)) <= 3][:400]
    close = difflib.get_close_matches(name[:MAX_NAME], near, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None



class CheckerState:
    """Diagnostics, declared names and the work budgets of one contract's check."""

    member_at: dict[str, Span]  # enum member -> where it was declared (set by `check`)
    fill_spans: dict[str, Span]  # tensor -> its `fill` clause (set by `check`)
    tail_spans: dict[str, Span]  # tensor -> its `tail fill` clause, where it has one (set by `check`)
    tensor_names: list[str]  # every tensor the contract declares, in order (set by `check`)

    def __init__(self, module: A.Module, text: str) -> None:
        self.module = module
        self.text = text
        self.diags: list[Diagnostic] = []
        self.params: dict[str, ir.Param] = {}
        self.lets: dict[str, ir.Let] = {}
        self.defined_at: dict[str, Span] = {}
        self.members: dict[str, ir.EnumT] = {}
        self.tensors: dict[str, ir.Tensor] = {}
        # Names whose declaration already failed: later uses stay silent (no cascades).
        self.poisoned: set[str] = set()
        self.enum_work = [0, 2_000_000]
        self.bounds: dict[str, Interval] = {}
        self.reported_too_large = False
        self.fill_work = 0
        self.error_count = 0
        self.later_lets = {d.name for d in module.decls if isinstance(d, A.LetDecl)}

    # ---- helpers ----
    def full(self) -> bool:
        """Past MAX_ERRORS: stop doing work (suggestions) for diagnostics nobody will see."""
        return self.error_count > MAX_ERRORS

    def err(self, code: str, span: Span, msg: str, **kw: object) -> None:
        errors = self.error_count
        self.error_count += 1
        if errors < MAX_ERRORS:
            self.diags.append(error(code, span, msg, **kw))  # type: ignore[arg-type]
        elif errors == MAX_ERRORS:
            self.diags.append(error("LC107", span, f"more than {MAX_ERRORS} errors; stopping here"))

    def check_name(self, name: str, span: Span) -> bool:
        if not IDENT.match(name) or len(name) > MAX_NAME or name.startswith("_"):
            self.err("LC204", span, f"`{name[:80]}` is not a valid name: use [A-Za-z][A-Za-z0-9_]*, "
                     f"at most {MAX_NAME} characters, not starting with `_`")
            return False
        if keyword.iskeyword(name) or keyword.issoftkeyword(name) or name in RESERVED or name in KEYWORDS \
                or name in dir(builtins):
            self.err("LC203", span, f"`{name}` is reserved (a layoutc keyword, a Python keyword or builtin, or a name "
                     "the generated module uses)")
            return False
        return True

    def define(self, name: str, span: Span) -> bool:
        if not self.check_name(name, span):
            return False
        if name in self.defined_at:
            self.err("LC202", span, f"`{name}` is already defined",
                     related=(Related(self.defined_at[name], "first defined here"),))
            return False
        self.defined_at[name] = span
        return True
