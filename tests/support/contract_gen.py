"""Random contract text for the robustness tests (not a test module).

* ``generate(rng)``: a grammar-aware generator. It builds contracts from every
  construct of ``layoutc/compiler/grammar.lark`` (params of each domain, lets with nested
  expressions, tensors with every axis spec and clause, kernel and glue). With
  probability ``skeleton`` the output follows the shape of a real contract
  (contract, source, policy, the usual parameters, one w13 and one w2 weight,
  kernel, glue) so that many inputs get past the parser into the checker and
  some all the way through it; otherwise declarations are drawn freely.
* ``tokens`` / ``token_mutate`` / ``byte_mutate``: cheap mutators for existing
  contract text, driven by a seeded ``random.Random``.
* ``declarations``: the top-level declarations of a contract, for short
  "window" inputs (parsing costs ~7 us per token, so short inputs keep the
  per-run budget of 20,000+ inputs to a few seconds).
"""

from __future__ import annotations

import random
import re

MAX_INT = 1 << 62

KEYWORDS = (
    "contract", "source", "policy", "error", "fallback", "param", "int", "in", "enum", "bool", "let",
    "require", "admit", "tensor", "weight", "scale", "zero", "bias", "optional", "axis", "fill", "storage",
    "code", "decode", "pad", "halves", "concat", "interleave", "groups", "like", "pack", "decoded", "uninit",
    "kernel", "view", "linear", "align", "activation", "arg", "trims", "by", "glue", "package", "op",
    "if", "then", "else", "or", "and", "not", "true", "false", "match",
)
PUNCT = ("..", "->", "=>", "==", "!=", "<=", ">=", "<", ">", "{", "}", "(", ")", ",", ":", "=", "|", ".",
         "+", "-", "*", "/", "%", "#")
PARAM_NAMES = ("num_experts", "hidden_size", "intermediate_size", "tp_size", "isa", "activation", "dtype",
               "group_size", "bits", "a", "b", "c")
ENUM_MEMBERS = ("vec", "amx", "neon", "silu", "gelu", "swigluoai", "relu2", "bfloat16", "float16", "float32",
                "int8", "int32", "uint8", "x", "y", "z")
# Names the checker must refuse or that collide with the generated module's own names.
ODD_NAMES = ("_", "__import__", "__x", "os", "exec", "eval", "print", "class", "def", "lambda", "None",
             "match", "case", "type", "plan", "Plan", "torch", "math", "self", "reason", "supported",
             "_check_int", "_round_up", "_broken", "_LOG", "LayoutContractError", "itertools", "x" * 65)
FUNCS = ("round_up", "round_down", "cdiv", "lcm", "gcd", "min", "max", "floor", "pow")
TENSORS = ("w13", "w2", "w13_bias", "w2_bias", "w13_scale", "w2_scale", "w13_zero", "t")
AXES = ("experts", "n", "k", "m")
DTYPES = ("bfloat16", "float16", "float32", "int32", "int8", "uint8", "int16", "float8_e4m3fn", "float64")
GLUE = ("vllm_cpu_moe", "zentorch_moe", "torch_grouped_mm", "torch_int4pack", "torch_int8pack", "nope")
GLUE_OPS = ("prepack", "forward", "convert")
GLUE_ARGS = ("isa", "activation", "group_size", "inner_k_tiles")
STRINGS = ('"s"', '""', '"vllm 0.32.0: a/b.py"', '"q\\"uote"', '"back\\\\slash"', '"tab\\t"', '"nl\\n"',
           '"{{ x }}"', '"{% if %}"', '"\\u202e"', '"\u202e"', '"\u0430"', '"_C::op"', '"torch::x"',
           '"a::b::c"', '""""', '"\'\'\'"', '"\\x00"', '"\x7f"')


