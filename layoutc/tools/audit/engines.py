"""``layoutc audit --engine vllm,sglang``: each engine's CPU MoE layout for a model, side by side.

Which contract is an engine's is read from the contracts' `models` declarations (docs/language.md
3.2a), never from a table of contract names: SGLang's are the contracts that model an SGLang
object, vLLM's every other one (today's default audit). For the side-by-side table each engine's
CPU path for the model's checkpoint format is the engine objects it runs (`ROUTES`, the engines'
own class names): the contract that models every one of them is that engine's contract for the
format, and the equalities of its `when` (`isa == amx`) are the variant's fixed values:

| format | vLLM 0.32.0 | SGLang 0.5.23 |
| --- | --- | --- |
| unquantized | ``X86CPUUnquantizedExperts`` (its line's ``when isa == amx``) | ``UnquantizedFusedMoEMethod`` |
| MXFP4 | ``CPUExpertsMxfp4`` + ``GptOssMxfp4MoEMethod`` (swigluoai) or ``Mxfp4MoEMethod`` | ``Mxfp4MoEMethod`` |
| block FP8 [128, 128] | ``MarlinExperts`` + ``Fp8MoEMethod`` (vLLM's block-FP8 TP-shard padding; no CPU contract) | ``Fp8MoEMethod`` (block=128) |

The release an engine is held to is the one the chosen contracts declare (`engine_label`).
Per engine and TP degree it shows the per-rank padded size, the waste (pad fraction of the
rank's rows, mean over the ranks), which ranks hold how many live checkpoint rows, and the
bytes of one rank's expert weights and scales over all MoE layers (docs/audit.md, "Engines").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from layoutc.compiler import ir
from layoutc.compiler.evaluate import EvalError, Value, eval_expr
from layoutc.runtime.interface import release_key
from layoutc.runtime.vocab import Op
from layoutc.tools.audit.costs import cdiv, storage_bytes
from layoutc.tools.audit.formats import checkpoint_format
from layoutc.tools.audit.rows import AuditReport, AuditRow
from layoutc.tools.audit.verdict import _lets
from layoutc.tools.hfconfig import MoEModelConfig

ENGINES = ("vllm", "sglang")
DISPLAY = {"vllm": "vLLM", "sglang": "SGLang"}


def engine_of(contract: ir.Contract) -> str:
    """Which engine's audit a contract belongs to, from its `models` lines: ``sglang`` when it
    models an SGLang object, else ``vllm`` (torch's own kernels included, as today's default)."""
    return "sglang" if any(m.engine == "sglang" for m in contract.models) else "vllm"


def held_releases(engine: str, contracts: Iterable[ir.Contract]) -> tuple[str, ...]:
    """Every release of ``engine`` the contracts' `models` lines name, sorted as versions."""
    found = {r for c in contracts for m in c.models if m.engine == engine for r in m.releases}
    return tuple(sorted(found, key=release_key))


def engine_label(engine: str, contracts: Iterable[ir.Contract]) -> str:
    """``vLLM 0.32.0``: the engine and the release(s) the contracts hold it to (their `models` lines)."""
    releases = held_releases(engine, contracts)
    return f"{DISPLAY.get(engine, engine)} {'/'.join(releases) if releases else '(no release declared)'}"


def parse_engines(text: str) -> tuple[str, ...]:
    """``"vllm,sglang"`` -> ("vllm", "sglang"); ValueError naming the known engines."""
    names: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part not in ENGINES:
            raise ValueError(f"--engine: unknown engine {part[:40]!r}; known: {', '.join(ENGINES)}")
        if part not in names:
            names.append(part)
    if not names:
        raise ValueError("--engine: expected engines, e.g. --engine vllm,sglang")
    return tuple(names)


_CPU = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"
_MXFP4 = "vllm.model_executor.layers.quantization.mxfp4"


@dataclass(frozen=True)
class Route:
    """An engine's path for a checkpoint format: the engine objects it runs (`models` targets, all
    of which its contract models), the format's own fixed values (a block size, a scheme), and the
    model activation it is for (None: any)."""

    targets: tuple[str, ...]
    fixed: Mapping[str, Value] = field(default_factory=dict)
    activation: str | None = None


