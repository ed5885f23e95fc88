"""Checking the `kernel` and `glue` declarations."""

from __future__ import annotations

import re

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.base import GLUE_KINDS, _suggest
from layoutc.compiler.check.tensors import TensorChecks
from layoutc.compiler.diagnostics import Related, Span


class KernelChecks(TensorChecks):
    """The kernel's views, alignments, activation and arguments, and the glue binding."""

    # ---- kernel ----
    def kernel(self, d: A.KernelDecl) -> ir.Kernel | None:
        views: list[ir.View] = []
        aligns: list[ir.Align] = []
        args: list[ir.KernelArg] = []
        activation: ir.Expr | None = None
        seen_views: dict[tuple[str, str], Span] = {}
        arg_names: dict[str, Span] = {}
        for cl in d.clauses:
            if isinstance(cl, A.ViewClause):
                axis = self.axis_ref(cl.tensor, cl.axis, cl.span)
                if axis is None:
                    continue
                key = (cl.tensor, cl.axis)
                owner = self.tensors.get(cl.tensor)
                if owner is not None and owner.kind != "weight":
                    self.err("LC405", cl.span, f"`{cl.tensor}` is a {owner.kind} of {owner.projection}: the kernel reads "
                             f"it with its weight's view; declare the view on the `weight {owner.projection}` tensor")
                    continue
                if key in seen_views:
                    self.err("LC202", cl.span, f"`{cl.tensor}.{cl.axis}` already has a view",
                             related=(Related(seen_views[key], "first view here"),))
                    continue
                seen_views[key] = cl.span
                if cl.view != "linear" and axis.segments != 2:
                    self.err("LC405", cl.span, f"`{cl.view}` view on `{cl.tensor}.{cl.axis}`, which is not "
                             "segmented into gate and up")
                    continue
                if cl.roles and sorted(cl.roles) != ["gate", "up"]:
                    self.err("LC403", cl.span, f"the kernel's view roles must be `gate` and `up`, found "
                             f"{' | '.join(cl.roles)}")
                    continue
                if cl.view == "linear" and axis.segments == 2:
                    self.err("LC405", cl.span, f"`{cl.tensor}.{cl.axis}` is segmented; the kernel must read it "
                             "as `halves` or `interleave`")
                    continue
                views.append(ir.View(cl.tensor, cl.axis, cl.view, cl.roles, cl.span))
            elif isinstance(cl, A.AlignClause):
                cond = self.expr(cl.cond, axes=True)
                if cond is not None and self.expect(cond, ir.BOOL):
                    aligns.append(ir.Align(cond, cl.message, cl.span))
            elif isinstance(cl, A.ActivationClause):
                if activation is not None:
                    self.err("LC206", cl.span, "the kernel has more than one `activation` clause")
                    continue
                activation = self.activation(cl)
            else:
                if cl.name in arg_names or not self.check_name(cl.name, cl.span):
                    if cl.name in arg_names:
                        self.err("LC202", cl.span, f"kernel argument `{cl.name}` is defined twice",
                                 related=(Related(arg_names[cl.name], "first defined here"),))
                    continue
                arg_names[cl.name] = cl.span
                value = self.expr(cl.value)
                if value is None or not self.expect(value, ir.INT):
                    continue
                trims: list[tuple[str, str]] = []
                for ref in cl.trims:
                    axis = self.axis_ref(ref.tensor, ref.axis, ref.span)
                    if axis is None:
                        continue
                    if not axis.is_padded:
                        self.err("LC504", ref.span, f"`{ref.tensor}.{ref.axis}` is never padded, so the kernel "
                                 "cannot trim it")
                        continue
                    trims.append((ref.tensor, ref.axis))
                count = self.expr(cl.trim_count, self_arg=(cl.name, value))
                if count is None or not self.expect(count, ir.INT) or len(trims) != len(cl.trims):
                    continue
                args.append(ir.KernelArg(cl.name, value, tuple(trims), count, cl.span))
        return ir.Kernel(d.name, tuple(views), tuple(aligns), activation, tuple(args), d.span)

    def activation(self, cl: A.ActivationClause) -> ir.Expr | None:
        return self.activation_expr(cl.value, cl.span)

    def activation_expr(self, node: A.Expr, span: Span) -> ir.Expr | None:
        """An activation: a known activation name, or an enum of them."""
        if isinstance(node, A.Name) and node.name not in self.members and node.name not in self.params \
                and node.name not in self.lets and node.name not in self.poisoned:
            if node.name in ir.ACTIVATIONS:
                return ir.Const(node.name, ir.EnumT("activation", (node.name,)), span)
            self.err("LC503", node.span, f"unknown activation `{node.name}`; known: "
                     + ", ".join(sorted(ir.ACTIVATIONS)), help=_suggest(node.name, list(ir.ACTIVATIONS)))
            return None
        cl_span = span
        value = self.expr(node)
        if value is None:
            return None
        if not isinstance(value.type, ir.EnumT):
            self.err("LC503", cl_span, "the kernel's activation must be an activation name or an enum "
                     "parameter of activations")
            return None
        unknown = [m for m in value.type.members if m not in ir.ACTIVATIONS]
        if unknown:
            self.err("LC503", cl_span, f"unknown activation {', '.join(unknown)}; known: "
                     + ", ".join(sorted(ir.ACTIVATIONS)), help=_suggest(unknown[0], list(ir.ACTIVATIONS)))
            return None
        return value

    def glue(self, d: A.GlueDecl) -> ir.Glue | None:
        spec = GLUE_KINDS.get(d.kind)
        if spec is None:
            self.err("LC501", d.span, f"unknown glue kind `{d.kind}`",
                     help=_suggest(d.kind, list(GLUE_KINDS)) or f"known: {', '.join(sorted(GLUE_KINDS))}")
            return None
        ok = True
        if len(d.package) != 1:
            self.err("LC502", d.span, f"glue `{d.kind}` needs exactly one `package` clause")
            ok = False
        ops: dict[str, str] = {}
        given: dict[str, Span] = {}
        for name, target, span in d.ops:
            if name in given:
                self.err("LC502", span, f"op `{name}` is given twice", related=(Related(given[name], "first given here"),))
                ok = False
                continue
            given[name] = span
            if name not in spec.ops:
                self.err("LC502", span, f"glue `{d.kind}` has no op slot `{name}`; slots: {', '.join(spec.ops)}",
                         help=_suggest(name, list(spec.ops)))
                ok = False
                continue
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*", target):
                self.err("LC502", span, f"op `{target[:80]}` must look like `namespace::name`")
                ok = False
                continue
            ops[name] = target
        for name in spec.ops:
            if name not in given:
                self.err("LC502", d.span, f"glue `{d.kind}` needs `op {name} = \"namespace::name\"`")
                ok = False
        args: dict[str, ir.Expr] = {}
        given_args: dict[str, Span] = {}
        for name, value, span in d.args:
            if name in given_args:
                self.err("LC502", span, f"argument `{name}` is given twice",
                         related=(Related(given_args[name], "first given here"),))
                ok = False
                continue
            given_args[name] = span
            if name not in spec.args:
                self.err("LC502", span, f"glue `{d.kind}` has no argument `{name}`; arguments: "
                         f"{', '.join(spec.args) or 'none'}", help=_suggest(name, list(spec.args)))
                ok = False
                continue
            defined = isinstance(value, A.Name) and (value.name in self.params or value.name in self.lets
                                                     or value.name in self.members or value.name in self.poisoned)
            bare = name == "activation" and isinstance(value, A.Name) and not defined
            e = self.activation_expr(value, span) if bare else self.expr(value)
            if e is None:
                ok = False
                continue
            args[name] = e
        for name in spec.args:
            if name not in given_args:
                self.err("LC502", d.span, f"glue `{d.kind}` needs `arg {name} = ...`")
                ok = False
        if not ok:
            return None
        return ir.Glue(d.kind, d.package[0][0], tuple(sorted(ops.items())),
                       tuple(sorted(args.items())), d.span)

    def glue_matches_kernel(self, glue: ir.Glue, kernel: ir.Kernel) -> None:
        """The activation the glue passes to the kernel is the one the contract verified."""
        for name, value in glue.args:
            if name != "activation":
                continue
            if kernel.activation is None or ir.shape(value) != ir.shape(kernel.activation):
                self.err("LC502", glue.span, "the glue's `arg activation` must be exactly the kernel's `activation` "
                         "clause: the verifier proves the layout for the kernel's activation only",
                         related=(Related(kernel.span, "the kernel block"),))
