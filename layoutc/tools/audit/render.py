"""The audit report as text (aligned tables, one per model), JSON and Markdown."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from layoutc.tools.audit.engines import DISPLAY, EngineRow
from layoutc.tools.audit.ep import EpSection, Topology, tp_fast_path
from layoutc.tools.audit.formats import checkpoint_format
from layoutc.tools.audit.rows import AuditReport, AuditRow
from layoutc.tools.hfconfig import MoEModelConfig


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if n == 0:
        return "0 B"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError


def _pct(x: float | None, scale: float = 1.0, sign: str = "") -> str:
    return "-" if x is None else f"{sign}{x * scale:.1f}%"


def _size(x: int | None) -> str:
    return "-" if x is None else str(x)


def _verdict(row: AuditRow) -> str:
    return "yes" if row.admitted else f"NO  {row.rule}: {row.reason}"


def _model_line(label: str, m: MoEModelConfig) -> str:
    fmt = checkpoint_format(m)
    name = f"{label} ({m.name})" if m.name != label else label
    swiglu = "".join(f" {k}={v:g}" for k, v in (("swiglu_limit", m.swiglu_limit), ("swiglu_alpha", m.swiglu_alpha))
                     if v is not None)
    return (f"{name}: E={m.num_experts} H={m.hidden_size} I={m.intermediate_size} top-{m.num_experts_per_tok} "
            f"{m.activation}{swiglu} {m.dtype or 'dtype unstated'} {fmt.label}, {m.num_moe_layers} MoE layers")


_SOURCE_LABELS = (("E", "num_experts"), ("H", "hidden_size"), ("I", "intermediate_size"),
                  ("top-k", "num_experts_per_tok"), ("activation", "hidden_act"), ("dtype", "dtype"),
                  ("swiglu_limit", "swiglu_limit"), ("swiglu_alpha", "swiglu_alpha"),
                  ("MoE layers", "num_moe_layers"))


def _sources_line(m: MoEModelConfig) -> str:
    where = dict(m.sources)
    if "activation" in where:
        where["hidden_act"] = where["activation"]
    parts = [f"{short} <- {where[fld]}" for short, fld in _SOURCE_LABELS if fld in where]
    return "  from: " + "; ".join(parts)


def model_json(label: str, m: MoEModelConfig) -> dict[str, Any]:
    """One model's numbers and the config key each came from (``sources``)."""
    return {"model": label, "model_name": m.name, "num_experts": m.num_experts, "hidden_size": m.hidden_size,
            "intermediate_size": m.intermediate_size, "num_experts_per_tok": m.num_experts_per_tok,
            "num_hidden_layers": m.num_hidden_layers, "num_moe_layers": m.num_moe_layers,
            "activation": m.activation, "hidden_act": m.hidden_act, "dtype": m.dtype,
            "swiglu_limit": m.swiglu_limit, "swiglu_alpha": m.swiglu_alpha,
            "checkpoint_format": checkpoint_format(m).key, "sources": dict(m.sources)}


TEXT_LEGEND = """\
legend:
  I_pp      intermediate_size / tp: the logical per-rank width (a block shard's rank width,
            whose live rows average intermediate_size / tp over the ranks)
  padded    the width the kernel gets (intermediate_size_per_partition_padded)
  pad       (padded - I_pp) / padded: share of the kernel's intermediate dim that is zeros
            (block shards: with the mean live width, so empty and short ranks count)
  +mem/rank zero padding added to every declared tensor of one rank, all MoE layers (GiB = 2^30 B)
  +flops    (padded - I_pp) / I_pp: extra MoE GEMM arithmetic
  fast path yes = the contract admits it; NO = the first broken rule (line in the contract) and its message
  -         not applicable (not admitted, or the contract does not say)"""


