"""What the checker's passes share: the `Scope` of one contract and the `Sink` of its diagnostics.

Every piece of state a pass reads or fills is created here, in `Scope.__init__`: the
passes (``check/__init__.py`` ``PASSES``) are plain functions over ``(scope, sink)``
and fill the scope's tables and results as they go. No pass raises on bad input; each
reports into the sink and marks what failed as poisoned, so later passes stay silent
about it instead of cascading.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.diagnostics import Diagnostic, Related, Span, error, warning
from layoutc.compiler.evaluate import Interval

MAX_ENUM = 64
MAX_PARAMS = 64
MAX_ERRORS = 100  # per contract; the rest would only repeat the first causes
ENUM_WORK = 2_000_000  # evaluation steps `finite_values` may spend on one contract's divisors and group sizes

# The declarations a contract states at most once (LC206), by the keyword that opens them.
OnceDecl = A.ContractDecl | A.PolicyDecl | A.ShardDecl | A.EpDecl | A.KernelDecl | A.GlueDecl
OnceT = TypeVar("OnceT", A.ContractDecl, A.PolicyDecl, A.ShardDecl, A.EpDecl, A.KernelDecl, A.GlueDecl)


class Sink:
    """Collects one contract's diagnostics, in the order they are found.

    Errors reported with `error` count towards MAX_ERRORS: the one past it becomes a
    single LC107 and the rest are dropped. Diagnostics of a built contract (`extend`)
    are kept whole, as they were found.
    """

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        self.error_count = 0

    def full(self) -> bool:
        """Past MAX_ERRORS: stop doing work (suggestions) for diagnostics nobody will see."""
        return self.error_count > MAX_ERRORS

    def error(self, code: str, span: Span, message: str, *, related: tuple[Related, ...] = (),
              help: str | None = None) -> None:
        """Report an error (code from the registry in ``diagnostics.py``)."""
        errors = self.error_count
        self.error_count += 1
        if errors < MAX_ERRORS:
            self.diagnostics.append(error(code, span, message, related=related, help=help))
        elif errors == MAX_ERRORS:
            self.diagnostics.append(error("LC107", span, f"more than {MAX_ERRORS} errors; stopping here"))

    def warning(self, code: str, span: Span, message: str, *, help: str | None = None) -> None:
        """Report a warning (never counted, never a reason to refuse the contract)."""
        self.diagnostics.append(warning(code, span, message, help=help))

    def extend(self, found: Iterable[Diagnostic]) -> None:
        """Keep diagnostics another stage made (the glue binding, the case enumeration) as they are."""
        self.diagnostics.extend(found)

    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.diagnostics)


class Scope:
    """The names, tables and results of one contract's check.

    Args:
        module: the parsed module (``parse.py``); its declarations are checked in source
            order, so a name is visible from its declaration on.
        text: the contract's source text (kept in the built contract for its hash).
    """

    def __init__(self, module: A.Module, text: str) -> None:
        self.module = module
        self.text = text
        self.top = Span(module.file, 1, 1, 1, 1)  # where a missing declaration is reported
        # ---- names, in declaration order ----
        self.params: dict[str, ir.Param] = {}
        self.lets: dict[str, ir.Let] = {}
        self.defined_at: dict[str, Span] = {}  # every param, let and tensor name -> its declaration
        self.members: dict[str, ir.EnumT] = {}  # enum member -> its enum
        self.member_at: dict[str, Span] = {}  # enum member -> where it was declared
        self.bounds: dict[str, Interval] = {}  # int param or let -> its interval
        self.tensors: dict[str, ir.Tensor] = {}  # tensors built so far
        self.fill_spans: dict[str, Span] = {}  # tensor -> its `fill` clause
        self.tail_spans: dict[str, Span] = {}  # tensor -> its `tail fill` clause, where it has one
        # Names whose declaration already failed: later uses stay silent (no cascades).
        self.poisoned: set[str] = set()
        self.later_lets = {d.name for d in module.decls if isinstance(d, A.LetDecl)}
        self.tensor_names = [d.name for d in module.decls if isinstance(d, A.TensorDecl)]
        # ---- work budgets ----
        self.enum_work = [0, ENUM_WORK]  # [spent, budget], shared by every `finite_values` call
        self.reported_too_large = False
        self.fill_work = 0
        # ---- declarations and results ----
        self.declared: dict[type[OnceDecl], OnceDecl] = {}  # the first of each once-per-contract kind
        self.sources: list[str] = []
        self.models: list[ir.Models] = []  # the `models` lines that passed (check/models.py)
        self.routes: list[ir.Route] = []  # the `route` lines that passed (check/routes.py)
        self.rules: list[ir.Rule] = []
        self.kernel: ir.Kernel | None = None
        self.glue: ir.Glue | None = None
        self.shard: ir.Shard | None = None
        self.ep: ir.ExpertParallel | None = None
        self.contract: ir.Contract | None = None

    def first(self, kind: type[OnceT]) -> OnceT | None:
        """The first declaration of a once-per-contract `kind` (e.g. ``A.KernelDecl``), if any."""
        found = self.declared.get(kind)
        return found if isinstance(found, kind) else None

    @property
    def anchor(self) -> Span:
        """Where a finding about the whole contract points: its `contract` line, else line 1."""
        contract = self.first(A.ContractDecl)
        return contract.span if contract is not None else self.top


Pass = Callable[[Scope, Sink], None]
