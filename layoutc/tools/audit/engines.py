"""``layoutc audit --engine vllm,sglang``: each engine's CPU MoE layout for a model, side by side.

An engine is a set of contracts: vLLM's are every shipped contract but SGLang's (today's
default audit), SGLang's are the ``sglang_*`` contracts. For the side-by-side table each
engine's CPU path for the model's checkpoint format is one contract (and variant):

| format | vLLM 0.32 | SGLang 0.5.23 |
| --- | --- | --- |
| unquantized | ``vllm_cpu_grouped_gemm`` (isa=amx) | ``sglang_cpu_moe`` |
| MXFP4 | ``vllm_cpu_mxfp4_gpt_oss_moe`` (swigluoai), ``vllm_cpu_mxfp4_moe`` | ``sglang_cpu_mxfp4_moe`` |
| block FP8 [128, 128] | ``marlin_moe_fp8`` (vLLM's block-FP8 TP-shard padding; no CPU contract) | ``sglang_cpu_fp8_moe`` (block=128) |

Per engine and TP degree it shows the per-rank padded size, the waste (pad fraction of the
rank's rows, mean over the ranks), which ranks hold how many live checkpoint rows, and the
bytes of one rank's expert weights and scales over all MoE layers (docs/audit.md, "Engines").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from layoutc.compiler import ir
from layoutc.compiler.evaluate import EvalError, Value, eval_expr
from layoutc.tools.audit.costs import cdiv, storage_bytes
from layoutc.tools.audit.formats import checkpoint_format
from layoutc.tools.audit.rows import AuditReport, AuditRow
from layoutc.tools.audit.verdict import _lets
from layoutc.tools.hfconfig import MoEModelConfig

ENGINES = ("vllm", "sglang")
ENGINE_NAMES = {"vllm": "vLLM 0.32", "sglang": "SGLang 0.5.23"}


def engine_of(contract_name: str) -> str:
    """Which engine a contract belongs to: ``sglang`` for ``sglang_*``, else ``vllm``."""
    return "sglang" if contract_name.startswith("sglang_") else "vllm"


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


# Each checkpoint format's CPU contract (and the variant's fixed values) per engine, the table
# above; vLLM's MXFP4 contract depends on the activation (gpt-oss's swigluoai or not).
FORMAT_CONTRACTS: dict[str, dict[str, tuple[str, dict[str, Value]]]] = {
    "unquantized": {"vllm": ("vllm_cpu_grouped_gemm", {"isa": "amx"}), "sglang": ("sglang_cpu_moe", {})},
    "mxfp4": {"vllm": ("vllm_cpu_mxfp4_gpt_oss_moe", {}), "sglang": ("sglang_cpu_mxfp4_moe", {})},
    "fp8_block128": {"vllm": ("marlin_moe_fp8", {"scheme": "fp8_block128", "scale_dtype": "float32"}),
                     "sglang": ("sglang_cpu_fp8_moe", {"block": 128})},
}
_OTHER_NAMES = {"vllm_cpu_mxfp4_moe": "mxfp4"}


def engine_contract(engine: str, model: MoEModelConfig) -> tuple[str, dict[str, Value]] | None:
    """The contract (and the variant's fixed values) of ``engine``'s CPU path for the model's format."""
    key = checkpoint_format(model).key
    if engine == "vllm" and key == "mxfp4" and model.activation != "swigluoai":
        return ("vllm_cpu_mxfp4_moe", {})
    return FORMAT_CONTRACTS.get(key, {}).get(engine)


def counterpart(contract_name: str, engine: str) -> tuple[str, dict[str, Value]] | None:
    """``engine``'s CPU contract for the checkpoint format that ``contract_name`` serves, from
    FORMAT_CONTRACTS (``sglang_cpu_moe`` -> ``vllm_cpu_grouped_gemm`` with isa=amx); None for a
    contract of no listed format."""
    for key, by_engine in FORMAT_CONTRACTS.items():
        names = {name for name, _ in by_engine.values()}
        if contract_name in names or _OTHER_NAMES.get(contract_name) == key:
            return by_engine.get(engine)
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
                chosen = engine_contract(engine, model)
                row = None if chosen is None or chosen[0] not in by_name else _pick(report.rows, label, *chosen, tp)
                if chosen is None or row is None:
                    out.append(EngineRow(label, engine, chosen[0] if chosen else "-", tp, False,
                                         f"no {ENGINE_NAMES[engine]} contract for {checkpoint_format(model).label}",
                                         None, (), None, None))
                    continue
                out.append(_engine_row(label, engine, by_name[row.contract], row))
    return out


def _engine_row(label: str, engine: str, contract: ir.Contract, row: AuditRow) -> EngineRow:
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
                     memory)