class Gen:
    """One random contract; `depth` bounds expression nesting."""

    def __init__(self, rng: random.Random, max_depth: int = 4) -> None:
        self.r = rng
        self.max_depth = max_depth
        self.names: list[str] = list(PARAM_NAMES[:4])
        self.members: list[str] = list(ENUM_MEMBERS[:3])

    # ---- leaves ----
    def name(self) -> str:
        r = self.r.random()
        if r < 0.75 and self.names:
            return self.r.choice(self.names)
        if r < 0.85 and self.members:
            return self.r.choice(self.members)
        if r < 0.95:
            return self.r.choice(PARAM_NAMES + ENUM_MEMBERS)
        return self.r.choice(ODD_NAMES)

    def fresh(self) -> str:
        r = self.r.random()
        if r < 0.04:
            return self.r.choice(ODD_NAMES)
        if r < 0.10 and self.names:
            return self.r.choice(self.names)  # a duplicate definition
        name = self.r.choice(("l", "v", "sz", "pad", "p", "q")) + str(self.r.randrange(100))
        self.names.append(name)
        return name

    def int(self) -> str:
        r = self.r.random()
        if r < 0.7:
            return str(self.r.choice((0, 1, 2, 4, 8, 16, 32, 64, 128, 3, 7)))
        if r < 0.85:
            return str(self.r.randrange(1 << 16))
        return str(self.r.choice((MAX_INT, MAX_INT + 1, MAX_INT - 1, 10 ** 30, 0)))

    def signed(self) -> str:
        return ("-" if self.r.random() < 0.15 else "") + self.int()

    def string(self) -> str:
        return self.r.choice(STRINGS) if self.r.random() < 0.3 else '"msg"'

    # ---- expressions ----
    def expr(self, depth: int = 0, axes: bool = False) -> str:
        if depth >= self.max_depth or self.r.random() < 0.3 + 0.15 * depth:
            return self.atom(axes)
        d = depth + 1
        k = self.r.randrange(11)
        if k == 0:
            return f"if {self.cond(d, axes)} then {self.expr(d, axes)} else {self.expr(d, axes)}"
        if k == 1:
            return f"{self.expr(d, axes)} {self.r.choice(('or', 'and'))} {self.expr(d, axes)}"
        if k == 2:
            return f"not {self.expr(d, axes)}"
        if k == 3:
            return f"{self.expr(d, axes)} {self.r.choice(('==', '!=', '<', '<=', '>', '>='))} {self.expr(d, axes)}"
        if k in (4, 5):
            return f"{self.expr(d, axes)} {self.r.choice('+-*/%')} {self.expr(d, axes)}"
        if k == 6:
            return f"-{self.expr(d, axes)}"
        if k == 7:
            func = self.r.choice(FUNCS)
            n = self.r.choice((2, 2, 2, 1, 0, 3))
            return f"{func}({', '.join(self.expr(d, axes) for _ in range(n))})"
        if k == 8:
            arms = [f"{self.r.choice([*self.members, '_'])} => {self.expr(d, axes)}"
                    for _ in range(self.r.randrange(1, 5))]
            return f"match {self.name()} {{ {', '.join(arms)}{',' if self.r.random() < 0.2 else ''} }}"
        return f"({self.expr(d, axes)})"

    def cond(self, depth: int, axes: bool) -> str:
        if self.r.random() < 0.6:
            return f"{self.expr(depth, axes)} {self.r.choice(('==', '!=', '<', '>='))} {self.expr(depth, axes)}"
        return self.expr(depth, axes)

    def atom(self, axes: bool) -> str:
        r = self.r.random()
        if r < 0.4:
            return self.name()
        if r < 0.75:
            return self.int()
        if r < 0.8:
            return self.r.choice(("true", "false"))
        if r < 0.9 or not axes:
            return f"round_up({self.name()}, {self.r.choice((2, 4, 16, 32))})"
        return f"{self.r.choice(TENSORS)}.{self.r.choice(AXES)}"

    # ---- declarations ----
    def param(self) -> str:
        name = self.fresh() if self.r.random() < 0.5 else self.r.choice(PARAM_NAMES)
        if name not in self.names:
            self.names.append(name)
        k = self.r.randrange(5)
        if k == 0:
            lo = self.signed()
            hi = self.signed() if self.r.random() < 0.2 else str(self.r.choice((8, 64, 1024, 65536, MAX_INT)))
            return f"param {name}: int in {lo}..{hi}"
        if k == 1:
            vals = [self.signed() for _ in range(self.r.randrange(1, 6))]
            return f"param {name}: int in {{{', '.join(vals)}}}"
        if k == 2:
            return f"param {name}: bool"
        members = []
        for _ in range(self.r.randrange(1, 5)):
            m = self.r.choice(ENUM_MEMBERS) if self.r.random() < 0.9 else self.r.choice(ODD_NAMES)
            members.append(m)
            if m not in self.members:
                self.members.append(m)
        return f"param {name}: enum {{{', '.join(members)}}}"

    def let(self) -> str:
        value = self.expr()
        return f"let {self.fresh()} = {value}"

    def rule(self) -> str:
        return f"{self.r.choice(('require', 'admit'))} {self.cond(1, False)} : {self.string()}"

    def axis_spec(self, name: str) -> str:
        k = self.r.randrange(6)
        size = self.r.choice(self.names) if self.names and self.r.random() < 0.7 else self.expr(2)
        padded = f"round_up({size}, {self.r.choice((2, 4, 32, 64))})" if self.r.random() < 0.7 else self.expr(2)
        pack = f" pack {self.r.choice((1, 2, 4, 8, 0, 65))}" if self.r.random() < 0.15 else ""
        if k <= 1:
            return size
        if k == 2:
            return f"pad({size} -> {padded}){pack}"
        if k == 3:
            layout = self.r.choice(("halves", "concat", "interleave"))
            roles = self.r.choice(("gate | up", "up | gate", "gate | gate", "a | b"))
            return f"{layout}({roles}, {size} -> {padded}){pack}"
        if k == 4:
            return f"groups({self.r.choice(TENSORS)}.{self.r.choice(AXES)}, {self.r.choice(('32', '-1', '128', self.name()))})"
        return f"like {self.r.choice(TENSORS)}.{self.r.choice(AXES)}"

    def tensor(self, name: str | None = None, kind: str | None = None, proj: str | None = None,
               axes: tuple[str, ...] | None = None) -> str:
        name = name or self.r.choice(TENSORS)
        kind = kind or self.r.choice(("weight", "scale", "zero", "bias"))
        proj = proj or self.r.choice(("w13", "w2", "w13", "w2", "w3"))
        opt = " optional" if self.r.random() < 0.2 else ""
        lines = []
        for ax in axes or tuple(self.r.sample(AXES, self.r.randrange(1, 4))):
            lines.append(f"  axis {ax} = {self.axis_spec(ax)}")
        if self.r.random() < 0.9:
            lines.append(f"  storage {self.r.choice((*DTYPES, 'dtype', 'isa'))}")
        if self.r.random() < 0.15:
            lo = self.r.choice(("0", "-8", "-128", "-32768"))
            hi = self.r.choice(("15", "7", "127", "255"))
            lines.append(f"  code {lo}..{hi}")
            lines.append(f"  decode = {self.r.choice(('code', 'code - 8', 'code * 2 + 1', '-code', self.expr(2)))}")
        r = self.r.random()
        if r < 0.8:
            lines.append(f"  fill {self.signed()}")
        elif r < 0.9:
            lines.append(f"  fill decoded {self.signed()}")
        elif r < 0.97:
            lines.append("  fill uninit")
        self.r.shuffle(lines)
        return f"tensor {name}: {kind} {proj}{opt} {{\n" + "\n".join(lines) + "\n}"

    def kernel(self) -> str:
        lines = []
        for _ in range(self.r.randrange(0, 5)):
            k = self.r.randrange(4)
            if k == 0:
                view = self.r.choice(("halves(gate | up)", "interleave(up | gate)", "linear", "halves(a | b)"))
                lines.append(f"  view {self.r.choice(TENSORS)}.{self.r.choice(AXES)} {view}")
            elif k == 1:
                lines.append(f"  align {self.cond(1, True)} : {self.string()}")
            elif k == 2:
                lines.append(f"  activation {self.r.choice(('silu', 'activation', 'gelu', 'relu2', 'bogus', self.name()))}")
            else:
                refs = ", ".join(f"{self.r.choice(TENSORS)}.{self.r.choice(AXES)}" for _ in range(self.r.randrange(1, 3)))
                arg = self.r.choice(("pad_k", "n_pad", "reason", "x"))
                lines.append(f"  arg {arg} = {self.expr(2)} trims {refs} by {self.r.choice((arg, '0', self.expr(2)))}")
        return f"kernel {self.r.choice(('k', 'cpu_fused_moe', 'plan'))} {{\n" + "\n".join(lines) + "\n}"

    def glue(self) -> str:
        lines = []
        if self.r.random() < 0.9:
            lines.append(f"  package {self.string() if self.r.random() < 0.3 else chr(34) + 'pkg==1.0' + chr(34)}")
        for _ in range(self.r.randrange(0, 4)):
            target = self.r.choice(('"_C::prepack_moe_weight"', '"_C::cpu_fused_moe"', '"bad"', self.string()))
            lines.append(f"  op {self.r.choice(GLUE_OPS)} = {target}")
        for _ in range(self.r.randrange(0, 3)):
            lines.append(f"  arg {self.r.choice(GLUE_ARGS)} = {self.expr(2)}")
        return f"glue {self.r.choice(GLUE)} {{\n" + "\n".join(lines) + "\n}"

    def free_decl(self) -> str:
        k = self.r.randrange(12)
        if k == 0:
            return f"contract {self.r.choice(('c', 'x', 'mini', *ODD_NAMES))}"
        if k == 1:
            return f"source {self.string()}"
        if k == 2:
            return self.r.choice(("policy error", "policy fallback loop", f"policy fallback {self.name()}"))
        if k in (3, 4):
            return self.param()
        if k in (5, 6):
            return self.let()
        if k == 7:
            return self.rule()
        if k in (8, 9):
            return self.tensor()
        if k == 10:
            return self.kernel()
        return self.glue()

    # ---- whole contracts ----
    def skeleton(self) -> list[str]:
        r = self.r
        out = [f"contract {r.choice(('c', 'gen', 'mini'))}", 'source "generated"']
        if r.random() < 0.8:
            out.append(r.choice(("policy error", "policy fallback loop")))
        self.names = []
        self.members = []
        out.append("param num_experts: int in 1..64")
        out.append(f"param hidden_size: int in 1..{r.choice((64, 4096, 65536))}")
        out.append(f"param inter: int in {r.choice(('1..64', '{64, 128, 96}', '1..1024'))}")
        self.names += ["num_experts", "hidden_size", "inter"]
        if r.random() < 0.5:
            out.append("param tp_size: int in {1, 2, 4}")
            self.names.append("tp_size")
        if r.random() < 0.5:
            out.append("param activation: enum {silu, gelu, swigluoai}")
            self.names.append("activation")
            self.members += ["silu", "gelu", "swigluoai"]
        if r.random() < 0.5:
            out.append("param isa: enum {vec, amx}")
            self.names.append("isa")
            self.members += ["vec", "amx"]
        for _ in range(r.randrange(0, 4)):
            out.append(self.param() if r.random() < 0.3 else self.let())
        padded = self.fresh()
        out.append(f"let {padded} = round_up(inter, {r.choice((2, 4, 16, 32))})")
        for _ in range(r.randrange(0, 3)):
            out.append(self.rule())
        n13 = r.choice((f"halves(gate | up, inter -> {padded})", f"interleave(gate | up, inter -> {padded})",
                        f"concat(up | gate, inter -> {padded})", f"pad(inter -> {padded})", "inter",
                        self.axis_spec("n")))
        out.append("tensor w13: weight w13 {\n  axis experts = num_experts\n"
                   f"  axis n = {n13}\n  axis k = hidden_size\n  storage {r.choice(('bfloat16', 'int32', 'dtype'))}\n"
                   f"  fill {r.choice(('0', '0', '-1', 'uninit'))}\n}}")
        k2 = r.choice((f"pad(inter -> {padded})", "inter", f"pad(inter -> {padded}) pack {r.choice((2, 8))}",
                       self.axis_spec("k")))
        out.append("tensor w2: weight w2 {\n  axis experts = num_experts\n  axis n = hidden_size\n"
                   f"  axis k = {k2}\n  storage {r.choice(('bfloat16', 'int32', 'float32'))}\n  fill 0\n}}")
        if r.random() < 0.3:
            out.append(self.tensor(name="w13_bias", kind="bias", proj="w13", axes=("experts", "n")))
        if r.random() < 0.2:
            out.append(self.tensor(name="w2_scale", kind="scale", proj="w2"))
        if r.random() < 0.8:
            out.append(self.kernel() if r.random() < 0.5 else
                       "kernel k {\n  view w13.n halves(gate | up)\n  activation silu\n"
                       f"  align w2.k % {r.choice((2, 4, 32))} == 0 : \"w2.k\"\n}}")
        if r.random() < 0.4:
            out.append(self.glue())
        return out

    def contract(self, skeleton: float = 0.5) -> str:
        if self.r.random() < skeleton:
            decls = self.skeleton()
        else:
            decls = [self.free_decl() for _ in range(self.r.randrange(1, 6))]
        if self.r.random() < 0.1:
            self.r.shuffle(decls)
        sep = self.r.choice(("\n", "\n", "\n\n", " ", "\n# comment\n"))
        return sep.join(decls) + "\n"


