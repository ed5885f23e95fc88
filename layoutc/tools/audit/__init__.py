"""`layoutc audit`: for real model configs and TP degrees, which kernels take the fast path, at what cost.

For every (model, contract, variant, tp) the audit maps the model's Hugging Face
config onto the contract's parameters, evaluates the contract's `let`s and rules
in plain Python (``layoutc.compiler.evaluate``; no solver), and reports:

* whether the contract admits the configuration (the kernel's fast path) and, if
  not, the first broken rule and its message;
* the per-rank intermediate width ``intermediate_size_per_partition`` (I_pp) and
  the width the kernel gets, ``intermediate_size_per_partition_padded`` (P);
* the cost of the padding: ``pad_fraction`` = (P - I_pp) / P, ``extra_flops_pct``
  = (P - I_pp) / I_pp * 100, and ``extra_bytes``, the zero padding added to every
  declared tensor of one rank, summed over the model's MoE layers. Under a block
  shard (``shard ... in blocks of B``) the last ranks hold fewer live rows than
  I_pp, so I_pp in these costs is the mean live width over the ranks, I / tp_size,
  and the bytes are the mean over the ranks (e.g. MiniMax-M2 block FP8 at tp=8:
  256-row shards, ranks 6 and 7 empty, pad fraction 25%).

The mapping rules (which model field sets which parameter, which checkpoint format
goes to which contract, what is enumerated) are in ``docs/audit.md``; the code
below follows them and the docstrings name them.

Entry points: :func:`audit` / :func:`audit_report` (pure: configs and contracts in,
rows out) and :func:`run_audit` (the CLI subcommand). Renderers:
:func:`render_text`, :func:`render_json`, :func:`render_markdown`.

The modules, in the order the audit runs:

* ``formats``: which checkpoint format the model stores, which formats a contract takes;
* ``params``: the model config as contract parameter values, and their config keys;
* ``verdict``: one configuration's lets, broken rules and kernel checks;
* ``costs``: the padding's cost at an admitted configuration;
* ``report``: every model x contract x variant x TP degree (rows, skipped pairs);
* ``rows``: the result types; ``render``: text, JSON, Markdown;
* ``ep``: ``--ep``, each EP degree's experts per rank, memory and pad, next to the TP rows;
* ``command``: ``layoutc audit`` itself (``--tp``, ``--ep``, the contracts it loads).
"""

from __future__ import annotations

from layoutc.tools.audit.command import (
    DEFAULT_CONTRACTS_DIR,
    MAX_TP,
    MAX_TP_DEGREES,
    default_contracts_dir,
    load_contracts,
    load_contracts_diags,
    parse_ep,
    parse_tp,
    run_audit,
)
from layoutc.tools.audit.costs import DTYPE_BYTES
from layoutc.tools.audit.ep import EpRow, EpSection, Topology, ep_report, ep_section
from layoutc.tools.audit.formats import (
    QUANTIZING_GLUE,
    CheckpointFormat,
    Taken,
    audit_formats,
    checkpoint_format,
    takes,
)
from layoutc.tools.audit.params import PARAM_FIELDS, SWIGLU_PARAMS, kernel_activation_refusal, param_sources
from layoutc.tools.audit.render import TEXT_LEGEND, model_json, render_json, render_markdown, render_text
from layoutc.tools.audit.report import MAX_VARIANTS, audit, audit_report
from layoutc.tools.audit.rows import AuditReport, AuditRow, Skipped

__all__ = [
    "DEFAULT_CONTRACTS_DIR",
    "DTYPE_BYTES",
    "MAX_TP",
    "MAX_TP_DEGREES",
    "MAX_VARIANTS",
    "PARAM_FIELDS",
    "QUANTIZING_GLUE",
    "SWIGLU_PARAMS",
    "TEXT_LEGEND",
    "AuditReport",
    "AuditRow",
    "CheckpointFormat",
    "EpRow",
    "EpSection",
    "Skipped",
    "Taken",
    "Topology",
    "audit",
    "audit_formats",
    "audit_report",
    "checkpoint_format",
    "default_contracts_dir",
    "ep_report",
    "ep_section",
    "kernel_activation_refusal",
    "load_contracts",
    "load_contracts_diags",
    "model_json",
    "param_sources",
    "parse_ep",
    "parse_tp",
    "render_json",
    "render_markdown",
    "render_text",
    "run_audit",
    "takes",
]