def render_text(report: AuditReport, engines: Sequence[EngineRow] | None = None, ep: EpSection | None = None) -> str:
    """An aligned table per model, its skipped contracts, and a legend; with ``engines``
    (``--engine`` naming two or more), each model's side-by-side engine table after its own;
    with ``ep`` (``--ep``), each model's TP/EP topology table."""
    headers = ("contract", "variant", "tp", "I_pp", "padded", "pad", "+mem/rank", "+flops", "fast path")
    cells: list[tuple[str, ...]] = [
        (r.contract, r.variant_text(), str(r.tp_size), _size(r.intermediate_size_per_partition),
         _size(r.intermediate_size_per_partition_padded), _pct(r.pad_fraction, 100),
         _human_bytes(r.extra_bytes), _pct(r.extra_flops_pct, 1, "+"), _verdict(r))
        for r in report.rows
    ]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers[:-1])]
    right = {2, 3, 4, 5, 6, 7}

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values[:-1], widths, strict=True))]
        return "  " + "  ".join(parts) + "  " + values[-1]

    out: list[str] = []
    by_model: dict[str, list[int]] = {}
    for i, r in enumerate(report.rows):
        by_model.setdefault(r.model, []).append(i)
    labels = [label for label, _ in report.models] or list(by_model)
    configs = dict(report.models)
    for label in labels:
        if label in configs:
            out.append(_model_line(label, configs[label]))
            out.append(_sources_line(configs[label]))
        else:
            out.append(label)
        indices = by_model.get(label, [])
        if indices:
            out.append(line(headers).rstrip())
            out.extend(line(cells[i]).rstrip() for i in indices)
        reasons: dict[str, list[str]] = {}
        for s in report.skipped:
            if s.model == label:
                reasons.setdefault(s.reason.split("; ")[0], []).append(s.contract)
        for why, names in reasons.items():
            out.append(f"  skipped: {', '.join(names)} ({why})")
        if not indices and not reasons:
            out.append("  (no contracts)")
        if engines is not None:
            out.extend(_engine_lines([e for e in engines if e.model == label]))
        if ep is not None:
            out.extend(_ep_lines(label, ep))
        out.append("")
    out.append(TEXT_LEGEND)
    if engines is not None:
        out.append(ENGINE_LEGEND)
    if ep is not None:
        out.append(EP_LEGEND)
    if report.held:
        out.append(held_line(report))
    return "\n".join(out) + "\n"


def held_line(report: AuditReport) -> str:
    """``models (the contracts' `models` declarations): vllm 0.32.0, torch 2.13.0``: every engine
    release the audited contracts model, as their `models` lines name them."""
    return "models (the contracts' `models` declarations): " + ", ".join(
        f"{engine} {'/'.join(releases)}" for engine, releases in report.held)


EP_LEGEND = """\
expert parallelism (--ep; vLLM 0.32 --enable-expert-parallel: the layer's tp is 1, each rank whole experts):
  n            the degree: tp = the --tp row (intermediate split n ways), ep = the --ep row (experts over n ranks)
  experts      experts per rank, most/fewest (the contract's local_num_experts; runtime.experts.held)
  I, padded    the intermediate the kernel gets under EP (not split) and its padded width
  mem/rank     one rank's declared weights and scales as padded, all MoE layers (biases left out)
  fast path    yes = admitted, no pad; yes, padded = admitted with an intermediate pad; NO = refused"""


def _short(fast: str) -> str:
    return {"yes": "yes", "padded": "yes, padded", "no": "NO"}[fast]


def _topology_cells(t: Topology) -> tuple[str, ...]:
    tp, e = t.tp, t.ep
    tp_cells = ("-",) * 4 if tp is None else (
        _size(tp.intermediate_size_per_partition), _size(tp.intermediate_size_per_partition_padded),
        _human_bytes(t.tp_rank_bytes), _short(tp_fast_path(tp)) + ("" if tp.admitted else f" ({tp.rule})"))
    if e is None:
        ep_cells: tuple[str, ...] = ("-",) * 5
    else:
        ep_cells = (e.experts_text(), _size(e.intermediate_size_per_partition),
                    _size(e.intermediate_size_per_partition_padded), _human_bytes(e.rank_bytes), e.fast_path())
    variant = ", ".join(f"{k}={v}" for k, v in t.variant.items()) or "-"
    return (t.contract, variant, str(t.degree), *tp_cells, *ep_cells)


def _ep_lines(label: str, ep: EpSection) -> list[str]:
    """One model's TP/EP table, and the contracts that state no expert parallelism."""
    rows = [t for t in ep.topology if t.model == label]
    none = sorted({e.contract for e in ep.rows if e.model == label and e.rule is not None
                   and e.reason is not None and "states no expert parallelism" in e.reason})
    out: list[str] = []
    if rows:
        headers = ("contract", "variant", "n", "tp: I_pp", "padded", "mem/rank", "fast path",
                   "ep: experts", "I", "padded", "mem/rank", "fast path")
        cells = [_topology_cells(t) for t in rows]
        widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers[:-1])]
        right = {2, 3, 4, 5, 7, 8, 9, 10}

        def line(values: Sequence[str]) -> str:
            parts = [v.rjust(w) if i in right else v.ljust(w)
                     for i, (v, w) in enumerate(zip(values[:-1], widths, strict=True))]
            return ("  " + "  ".join(parts) + "  " + values[-1]).rstrip()

        out += ["  TP and EP, side by side:", line(headers), *(line(c) for c in cells)]
        placements = {(e.contract, e.placements) for e in ep.rows if e.model == label and e.placements}
        out += [f"  {name}: placement {', '.join(p)}" for name, p in sorted(placements)]
    if none:
        out.append(f"  no expert parallelism: {', '.join(none)} (no `experts ... over` declaration)")
    return out