class CleanGen:
    """Well-typed contracts (most pass `check`): they exercise emit, plan(), pad/unpad.

    Integer expressions only divide by positive finite values, axis sizes are never
    negative and every padded size is >= its logical size, so a failure of the
    generated code on these is a real bug, not an unsound contract.
    """

    def __init__(self, rng: random.Random, max_depth: int = 3) -> None:
        self.r = rng
        self.max_depth = max_depth
        self.ints = ["num_experts", "hidden_size", "inter"]
        self.finite = ["g"]  # positive finite ints (divisors)
        self.bools = ["flag"]
        self.enum = ("isa", ("vec", "amx", "neon"))

    def int_expr(self, depth: int = 0) -> str:
        r = self.r
        if depth >= self.max_depth or r.random() < 0.35:
            return r.choice(self.ints + self.finite + [str(r.choice((0, 1, 2, 3, 8, 64)))])
        d = depth + 1
        k = r.randrange(9)
        if k == 0:
            return f"({self.int_expr(d)} {r.choice('+-')} {self.int_expr(d)})"
        if k == 1:
            return f"({self.int_expr(d)} * {r.choice([*self.finite, '2', '3'])})"
        if k == 2:
            return f"({self.int_expr(d)} {r.choice('/%')} {r.choice([*self.finite, '4', '7'])})"
        if k == 3:
            return f"{r.choice(('round_up', 'round_down', 'cdiv'))}({self.int_expr(d)}, {r.choice([*self.finite, '16'])})"
        if k == 4:
            return f"{r.choice(('min', 'max'))}({self.int_expr(d)}, {self.int_expr(d)})"
        if k == 5:
            return f"(if {self.bool_expr(d)} then {self.int_expr(d)} else {self.int_expr(d)})"
        if k == 6:
            name, members = self.enum
            arms = ", ".join(f"{m} => {self.int_expr(d)}" for m in members)
            return f"(match {name} {{ {arms} }})"
        if k == 7:
            return f"-({self.int_expr(d)})"
        return f"({self.int_expr(d)})"

    def bool_expr(self, depth: int = 0) -> str:
        r = self.r
        if depth >= self.max_depth or r.random() < 0.3:
            return r.choice([*self.bools, "true", "false", f"{self.enum[0]} == {r.choice(self.enum[1])}"])
        d = depth + 1
        k = r.randrange(4)
        if k == 0:
            return f"({self.int_expr(d)} {r.choice(('==', '!=', '<', '<=', '>', '>='))} {self.int_expr(d)})"
        if k == 1:
            return f"({self.bool_expr(d)} {r.choice(('and', 'or'))} {self.bool_expr(d)})"
        if k == 2:
            return f"(not {self.bool_expr(d)})"
        return f"({self.bool_expr(d)})"

    def contract(self) -> str:
        r = self.r
        out = ["contract clean", 'source "contract_gen.CleanGen"', r.choice(("policy error", "policy fallback loop")),
               "param num_experts: int in 1..8", f"param hidden_size: int in {r.choice(('1..64', '{16, 32, 48}'))}",
               f"param inter: int in {r.choice(('1..64', '{8, 24, 40}', '0..16'))}",
               f"param g: int in {r.choice(('{1, 2, 4}', '{16, 32}', '{3}'))}", "param flag: bool",
               f"param isa: enum {{{', '.join(self.enum[1])}}}"]
        for i in range(r.randrange(0, 6)):
            if r.random() < 0.7:
                out.append(f"let v{i} = {self.int_expr()}")
                self.ints.append(f"v{i}")
            else:
                out.append(f"let b{i} = {self.bool_expr()}")
                self.bools.append(f"b{i}")
        mult = r.choice(("g", "4", "16"))
        out.append(f"let padded = round_up(inter, {mult}) + {r.choice(('0', 'g', '(if flag then 8 else 0)'))}")
        for _ in range(r.randrange(0, 3)):
            out.append(f"{r.choice(('require', 'admit'))} {self.bool_expr()} : \"generated rule\"")
        layout = r.choice(("halves(gate | up, ", "interleave(gate | up, ", "concat(up | gate, ", "pad("))
        storage = r.choice(("bfloat16", "float32", "int8", "int32"))
        fill = r.choice(("0", "0", "1", "uninit")) if storage != "bfloat16" else r.choice(("0", "uninit"))
        out.append("tensor w13: weight w13 {\n  axis experts = num_experts\n"
                   f"  axis n = {layout}inter -> padded)\n  axis k = hidden_size\n  storage {storage}\n  fill {fill}\n}}")
        pack = r.choice(("", "", " pack 2", " pack 4"))
        out.append("tensor w2: weight w2 {\n  axis experts = num_experts\n  axis n = hidden_size\n"
                   f"  axis k = pad(inter -> padded){pack}\n  storage {'int32' if pack else storage}\n  fill 0\n}}")
        if r.random() < 0.5:
            out.append("tensor w13_bias: bias w13 optional {\n  axis experts = num_experts\n  axis n = like w13.n\n"
                       f"  storage {storage}\n  fill 0\n}}")
        view = "linear" if layout == "pad(" else ("interleave(gate | up)" if "interleave" in layout else "halves(gate | up)")
        # the last align reads every parameter the tensors may not (g, flag, isa): a parameter nothing
        # the contract states reads is LC309 (issue 39); it draws nothing from `r`
        out.append(f"kernel k {{\n  view w13.n {view}\n  activation {r.choice(('silu', 'relu2'))}\n"
                   f"  align w2.k % {r.choice(('1', '2', '4'))} == 0 : \"w2.k\"\n"
                   "  align (w2.k + g) % 1 == 0 or flag or isa == vec : \"reads g, flag and isa\"\n}")
        return "\n".join(out) + "\n"


