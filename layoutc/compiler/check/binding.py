"""Hold a contract to the declared interface of the glue it binds (runtime/glue/*.py).

The glue is the code that really runs, so everything the contract says about the
tensors the glue passes, the view its kernel reads, the activations it computes,
the dtypes and hidden-dim padding must agree with that glue's `INTERFACE`. Any
disagreement is a located diagnostic; a module that would crash or compute
something else is never produced.
"""

from __future__ import annotations

from layoutc.compiler import glues, ir
from layoutc.compiler.cases import MAX_ASSIGNMENTS, glue_activation
from layoutc.compiler.check.admitted import admitted
from layoutc.compiler.check.ties import Side, alternatives, disagreement
from layoutc.compiler.diagnostics import Diagnostic, Related, Span, error
from layoutc.compiler.evaluate import EvalError, TooLarge, eval_expr, finite_values, param_deps
from layoutc.runtime.interface import GlueInterface
from layoutc.runtime.vocab import ACTIVATIONS


def activations(contract: ir.Contract) -> frozenset[str] | None:
    """Every activation the glue can be passed (None: not a finite expression)."""
    act = glue_activation(contract)
    if act is None:
        return None
    params = {p.name: p for p in contract.params}
    lets = {let.name: let for let in contract.lets}
    try:
        values = finite_values(act, params, lets, limit=MAX_ASSIGNMENTS)
    except TooLarge:
        return None
    return None if values is None else frozenset(str(v) for v in values)


def check_binding(contract: ir.Contract) -> list[Diagnostic]:
    """Diagnostics for every way `contract` disagrees with its glue's interface (none if no glue)."""
    if contract.glue is None:
        return []
    glue = glues.registry().get(contract.glue.kind)
    if glue is None:
        return []  # LC501 was reported already
    return _Binding(contract, glue.interface).run()