ENGINE_LEGEND = """\
engines (--engine):
  padded/rank  the intermediate rows every rank allocates (each engine's CPU contract)
  waste        share of the ranks' allocated rows that hold no checkpoint row (mean over ranks)
  live rows    checkpoint rows each rank holds (SGLang pads the full size, then shards: short last ranks)
  mem/rank     one rank's expert weights and scales, all MoE layers, as padded (biases left out)"""


def _engine_cells(e: EngineRow) -> tuple[str, ...]:
    verdict = "yes" if e.admitted else f"NO: {e.reason}"
    return (e.held or DISPLAY.get(e.engine, e.engine), e.contract, str(e.tp_size), _size(e.per_rank_padded), _pct(e.pad_fraction, 100),
            e.live_text() if e.live_rows else "-", _human_bytes(e.rank_bytes), verdict)


def _engine_lines(rows: Sequence[EngineRow]) -> list[str]:
    """The side-by-side table of one model: one line per TP degree and engine."""
    if not rows:
        return []
    headers = ("engine", "contract", "tp", "padded/rank", "waste", "live rows", "mem/rank", "fast path")
    cells = [_engine_cells(e) for e in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers[:-1])]
    right = {2, 3, 4, 6}

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values[:-1], widths, strict=True))]
        return ("  " + "  ".join(parts) + "  " + values[-1]).rstrip()

    return ["  engines, side by side:", line(headers), *(line(c) for c in cells)]


def render_json(report: AuditReport, engines: Sequence[EngineRow] | None = None, ep: EpSection | None = None) -> str:
    """``{"models": [...], "rows": [...], "skipped": [...]}`` (and ``"engines": [...]`` with
    two or more ``--engine``s, ``"ep_rows"`` and ``"topology"`` with ``--ep``); the fields
    are documented in docs/audit.md."""
    doc: dict[str, Any] = {"models": [model_json(label, m) for label, m in report.models],
                           "rows": [r.to_json() for r in report.rows], "skipped": [s.to_json() for s in report.skipped]}
    if engines is not None:
        doc["engines"] = [e.to_json() for e in engines]
    if ep is not None:
        doc["ep_rows"] = [e.to_json() for e in ep.rows]
        doc["topology"] = [t.to_json() for t in ep.topology]
    return json.dumps(doc, indent=2) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: AuditReport, engines: Sequence[EngineRow] | None = None,
                    ep: EpSection | None = None) -> str:
    """A GitHub-flavoured table (one row per audit row), a list of skipped pairs, with
    ``engines`` the side-by-side engine table, and with ``ep`` the TP/EP table."""
    out = ["| model | contract | variant | TP | I_pp | padded | pad | extra mem / rank | extra FLOPs | fast path |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in report.rows:
        verdict = "yes" if r.admitted else f"**no**: {r.rule}: {r.reason}"
        out.append("| " + " | ".join(_md(c) for c in (
            r.model, f"`{r.contract}`", r.variant_text(), str(r.tp_size),
            _size(r.intermediate_size_per_partition), _size(r.intermediate_size_per_partition_padded),
            _pct(r.pad_fraction, 100), _human_bytes(r.extra_bytes), _pct(r.extra_flops_pct, 1, "+"),
            verdict)) + " |")
    if report.models:
        out.append("")
        out.append("Where the numbers come from (config keys):")
        out.append("")
        out.extend(f"- {_md(label)}: {_md(_sources_line(m).removeprefix('  from: '))}" for label, m in report.models)
    if report.skipped:
        out.append("")
        out.append("Skipped (model, contract) pairs:")
        out.append("")
        out.extend(f"- {_md(s.model)} / `{s.contract}`: {_md(s.reason)}" for s in report.skipped)
    if engines is not None:
        out += ["", "Engines, side by side:", "",
                "| model | engine | contract | TP | padded / rank | waste | live rows | mem / rank | fast path |",
                "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | --- |"]
        out.extend("| " + " | ".join(_md(c) for c in (e.model, *_engine_cells(e))) + " |" for e in engines)
    if ep is not None and ep.topology:
        out += ["", "TP and EP, side by side (EP: the layer's tp 1, whole experts per rank):", "",
                "| model | contract | variant | n | tp: I_pp | padded | mem / rank | fast path "
                "| ep: experts / rank | I | padded | mem / rank | fast path |",
                "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |"]
        out.extend("| " + " | ".join(_md(c) for c in (t.model, *_topology_cells(t))) + " |" for t in ep.topology)
    return "\n".join(out) + "\n"
