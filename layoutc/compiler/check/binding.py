"""Hold a contract to the declared interface of the glue it binds (runtime/glue/*.py).

The glue is the code that really runs, so everything the contract says about the
tensors the glue passes, the view its kernel reads, the activations it computes,
the dtypes and hidden-dim padding must agree with that glue's `INTERFACE`. Any
disagreement is a located diagnostic; a module that would crash or compute
something else is never produced.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from layoutc.compiler import glues, ir
from layoutc.compiler.cases import MAX_ASSIGNMENTS, glue_activation
from layoutc.compiler.diagnostics import Diagnostic, Related, Span, error
from layoutc.compiler.evaluate import EvalError, TooLarge, Value, eval_expr, finite_values, needed_lets, param_deps
from layoutc.runtime.interface import GlueInterface


def _same_axis(a: ir.Axis, b: ir.Axis) -> bool:
    return (a.layout, a.roles, a.pack, ir.shape(a.logical), ir.shape(a.padded)) == \
        (b.layout, b.roles, b.pack, ir.shape(b.logical), ir.shape(b.padded))


def _alternatives(t: ir.Tensor, name: str) -> list[ir.Axis]:
    return [a for a in t.axes if a.name == name] + [g.axis for g in t.guarded if g.axis.name == name]


def _chosen(t: ir.Tensor, name: str, env: dict[str, Value]) -> ir.Axis:
    """The alternative of `t.name` that applies under `env` (the first `when` that holds, else the default)."""
    for g in t.guarded:
        if g.axis.name == name and eval_expr(g.guard, env) is True:
            return g.axis
    return t.axis(name)


def _normal(e: ir.Expr, env: dict[str, Value], lets: dict[str, ir.Let]) -> object:
    """`e`'s structure with the finite parameters of `env` substituted, lets inlined and every
    fully known part evaluated: equal for two spellings of one size under that assignment."""
    if param_deps(e, lets) <= env.keys():
        try:
            return ("const", eval_expr(e, env))
        except EvalError:
            pass
    match e:
        case ir.Ref() if e.kind == "let" and e.name in lets:
            return _normal(lets[e.name].value, env, lets)
        case ir.Op():
            return ("op", e.op, *(_normal(a, env, lets) for a in e.args))
        case ir.Cond():
            cond = _normal(e.cond, env, lets)
            if cond in (("const", True), ("const", False)):
                return _normal(e.then if cond == ("const", True) else e.orelse, env, lets)
            return ("if", cond, _normal(e.then, env, lets), _normal(e.orelse, env, lets))
        case ir.Select():
            subject = _normal(e.subject, env, lets)
            if isinstance(subject, tuple) and subject[0] == "const":
                arm = next((v for m, v in e.cases if m == subject[1]), e.default)
                if arm is not None:
                    return _normal(arm, env, lets)
            return ("match", subject, *((m, _normal(v, env, lets)) for m, v in e.cases),
                    None if e.default is None else _normal(e.default, env, lets))
        case _:
            return ir.shape(e)


def _show_axis(a: ir.Axis) -> str:
    if a.layout == "none":
        return "a plain axis"
    roles = " | ".join(a.roles)
    return f"{a.layout}({roles + ', ' if roles else ''}...)"


def _tie_broken(contract: ir.Contract, t: ir.Tensor, name: str, weight: ir.Tensor, wname: str) -> str | None:
    """Why `t.name` does not follow `weight.wname` row for row, or None when it does.

    The tie is judged by what it denotes, not its spelling (issue 20): for every admitted
    assignment of the finite parameters the guards and sizes read, the alternative that
    applies on each side has the same layout, roles and packing, and sizes that agree once
    those parameters are substituted and lets inlined. Returns a clause for the message.
    """
    lets = {let.name: let for let in contract.lets}
    mine, theirs = _alternatives(t, name), _alternatives(weight, wname)
    guards = [g.guard for g in (*t.guarded, *weight.guarded) if g.axis.name in (name, wname)]
    sizes = [e for a in (*mine, *theirs) for e in (a.logical, a.padded)]
    finite = {n for e in (*guards, *sizes) for n in param_deps(e, lets) if contract.param(n).finite}
    envs = _admitted(contract, finite, (*guards, *sizes))
    if envs is None:  # too many combinations: the tie must be spelled alike
        same = len(mine) == len(theirs) and all(_same_axis(a, b) for a, b in zip(mine, theirs, strict=False))
        return None if same else ""
    for env in envs:
        try:
            a, b = _chosen(t, name, env), _chosen(weight, wname, env)
        except EvalError:
            continue
        if (a.layout, a.roles, a.pack) != (b.layout, b.roles, b.pack) or \
                _normal(a.logical, env, lets) != _normal(b.logical, env, lets) or \
                _normal(a.padded, env, lets) != _normal(b.padded, env, lets):
            shown = ", ".join(f"{k}={env[k]}" for k in sorted(finite)) or "every configuration"
            return f": with {shown}, `{t.name}.{name}` is {_show_axis(a)} and `{weight.name}.{wname}` is {_show_axis(b)}" \
                + ("" if (a.layout, a.roles) != (b.layout, b.roles) else ", with other sizes")
    return None


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
        if t.kind == "weight" and t.storage.removeprefix("param:") != t.storage:
            self.dtypes(t)
        elif t.kind == "weight" and t.storage not in self.i.dtypes:
            self.err("LC527", t.span, f"`{t.name}` is stored as {t.storage}; glue `{self.i.kind}` takes "
                     f"{', '.join(self.i.dtypes)}")
        for axis_name, target in slot.tied:
            _kind, ref = target.split(" ")
            tname, aname = ref.split(".")
            weight = self.c.weight(tname)
            broken = _tie_broken(self.c, t, axis_name, weight, aname)
            if broken is not None:
                self.err("LC522", t.axis(axis_name).span, f"`{t.name}.{axis_name}` must follow "
                         f"`{weight.name}.{aname}` row for row (the kernel adds it to w13's output lanes)"
                         f"{broken}", help=f"declare `axis {axis_name} = like {weight.name}.{aname}`")
        # A padded experts axis is admitted: expert ids are bounded by the logical experts
        # (KernelConfig.num_experts), so a padded expert is never routed (issue 20).
        hidden = {"w13": "k", "w2": "n"}[t.projection] if t.kind == "weight" else ""
        if not self.i.pads_hidden and hidden in names:
            for axis in _alternatives(t, hidden):
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

    def dtypes(self, t: ir.Tensor) -> None:
        param = self.c.param(t.storage.removeprefix("param:"))
        bad = [str(v) for v in param.values if str(v) not in self.i.dtypes]
        if bad:
            self.err("LC527", t.span, f"`{t.name}` may be stored as {', '.join(bad)} (parameter `{param.name}`); "
                     f"glue `{self.i.kind}` takes {', '.join(self.i.dtypes)}",
                     help=f"remove {', '.join(bad)} from `{param.name}`")

    def experts(self) -> None:
        w13 = self.c.weight("w13")
        ref = w13.axis("experts") if "experts" in {a.name for a in w13.axes} else None
        if ref is None:
            return
        w2 = self.c.weight("w2")
        for t in self.c.tensors:
            for axis in _alternatives(t, "experts"):
                if t is not w13 and ir.shape(axis.logical) != ir.shape(ref.logical):
                    self.err("LC528", axis.span, f"`{t.name}.experts` and `{w13.name}.experts` must be the same "
                             "size: expert ids are bounded by the weights' experts axis")
                elif t is w2 and ir.shape(axis.padded) != ir.shape(ref.padded):
                    # the two weights are batched over the same experts (offsets, a batch dim)
                    self.err("LC528", axis.span, f"`{w2.name}.experts` and `{w13.name}.experts` must be padded "
                             "alike: the kernel batches both weights over one experts axis")

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
        for axis in _alternatives(w13, "n"):
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


def _finite_rules(contract: ir.Contract, names: set[str]) -> list[ir.Rule]:
    """The requires and admits that read only the parameters `names` (through lets)."""
    lets = {let.name: let for let in contract.lets}
    return [r for r in contract.rules if param_deps(r.cond, lets) <= names]


def _admitted(contract: ir.Contract, names: set[str], exprs: tuple[ir.Expr, ...]) -> Iterator[dict[str, Value]] | None:
    """Every assignment of the finite parameters `names` that the rules reading only those
    parameters admit, with the lets `exprs` need evaluated. Rules that read other parameters
    are taken as satisfiable (so a caller looking for a bad assignment errs towards finding
    one). None when a parameter ranges over an interval or the product exceeds MAX_ASSIGNMENTS."""
    lets = {let.name: let for let in contract.lets}
    order = sorted(names)
    params = [contract.param(n) for n in order]
    if any(not p.finite for p in params) or math.prod(len(p.values) for p in params) > MAX_ASSIGNMENTS:
        return None
    rules = _finite_rules(contract, names)
    # the lets `exprs` read that these parameters decide (the others stay symbolic)
    known = {let.name: let for expr in exprs for let in needed_lets(expr, lets) if param_deps(let.value, lets) <= names}
    computable = [let for let in contract.lets if let.name in known]

    def generate() -> Iterator[dict[str, Value]]:
        for combo in itertools.product(*(p.values for p in params)):
            env: dict[str, Value] = dict(zip(order, combo, strict=True))
            try:
                for let in computable:
                    env[let.name] = eval_expr(let.value, env)
                admitted = True
                for rule in rules:
                    scope = dict(env)
                    for let in needed_lets(rule.cond, lets):
                        scope[let.name] = eval_expr(let.value, scope)
                    if eval_expr(rule.cond, scope) is not True:
                        admitted = False
                        break
            except EvalError:
                continue
            if admitted:
                yield env

    return generate()


def _admitted_constants(contract: ir.Contract, activation: str,
                        constants: tuple[tuple[str, int], ...]) -> tuple[str, dict[str, int]] | None:
    """A combination the rules admit where `activation` runs with a constant other than the
    kernel's: (parameter, assignment), or None when every admitted one pins them all."""
    lets = {let.name: let for let in contract.lets}
    act = glue_activation(contract)
    assert act is not None
    envs = _admitted(contract, param_deps(act, lets) | {n for n, _ in constants}, (act,))
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
                        and all(str(v) in ir.ACTIVATIONS for v in contract.param(n).values))
    if len(candidates) != 1:
        return ("the glue's activation must be the model's activation: bind the activation parameter itself "
                f"(this expression reads {', '.join(sorted(deps))}, and no single enum parameter of "
                "activations it could equal)", "write `arg activation = activation` and `activation activation`")
    model = candidates[0]
    envs = _admitted(contract, deps, (act,))
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