def generate(rng: random.Random, skeleton: float = 0.5, max_depth: int = 3) -> str:
    return Gen(rng, max_depth).contract(skeleton)


# ---- mutation ------------------------------------------------------------------

_TOKEN = re.compile(r'''
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\[^\n])*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<int>[0-9]+)
  | (?P<punct>\.\.|->|=>|==|!=|<=|>=|[{}()\[\],:=|.+\-*/%<>])
  | (?P<other>.)
''', re.VERBOSE | re.DOTALL)


def tokens(text: str) -> list[str]:
    """Lossless tokenization: ''.join(tokens(t)) == t."""
    return [m.group(0) for m in _TOKEN.finditer(text)]


def _is_ws(tok: str) -> bool:
    return tok.isspace() or tok.startswith("#")


REPLACEMENTS = (KEYWORDS + PUNCT + PARAM_NAMES + ENUM_MEMBERS + ODD_NAMES[:20] + FUNCS + STRINGS
                + ("0", "1", "-1", "32", str(MAX_INT), str(MAX_INT + 1), "9" * 40, "", "\n", "\x00", "\u0430",
                   "\u202e", "\\", '"', "'", "{{", "}}", "{%", "%}", "((((", "))))"))


def token_mutate(rng: random.Random, text: str, edits: int = 1, toks: list[str] | None = None) -> str:
    """Apply `edits` token-level edits: delete, duplicate, swap, replace or insert a token."""
    toks = list(toks if toks is not None else tokens(text))
    for _ in range(edits):
        solid = [i for i, t in enumerate(toks) if not _is_ws(t)]
        if not solid:
            toks.append(rng.choice(REPLACEMENTS))
            continue
        i = rng.choice(solid)
        op = rng.randrange(6)
        if op == 0:
            del toks[i]
        elif op == 1:
            toks.insert(i, toks[i] + " ")
        elif op == 2:
            j = rng.choice(solid)
            toks[i], toks[j] = toks[j], toks[i]
        elif op == 3:
            toks[i] = rng.choice(REPLACEMENTS)
        elif op == 4:
            toks.insert(i, rng.choice(REPLACEMENTS) + " ")
        else:  # replace by another token of the same contract (keeps the input plausible)
            toks[i] = toks[rng.choice(solid)]
    return "".join(toks)