class _Binding:
    def __init__(self, contract: ir.Contract, interface: GlueInterface) -> None:
        self.c = contract
        self.i = interface
        self.diags: list[Diagnostic] = []
        assert contract.glue is not None
        self.glue = contract.glue
        self.where = (Related(self.glue.span, f"the contract binds glue `{interface.kind}` here"),)

    def err(self, code: str, span: Span, message: str, help: str | None = None) -> None:
        self.diags.append(error(code, span, message, related=self.where, help=help))

    def run(self) -> list[Diagnostic]:
        self.ops()
        for t in self.c.tensors:
            self.tensor(t)
        self.experts()
        self.acts()
        return self.diags

    def ops(self) -> None:
        declared = dict(self.i.ops)
        for slot, target in self.glue.ops:
            if declared.get(slot) not in (None, target):
                self.err("LC529", self.glue.span, f"glue `{self.i.kind}` calls `{declared[slot]}` for `{slot}`, "
                         f"not `{target}`", help=f"write `op {slot} = \"{declared[slot]}\"`")
        if self.glue.package != self.i.package:
            self.err("LC529", self.glue.span, f"glue `{self.i.kind}` runs the kernel of `{self.i.package}`, "
                     f"not `{self.glue.package}`", help=f"write `package \"{self.i.package}\"`")

    def tensor(self, t: ir.Tensor) -> None:
        slot = self.i.slot(t.kind, t.projection)
        if slot is None:
            passed = ", ".join(f"{s.kind} {s.projection}" for s in self.i.tensors)
            self.err("LC520", t.span, f"glue `{self.i.kind}` never passes a {t.kind} of {t.projection} to its "
                     f"kernel, so `{t.name}` would never be applied", help=f"it passes: {passed}")
            return
        names = tuple(a.name for a in t.axes)
        if names != slot.axes:
            self.err("LC521", t.span, f"`{t.name}` declares its axes as ({', '.join(names)}), but glue "
                     f"`{self.i.kind}` passes it to the kernel as ({', '.join(slot.axes)})",
                     help="declare the axes in the kernel's order")
            return
        if t.kind == "weight" and isinstance(t.storage, ir.ParamStorage):
            self.dtypes(t, t.storage)
        elif t.kind == "weight" and str(t.storage) not in self.i.dtypes:
            self.err("LC527", t.span, f"`{t.name}` is stored as {t.storage}; glue `{self.i.kind}` takes "
                     f"{', '.join(self.i.dtypes)}")
        for axis_name, target in slot.tied:
            _kind, ref = target.split(" ")
            tname, aname = ref.split(".")
            weight = self.c.weight(tname)
            broken = disagreement(self.c, Side(t, axis_name), Side(weight, aname))
            if broken is not None:
                self.err("LC522", t.axis(axis_name).span, f"`{t.name}.{axis_name}` must follow "
                         f"`{weight.name}.{aname}` row for row (the kernel adds it to w13's output lanes)"
                         f"{broken}", help=f"declare `axis {axis_name} = like {weight.name}.{aname}`")
        # A padded experts axis is admitted: expert ids are bounded by the logical experts
        # (KernelConfig.num_experts), so a padded expert is never routed (issue 20).
        hidden = {"w13": "k", "w2": "n"}[t.projection] if t.kind == "weight" else ""
        if not self.i.pads_hidden and hidden in names:
            for axis in alternatives(t, hidden):
                if axis.is_padded:
                    self.err("LC523", axis.span, f"`{t.name}.{hidden}` pads the hidden dim, but glue "
                             f"`{self.i.kind}` neither pads hidden states nor unpads the output: the kernel "
                             "would read past its tensors", help=f"declare `axis {hidden} = SIZE` unpadded")

    def constants(self, activation: str, constants: tuple[tuple[str, int], ...]) -> None:
        """The kernel fixes `activation`'s constants: the contract must say so (LC530)."""
        names = {p.name for p in self.c.params}
        missing = [n for n, _ in constants if n not in names]
        shown = " and ".join(f"{n} == {v}" for n, v in constants)
        if missing:
            self.err("LC530", self.glue.span, f"glue `{self.i.kind}` computes {activation} with fixed constants "
                     f"({shown}), but the contract has no parameter {', '.join(missing)}: a model with other "
                     "constants would run silently wrong",
                     help=f"declare e.g. `param {missing[0]}: int in {{0, {dict(constants)[missing[0]]}}} = 0` and "
                     f"`admit activation != {activation} or ({shown}) : \"...\"`")
            return
        for n, _ in constants:
            p = self.c.param(n)
            if not p.finite:
                self.err("LC530", p.span, f"`{n}` must have a finite domain (an int set) so the checker can see "
                         f"that {activation} is admitted only with {shown}")
                return
        found = _admitted_constants(self.c, activation, constants)
        if found is not None:
            wrong, env = found
            shown_env = ", ".join(f"{k}={v}" for k, v in env.items())
            self.err("LC530", self.c.param(wrong).span, f"the contract admits {activation} with {shown_env}, but "
                     f"glue `{self.i.kind}`'s kernel fixes {shown}: that model would run silently wrong",
                     help=f"admit activation != {activation} or ({shown})")

    def dtypes(self, t: ir.Tensor, storage: ir.ParamStorage) -> None:
        param = self.c.param(storage.param)
        bad = [str(v) for v in param.values if str(v) not in self.i.dtypes]
        if bad:
            self.err("LC527", t.span, f"`{t.name}` may be stored as {', '.join(bad)} (parameter `{param.name}`); "
                     f"glue `{self.i.kind}` takes {', '.join(self.i.dtypes)}",
                     help=f"remove {', '.join(bad)} from `{param.name}`")

    def experts(self) -> None:
        """Every experts axis has w13's logical size (expert ids are bounded by it), and w2 is
        padded like w13 (the kernel batches both weights over one experts axis), in every
        admitted configuration (LC528; see check/ties.py for how sizes are compared)."""
        w13 = self.c.weight("w13")
        if "experts" not in {a.name for a in w13.axes}:
            return
        w2 = self.c.weight("w2")
        for t in self.c.tensors:
            if t is w13 or "experts" not in {a.name for a in t.axes}:
                continue
            broken = disagreement(self.c, Side(t, "experts"), Side(w13, "experts"), structure=False, padded=False)
            if broken is not None:
                self.err("LC528", t.axis("experts").span, f"`{t.name}.experts` and `{w13.name}.experts` must be "
                         f"the same size: expert ids are bounded by the weights' experts axis{broken}")
            elif t is w2:
                broken = disagreement(self.c, Side(w2, "experts"), Side(w13, "experts"), structure=False,
                                      logical=False)
                if broken is not None:
                    self.err("LC528", w2.axis("experts").span, f"`{w2.name}.experts` and `{w13.name}.experts` must "
                             f"be padded alike: the kernel batches both weights over one experts axis{broken}")

    def acts(self) -> None:
        values = activations(self.c)
        names = ", ".join(a.name for a in self.i.activations)
        if values is None:
            if glue_activation(self.c) is None and "activation" in self.i.args:
                return  # LC502 was reported already
            if "activation" in self.i.args:
                self.err("LC524", self.glue.span, "the glue's activation must be an activation name or a finite "
                         "enum parameter of them")
                return
            values = frozenset(a.name for a in self.i.activations[:1])
        act = glue_activation(self.c)
        if act is not None and not param_deps(act, {let.name: let for let in self.c.lets}):
            # plan() must name the model's activation, or it admits models with another one
            # (issue 11: a swigluoai-only contract ran Gemma-4's gelu_tanh weights, error 1.73).
            self.err("LC524", act.span, f"the glue's activation is fixed to {', '.join(sorted(values))}, so plan() "
                     "would accept a model with any other activation and run it as this one",
                     help=f"declare `param activation: enum {{{', '.join(sorted(values))}}}` and bind it")
        elif act is not None:
            why = _model_activation(self.c, act)
            if why is not None:
                self.err("LC524", act.span, why[0], help=why[1])
        unknown = sorted(v for v in values if self.i.activation(v) is None)
        if unknown:
            self.err("LC524", self.glue.span, f"glue `{self.i.kind}` does not compute {', '.join(unknown)}; "
                     f"it computes {names}", help="remove them from the activation parameter")
        w13 = self.c.weight("w13")
        for axis in alternatives(w13, "n"):
            if axis.segments != 2:
                self.err("LC525", axis.span, f"`{w13.name}.n` is not segmented into gate and up, but every "
                         f"activation of glue `{self.i.kind}` is gated (act(gate) * up)",
                         help="declare `axis n = halves(gate | up, L -> P)` or `interleave(...)`")
        for v in sorted(values):
            declared = self.i.activation(v)
            if declared is not None and declared.constants:
                self.constants(v, declared.constants)
        kernel = self.c.kernel
        if kernel is None:
            return
        for view in kernel.views:
            if (view.tensor, view.axis) != (w13.name, "n"):
                continue
            for v in sorted(values):
                declared = self.i.activation(v)
                if declared is not None and (declared.view, declared.roles) != (view.view, view.roles):
                    self.err("LC526", view.span, f"the contract says the kernel reads `{w13.name}.n` as "
                             f"{view.view}({' | '.join(view.roles)}), but glue `{self.i.kind}`'s kernel reads it "
                             f"as {declared.view}({' | '.join(declared.roles)}) for {v}",
                             help="drop the `view` clause: the glue's interface gives the view")
                    return