# Each checkpoint format's CPU path per engine, by the engine objects it runs (the table above):
# the first route whose activation matches the model's.
ROUTES: dict[str, dict[str, tuple[Route, ...]]] = {
    "unquantized": {"vllm": (Route((f"{_CPU}:X86CPUUnquantizedExperts",)),),
                    "sglang": (Route(("sglang.srt.layers.quantization.unquant:UnquantizedFusedMoEMethod",)),)},
    "mxfp4": {"vllm": (Route((f"{_CPU}:CPUExpertsMxfp4", f"{_MXFP4}:GptOssMxfp4MoEMethod"), activation="swigluoai"),
                       Route((f"{_CPU}:CPUExpertsMxfp4", f"{_MXFP4}:Mxfp4MoEMethod"))),
              "sglang": (Route(("sglang.srt.layers.quantization.mxfp4:Mxfp4MoEMethod",)),)},
    "fp8_block128": {"vllm": (Route(("vllm.model_executor.layers.fused_moe.experts.marlin_moe:MarlinExperts",
                                     "vllm.model_executor.layers.quantization.fp8:Fp8MoEMethod"),
                                    {"scheme": "fp8_block128", "scale_dtype": "float32"}),),
                     "sglang": (Route(("sglang.srt.layers.quantization.fp8:Fp8MoEMethod",), {"block": 128}),)},
}


def _equalities(cond: ir.Expr | None) -> dict[str, Value] | None:
    """The `param == value` conjuncts of a `when` (None when it is anything else)."""
    if cond is None:
        return {}
    if isinstance(cond, ir.Op) and cond.op is Op.AND:
        parts = [_equalities(a) for a in cond.args]
        return None if any(p is None for p in parts) else {k: v for p in parts if p for k, v in p.items()}
    if isinstance(cond, ir.Op) and cond.op is Op.EQ:
        ref, const = cond.args
        if isinstance(ref, ir.Const):
            ref, const = const, ref
        if isinstance(ref, ir.Ref) and isinstance(const, ir.Const):
            return {ref.name: const.value}
    return None


def resolve(engine: str, route: Route, contracts: Iterable[ir.Contract]) -> tuple[str, dict[str, Value]] | None:
    """The contract among ``contracts`` whose `models` lines name every target of ``route`` for
    ``engine`` (the first, in the order given), with the variant's fixed values: the route's own,
    then the equalities of the lines' `when`s; None when no contract models them all."""
    for contract in contracts:
        lines = [next((m for m in contract.models if m.engine == engine and m.target == t), None)
                 for t in route.targets]
        if not route.targets or any(m is None for m in lines):
            continue
        fixed: dict[str, Value] = {}
        for m in lines:
            found = _equalities(m.when) if m is not None else {}
            fixed.update(found or {})
        fixed.update(route.fixed)
        return contract.name, fixed
    return None


def engine_contract(engine: str, model: MoEModelConfig,
                    contracts: Iterable[ir.Contract]) -> tuple[str, dict[str, Value]] | None:
    """The contract (and the variant's fixed values) of ``engine``'s CPU path for the model's format."""
    routes = ROUTES.get(checkpoint_format(model).key, {}).get(engine, ())
    route = next((r for r in routes if r.activation in (None, model.activation)), None)
    return None if route is None else resolve(engine, route, list(contracts))


def counterpart(contract: ir.Contract, engine: str,
                contracts: Iterable[ir.Contract]) -> tuple[str, dict[str, Value]] | None:
    """``engine``'s CPU contract for the checkpoint format that ``contract`` serves (the format one
    of whose routes it models: SGLang's unquantized contract -> vLLM's that models
    ``X86CPUUnquantizedExperts``, with isa=amx);
    None for a contract of no listed format, or when no contract in ``contracts`` models it."""
    pool = list(contracts)
    for by_engine in ROUTES.values():
        serves = any(resolve(e, r, [contract]) is not None for e, routes in by_engine.items() for r in routes)
        if serves and by_engine.get(engine):
            return resolve(engine, by_engine[engine][0], pool)
    return None


@dataclass(frozen=True)
class EngineRow:
    """One engine's layout for one model and TP degree. Sizes are elements, memory is bytes."""

    model: str
    engine: str
    contract: str
    tp_size: int
    admitted: bool
    reason: str | None
    per_rank_padded: int | None
    live_rows: tuple[int, ...]
    pad_fraction: float | None
    rank_bytes: int | None
    held: str = ""  # the engine and the release its contracts declare (`engine_label`): "vLLM 0.32.0"

    def live_text(self) -> str:
        """``ranks 0-6: 384, rank 7: 192``: runs of ranks holding the same number of live rows."""
        runs: list[tuple[int, int, int]] = []
        for rank, live in enumerate(self.live_rows):
            if runs and runs[-1][2] == live:
                runs[-1] = (runs[-1][0], rank, live)
            else:
                runs.append((rank, rank, live))
        if len(runs) == 1 and len(self.live_rows) > 1:
            return f"all ranks: {runs[0][2]}"
        return ", ".join(f"rank {a}: {n}" if a == b else f"ranks {a}-{b}: {n}" for a, b, n in runs) or "-"

    def to_json(self) -> dict[str, object]:
        return {"model": self.model, "engine": self.engine, "contract": self.contract, "tp_size": self.tp_size,
                "admitted": self.admitted, "reason": self.reason, "per_rank_padded": self.per_rank_padded,
                "live_rows": list(self.live_rows),
                "pad_fraction": None if self.pad_fraction is None else round(self.pad_fraction, 6),
                "rank_bytes": self.rank_bytes}