INTERESTING_BYTES = b'{}()"\\\n#:=.-|,0123456789 \t\x00\xff\x80\xd0\xb0' + b"\xe2\x80\xae"


def byte_mutate(rng: random.Random, data: bytes, edits: int = 1) -> bytes:
    """Apply `edits` byte-level edits: flip, delete, insert, duplicate or splice a chunk."""
    b = bytearray(data)
    for _ in range(edits):
        if not b:
            b.extend(rng.choice(INTERESTING_BYTES).to_bytes(1, "little"))
            continue
        i = rng.randrange(len(b))
        op = rng.randrange(6)
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            del b[i:i + rng.choice((1, 1, 2, 8, 64))]
        elif op == 2:
            b.insert(i, rng.choice(INTERESTING_BYTES))
        elif op == 3:
            n = rng.choice((1, 4, 16, 128))
            b[i:i] = b[i:i + n]
        elif op == 4:
            b[i] = rng.randrange(256)
        else:
            j = rng.randrange(len(b))
            n = rng.choice((4, 16, 64))
            b[i:i + n] = b[j:j + n]
    return bytes(b)


DECL_KEYWORDS = ("contract", "source", "policy", "param", "let", "require", "admit", "tensor", "kernel", "glue")


def declarations(text: str) -> list[str]:
    """Split a contract into its top-level declarations (comments dropped)."""
    decls: list[list[str]] = []
    depth = 0
    for tok in tokens(text):
        if tok.startswith("#"):
            continue
        if depth == 0 and tok in DECL_KEYWORDS:
            decls.append([])
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth = max(0, depth - 1)
        if decls:
            decls[-1].append(tok)
    return ["".join(d).strip() for d in decls]