def _admitted_constants(contract: ir.Contract, activation: str,
                        constants: tuple[tuple[str, int], ...]) -> tuple[str, dict[str, int]] | None:
    """A combination the rules admit where `activation` runs with a constant other than the
    kernel's: (parameter, assignment), or None when every admitted one pins them all."""
    lets = {let.name: let for let in contract.lets}
    act = glue_activation(contract)
    assert act is not None
    envs = admitted(contract, param_deps(act, lets) | {n for n, _ in constants}, (act,))
    if envs is None:
        return None  # a range-typed constant: reported as not pinned by the caller
    for env in envs:
        try:
            runs = eval_expr(act, env)
        except EvalError:
            continue
        wrong = next((n for n, v in constants if env[n] != v), None)
        if runs == activation and wrong is not None:
            return wrong, {n: int(env[n]) for n, _ in constants}
    return None


def _model_activation(contract: ir.Contract, act: ir.Expr) -> tuple[str, str | None] | None:
    """Why the glue's activation `act` may not be the model's, or None when it is.

    The model's activation is the enum parameter of activations that plan() takes: the
    glue must run exactly that value, so `act` is that parameter itself or an expression
    equal to it on every admitted configuration (issue 20: a `let` that mapped swigluoai
    to gelu proved, then ran gelu for the model's swigluoai). Returns (message, help).
    """
    if isinstance(act, ir.Ref) and act.kind == "param":
        return None
    lets = {let.name: let for let in contract.lets}
    deps = param_deps(act, lets)
    candidates = sorted(n for n in deps if isinstance(contract.param(n).type, ir.EnumT)
                        and all(str(v) in ACTIVATIONS for v in contract.param(n).values))
    if len(candidates) != 1:
        return ("the glue's activation must be the model's activation: bind the activation parameter itself "
                f"(this expression reads {', '.join(sorted(deps))}, and no single enum parameter of "
                "activations it could equal)", "write `arg activation = activation` and `activation activation`")
    model = candidates[0]
    envs = admitted(contract, deps, (act,))
    if envs is None:
        return (f"the glue's activation is an expression over `{', '.join(sorted(deps))}`, too many "
                f"combinations to show that it always equals `{model}`",
                f"bind `{model}` itself")
    for env in envs:
        try:
            runs = eval_expr(act, env)
        except EvalError:
            continue
        if runs != env[model]:
            shown = ", ".join(f"{k}={env[k]}" for k in sorted(deps))
            return (f"with {shown} (admitted) the model's activation is {env[model]}, but the glue's "
                    f"activation expression gives {runs}: the kernel would run {runs} for a {env[model]} model",
                    f"bind `{model}` itself")
    return None