def live_rows(contract: ir.Contract, env: Mapping[str, Value]) -> tuple[int, ...]:
    """Each rank's live checkpoint rows on the intermediate axis (w2's ``k``): the even split,
    or under a block shard ``clamp(FULL - r * L, 0, L)`` (the language's block-shard rule)."""
    tp = env.get("tp_size")
    logical = eval_expr(contract.weight("w2").axis("k").logical, env)
    if not isinstance(tp, int) or not isinstance(logical, int) or tp <= 0:
        return ()
    shard = contract.block_shard
    if shard is None:
        return (logical,) * tp
    full = eval_expr(shard.full, env)
    assert isinstance(full, int)
    return tuple(max(0, min(logical, full - rank * logical)) for rank in range(tp))


def rank_bytes(contract: ir.Contract, env: Mapping[str, Value]) -> int | None:
    """Bytes one rank holds of one layer's expert weights and scales, as padded (optional
    tensors, the biases, left out): storage elements of every axis, packed and grouped."""
    total = 0
    for tensor in contract.tensors:
        if tensor.optional:
            continue
        width = storage_bytes(tensor, env)
        if width is None:
            return None
        size = 1
        for axis in tensor.axes:
            padded = int(eval_expr(axis.padded, env))
            if axis.group_size is not None:
                group = int(eval_expr(axis.group_size, env))
                padded = 1 if group == -1 else cdiv(padded, group)
            padded *= axis.segments
            if axis.pack > 1:
                padded = cdiv(padded, axis.pack)
            size *= padded
        total += size * width
    return total


def _pick(rows: Sequence[AuditRow], model: str, contract: str, fixed: Mapping[str, Value], tp: int) -> AuditRow | None:
    matching = [r for r in rows if r.model == model and r.contract == contract and r.tp_size == tp
                and all(r.params.get(k) == v for k, v in fixed.items())]
    return next((r for r in matching if r.admitted), matching[0] if matching else None)


def engine_rows(report: AuditReport, contracts: Sequence[ir.Contract], engines: Sequence[str],
                tps: Sequence[int]) -> list[EngineRow]:
    """Every model x TP degree x engine of the report, from the report's own rows."""
    by_name = {c.name: c for c in contracts}
    out: list[EngineRow] = []
    for label, model in report.models:
        for tp in tps:
            for engine in engines:
                chosen = engine_contract(engine, model, contracts)
                row = None if chosen is None or chosen[0] not in by_name else _pick(report.rows, label, *chosen, tp)
                if chosen is None or row is None:
                    out.append(EngineRow(label, engine, chosen[0] if chosen else "-", tp, False,
                                         f"no {engine_label(engine, contracts)} contract for "
                                         f"{checkpoint_format(model).label}", None, (), None, None,
                                         engine_label(engine, contracts)))
                    continue
                out.append(_engine_row(label, engine, by_name[row.contract], row, engine_label(engine, contracts)))
    return out


def _engine_row(label: str, engine: str, contract: ir.Contract, row: AuditRow, held: str) -> EngineRow:
    config = {k: v for k, v in row.params.items() if not isinstance(v, float)}
    config["tp_size"] = row.tp_size
    try:
        env = _lets(contract, config)
        # a configuration the contract's own rules refuse has no layout (a floor division's
        # sizes would read as one); one the audit refuses for the kernel (an activation it does
        # not compute) keeps its layout
        if any(not eval_expr(rule.cond, env) for rule in contract.rules):
            env = {}
        live = live_rows(contract, env) if env else ()
        memory = rank_bytes(contract, env) if env else None
    except (EvalError, KeyError, TypeError, ValueError, AssertionError):
        env, live, memory = {}, (), None
    padded = row.intermediate_size_per_partition_padded if env else None
    if padded is None and live:
        value = env.get("intermediate_size_per_partition_padded")
        padded = value if isinstance(value, int) and not isinstance(value, bool) else None
    waste = None
    if padded and live:
        waste = 1 - sum(live) / (padded * len(live))
    if memory is not None:
        memory *= row.num_moe_layers
    return EngineRow(label, engine, contract.name, row.tp_size, row.admitted, row.reason, padded, live, waste,
                     memory, held)
