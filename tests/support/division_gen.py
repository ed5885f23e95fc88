"""Division-heavy, well-typed random contracts on small domains (brute-forceable), for
tests/compiler/test_verify_encoding_differential.py and the differential driver in fuzztools/.

Divisors are finite lets over tp_size, group_size and an enum's block: products,
lcm, match tables, conditionals; numerators nest /, %, round_up, round_down, cdiv.
"""
from __future__ import annotations

import random
import re

TP_POOL = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24)
G_POOL = (1, 2, 3, 4, 6, 8, 16, 32)


class DivGen:
    def __init__(self, rng: random.Random, small: bool = False) -> None:
        self.r = rng
        self.small = small  # smaller domains: a brute force over them takes well under a second

    def divisor(self) -> str:
        r = self.r
        k = r.randrange(12)
        return [
            "tp_size", "group_size", "block", "lcm(group_size, 4)", "lcm(block, group_size)",
            "tp_size * group_size", "(if tp_size > 2 then 4 else 8)", "max(tp_size, 2)", "d1",
            "(tp_size * 2)", "match scheme { a => tp_size, b => group_size }", "(group_size + tp_size)",
        ][k]

    def num(self, depth: int = 0) -> str:
        r = self.r
        if depth >= 2 or r.random() < 0.3:
            return r.choice(("intermediate_size", "intermediate_size", "hidden_size", "ipp0"))
        d = depth + 1
        k = r.randrange(8)
        if k == 0:
            return f"({self.num(d)} / {self.divisor()})"
        if k == 1:
            return f"{r.choice(('round_up', 'round_down', 'cdiv'))}({self.num(d)}, {self.divisor()})"
        if k == 2:
            return f"({self.num(d)} % {self.divisor()})"
        if k == 3:
            return f"({self.num(d)} * {r.choice(('tp_size', 'group_size', '2', 'block'))})"
        if k == 4:
            return f"({self.num(d)} + {self.num(d)})"
        if k == 5:
            return f"max({self.num(d)}, {self.num(d)})"
        if k == 6:
            return f"round_up(round_up({self.num(d)} / tp_size, {self.divisor()}) / {self.divisor()}, {self.divisor()})"
        return f"cdiv(cdiv({self.num(d)}, {self.divisor()}), {self.divisor()})"

    def cond(self) -> str:
        r = self.r
        k = r.randrange(6)
        if k == 0:
            return f"intermediate_size % {self.divisor()} == 0"
        if k == 1:
            return f"{self.num(1)} % {self.divisor()} == 0"
        if k == 2:
            return f"ipp % {self.divisor()} == 0"
        if k == 3:
            return f"{self.num(1)} >= {self.num(1)}"
        if k == 4:
            return f"hidden_size % {self.divisor()} == 0"
        return f"scheme == a or intermediate_size % {self.divisor()} == 0"

    def contract(self) -> str:
        """One contract's text (it passes `check`: every divisor is a positive finite value)."""
        r = self.r
        tps = sorted(r.sample(TP_POOL, r.randrange(2, 4 if self.small else 6)))
        gs = sorted(r.sample(G_POOL, r.randrange(1, 3 if self.small else 4)))
        ilim = r.choice((24, 48, 64) if self.small else (48, 96, 192, 320))
        hid = r.choice(("{16, 48}", "{8}", "{64}") if self.small else ("{16, 32, 48}", "{8, 24}", "{64}", "8..40"))
        b1, b2 = r.choice((1, 2, 4, 8, 16)), r.choice((1, 3, 4, 32))
        out = ["contract divgen", 'source "tests/support/division_gen.py"', "policy error",
               "param num_experts: int in 1..2", f"param hidden_size: int in {hid}",
               f"param intermediate_size: int in 1..{ilim}",
               f"param tp_size: int in {{{', '.join(map(str, tps))}}}",
               f"param group_size: int in {{{', '.join(map(str, gs))}}}",
               "param scheme: enum {a, b}",
               f"let block = match scheme {{ a => {b1}, b => {b2} }}",
               f"let d1 = {r.choice(('lcm(64, group_size)', 'tp_size * group_size', 'lcm(block, tp_size)', 'max(block, group_size)'))}",
               "let ipp0 = intermediate_size / tp_size"]
        shard_blocks = r.random() < 0.3
        ipp = r.choice(("intermediate_size / tp_size", "cdiv(intermediate_size, tp_size)",
                        f"round_up(intermediate_size / tp_size, {self.divisor()})",
                        f"round_up(cdiv(intermediate_size, tp_size), {self.divisor()})",
                        "round_up(round_up(intermediate_size / tp_size, block) / group_size, 2) * group_size",
                        f"{self.num(1)} / tp_size"))
        out.append(f"let ipp = {ipp}")
        if r.random() < 0.5:
            out.append(r.choice(('require intermediate_size % tp_size == 0 : "even split"',
                                 'require intermediate_size % d1 == 0 : "whole d1"',
                                 f'require {self.cond()} : "gen"')))
        padded = r.choice((f"round_up(ipp, {self.divisor()})", f"round_up(round_up(ipp, {self.divisor()}), {self.divisor()})",
                           f"ipp + ipp % {self.divisor()}", f"cdiv(ipp, {self.divisor()}) * {self.divisor()}",
                           f"max(ipp, {self.num(1)})", "round_up(ipp, d1)", "round_up(ipp, lcm(64, group_size))"))
        out.append(f"let ippp = {padded}")
        if shard_blocks:
            out.append(f"shard intermediate_size over tp_size in blocks of {r.choice(('block', 'group_size', 'd1', '2', self.divisor()))}")
        for _ in range(r.randrange(0, 3)):
            out.append(f'admit {self.cond()} : "gen admit"')
        layout = r.choice(("halves(gate | up, ", "interleave(gate | up, ", "concat(up | gate, ", "pad("))
        # sizes written inline half the time: a counterexample's numbers are then quotients
        # recomputed by Encoder.evaluate, not let values read from the model
        lsize = ipp if r.random() < 0.3 else "ipp"
        psize = re.sub(r"\bipp\b", f"({lsize})", padded) if r.random() < 0.5 else "ippp"
        out.append("tensor w13: weight w13 {\n  axis experts = num_experts\n"
                   f"  axis n = {layout}{lsize} -> {psize})\n  axis k = hidden_size\n  storage bfloat16\n  fill 0\n}}")
        pack = r.choice(("", "", " pack 2"))
        out.append("tensor w2: weight w2 {\n  axis experts = num_experts\n  axis n = hidden_size\n"
                   f"  axis k = pad({lsize} -> {psize}){pack}\n  storage {'int32' if pack else 'bfloat16'}\n  fill 0\n}}")
        if r.random() < 0.5:
            gdiv = r.choice(("group_size", "block", "d1", "tp_size"))
            out.append("tensor w2_scale: scale w2 {\n  axis experts = num_experts\n  axis n = hidden_size\n"
                       f"  axis k = groups(w2.k, {gdiv})\n  storage float32\n  fill 0\n}}")
        view = "linear" if layout == "pad(" else ("interleave(gate | up)" if "interleave" in layout else "halves(gate | up)")
        kl = [f"  view w13.n {view}", "  activation silu"]
        for _ in range(r.randrange(0, 4)):
            kl.append(r.choice((
                f'  align w13.n % {r.choice((2, 4, 8, 16))} == 0 : "n"',
                '  align w2.k % group_size == 0 : "k by g"',
                f'  align w13.n / tp_size % {r.choice((1, 2, 4))} == 0 : "n over tp"',
                '  align (w2.k + tp_size) % block == 0 : "k plus tp"',
                f'  align w13.k % {self.divisor()} == 0 : "hidden"',
                f'  align w2.k / {self.divisor()} >= 1 : "k big"',
            )))
        if r.random() < 0.4:
            kl.append(f"  arg pad_k = round_down(ippp - ipp, {self.divisor()}) trims w2.k by pad_k")
        stated = "\n".join(line for line in out + kl if line.startswith(("tensor", "shard", "  ")))
        if not re.search(r"\bblock\b", stated) and not (re.search(r"\bd1\b", stated) and "block" in out[10]):
            # `scheme` reaches nothing stated (only `block` reads it): a parameter nothing the contract
            # states reads is LC309 (issue 39); this align always holds and draws nothing from `r`
            kl.append('  align w2.k % block >= 0 : "reads the scheme"')
        out.append("kernel k {\n" + "\n".join(kl) + "\n}")
        return "\n".join(out) + "\n"
