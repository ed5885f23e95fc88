"""Diagnostics: one type, one registry of stable codes, one renderer.

Stages collect :class:`Diagnostic` values and never raise them; an exception
escaping a stage is a bug in layoutc (the CLI reports it with exit code 2).
Every code used anywhere must be registered in :data:`CODES` and documented in
``docs/language.md`` (a test enforces both).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class Span:
    """A half-open source range; lines and columns are 1-based."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


NO_SPAN = Span("<builtin>", 0, 0, 0, 0)


@dataclass(frozen=True)
class Related:
    span: Span
    message: str


@dataclass(frozen=True)
class Diagnostic:
    code: str
    severity: Severity
    span: Span
    message: str
    related: tuple[Related, ...] = field(default=())
    help: str | None = None


# code -> one-line meaning. Keep in sync with docs/language.md ("Diagnostics").
CODES: dict[str, str] = {
    # 1xx: reading and parsing
    "LC100": "the contract file cannot be read (missing, not UTF-8, or not a file)",
    "LC101": "unexpected character",
    "LC102": "unexpected token",
    "LC103": "unexpected end of file",
    "LC104": "nesting too deep",
    "LC105": "contract file too large (over 1 MiB or over 100,000 tokens)",
    "LC106": "integer literal too large",
    "LC107": "too many declarations or too many errors",
    "LC108": "string literal contains a control character",
    "LC109": "comment contains a control or unprintable character (a line or bidi separator an editor may show)",
    # 2xx: names
    "LC201": "unknown name",
    "LC202": "duplicate definition",
    "LC203": "name is reserved (Python keyword, builtin or layoutc name)",
    "LC204": "name violates the identifier rule",
    "LC205": "missing `contract` declaration",
    "LC206": "duplicate `contract`, `policy`, `kernel`, `glue` or kernel `activation` declaration",
    "LC207": "enum member clashes with another name",
    "LC208": "definition is used before it is defined",
    "LC209": "missing `source` declaration",
    "LC210": "no `policy` declared (`policy error` is assumed)",
    # 23x: what a contract models (`models ENGINE {RELEASE, ...} "module:Name" [when COND]`)
    "LC230": "a `models` line names an unknown engine",
    "LC231": "a `models` target is not \"importable.module:Qualified.name\"",
    "LC232": "a `models` release set is empty or lists a release twice",
    "LC233": "a `models` release is not a version",
    "LC234": "a `models ... when` reads something other than parameters, or is not a condition over them",
    "LC235": "two `models` lines name the same engine, release and target",
    # 236-241: which checkpoints a tool picks a contract for (`route ROUTE {FORMAT, ...} [rank N]`)
    "LC236": "a `route` line names an unknown route",
    "LC237": "a `route` format set is empty, names an unknown checkpoint format, or lists one twice",
    "LC238": "a `route` rank is below 1, or stated on a route that is not ranked (`audit`)",
    "LC239": "`route run` for unquantized checkpoints on a contract that binds no glue",
    "LC240": "two `route` lines of a contract name the same route and format",
    "LC241": "two contracts serve one format on one route at the same rank",
    # 3xx: types and domains
    "LC301": "type mismatch",
    "LC302": "empty or impossible parameter domain",
    "LC303": "divisor or modulus must range over a finite set of positive values",
    "LC304": "wrong number of arguments",
    "LC305": "unknown function",
    "LC306": "match does not cover every enum member",
    "LC307": "domain too large to enumerate",
    "LC308": "value out of range",
    "LC309": "a parameter nothing the contract states reads, and no rule ties to what it states",
    # 4xx: tensors and axes
    "LC401": "unknown or duplicate axis",
    "LC402": "tensor kind mismatch",
    "LC403": "layout roles are invalid",
    "LC404": "pad value cannot decode to zero",
    "LC405": "view on an axis that is not segmented, or wrong view kind",
    "LC406": "tensor needs a projection it is tied to (w13 or w2)",
    "LC407": "missing required tensor clause",
    "LC408": "decode expression is invalid",
    "LC409": "missing weight tensor for a projection",
    "LC410": "tensor axes disagree with the projection's axes",
    "LC411": "packing needs an integer storage type whose width the pack factor divides",
    "LC412": "a projection has more than one bias",
    "LC414": "a `shard` declaration is malformed, or a sharded contract has no full size to shard",
    "LC440": "an `experts ... over` declaration is malformed (names, domains, placement, stride)",
    "LC416": "a declared code range does not fit the number format its decode names",
    "LC417": "pack order is not a permutation of 0..pack-1",
    "LC415": "a `tail fill` is misplaced (no block shard, no axis split over ranks, uninit or repeated)",
    "LC413": "a `when` layout alternative is malformed (guard not over finite parameters, no default, too many cases)",
    # 5xx: kernel and glue
    "LC501": "unknown glue kind",
    "LC502": "glue is missing a required argument or has an unknown one",
    "LC503": "unknown activation",
    "LC504": "kernel argument trims an axis that is not padded",
    # 52x: a contract against the declared interface of the glue it binds (runtime/glue/*.py)
    "LC520": "the glue never passes this tensor to its kernel (it would never be applied)",
    "LC521": "tensor axes are not in the order the glue passes them",
    "LC522": "an axis the glue ties to a weight axis is not declared `like` it",
    "LC523": "a padded hidden or experts axis, but the glue does not pad hidden states",
    "LC524": "an activation the glue does not compute",
    "LC525": "a gated activation on a w13 that is not segmented into gate and up",
    "LC526": "the contract's kernel view disagrees with the view the glue's kernel reads",
    "LC527": "a storage dtype the glue does not accept",
    "LC528": "tensors disagree on the experts axis",
    "LC529": "the glue's op or package differs from what its code calls",
    "LC530": "an activation admitted with constants other than the ones its kernel fixes (swiglu alpha, limit)",
    # 6xx: verification findings (`layoutc verify`, and `compile`, which verifies first)
    "LC601": "verification found a counterexample",
    "LC602": "the contract is vacuous: it admits no configuration",
    "LC603": "verification is inconclusive: the solver gave up (timeout, unknown, or the budget is spent)",
    "LC604": "verification warning",
    # 7xx: tools (compile, explain, audit)
    "LC701": "a generated module drifts from its contract (`compile --check`)",
    "LC702": "compile cannot proceed: two contracts share a name, or the output cannot be written",
    "LC703": "`explain`: a bad `--set` assignment or a configuration that cannot be evaluated",
    "LC704": "`audit`: the model config cannot be read or does not describe an MoE model",
    "LC705": "`audit`: no contracts to audit against",
    # 8xx: the command line
    "LC801": "bad command-line argument",
    "LC802": "bad environment variable (LAYOUTC_JOBS, LAYOUTC_VLLM)",
    # 9xx: internal
    "LC900": "internal error in layoutc (please report it)",
    # LRxxx: `layoutc run` and the checkpoint tools (printed as `layoutc run: error[LRxxx]: ...`, exit 2)
    "LR101": "`run`: no checkpoint format is declared or proposed for the config's model_type",
    "LR102": "`run`: a config.json value is missing or bad (sizes, layers, activation, dtype)",
    "LR103": "`run`: the --format-file cannot be read or is not a valid format",
    "LR104": "`run`: a bad command-line option (--tp, --layers, --layer-range, --tokens, --threads, --seed, --write-format)",
    "LR105": "`run`: an EP degree above the model's experts (a rank would hold none; runtime EP01)",
    "LR106": "`run`: a --tp x --ep product that does not match --world (runtime EP02)",
    "LR107": "`run`: an expert placement vLLM does not know, or the contract does not serve (runtime EP03)",
    "LR110": "`run`: the model folder or its config.json cannot be read",
    "LR111": "`run`: no safetensors files, or a bad model.safetensors.index.json",
    "LR112": "`run`: a tensor the format names is absent from the checkpoint",
    "LR113": "`run`: the expert tensors are stored in mixed dtypes",
    "LR114": "`run`: an expert or router tensor holds a NaN or an infinity",
    "LR115": "`run`: a safetensors file is truncated or its header is corrupt",
    "LR116": "`run`: an expert tensor's shape differs from the one the format and config.json give",
    "LR117": "`run`: no proposed format for an unknown model_type agrees with transformers' module",
    "LR118": "`run`: AMBIGUOUS: the tensor shapes cannot decide a proposed format's orientation and nothing proves it",
    "LR119": "`run`: the checkpoint holds another number of experts than config.json says (runtime EP04)",
    "LR120": "`run`: the generated contract module is missing, not a contract, or has no loaders or glue",
    "LR121": "`run`: the format declares per-expert biases, which the loaders do not support",
    "LR125": "`run` / `audit`: two generated contracts serve one checkpoint format on one route at the same rank",
    "LR126": "`run`: no generated contract serves the checkpoint's format on the route run needs (`route run`)",
    "LR130": "`run`: torch or the contract's kernel is unavailable",
    "LR131": "`run`: the contract has a parameter a checkpoint's config.json does not give",
    "LR132": "`run`: the contract admits none of the requested TP degrees (nothing is loaded)",
    "LR140": "`run`: the family weights the experts' input and the contract's glue cannot",
    "LR141": "`run`: input weighting at a top_k the contract's kernel does not compute it at",
    "LR142": "`run`: the family's activation (a clamp or alpha in config.json) is not the one the contract's glue computes",
    "LR143": "`run`: a --format-file's format disagrees with transformers' block in float32 (the field at fault named)",
    "LR145": "quantized checkpoint: a compressed-tensors weight_shape that is not its packed weight's [out, in]",
    "LR146": "`run`: the block applies a norm to routed + shared output after the MoE: its routed part cannot be isolated",
    "LR147": "`run`: the block's routed output is a constant multiple of the kernel's that no config key or format field states",
    "LR148": "`run`: the family's experts are non-gated (up -> act -> down, no gate) and the contract's glue computes gated ones only",
    "LR149": "quantized checkpoint: auto-round extra_config gives the routed experts different schemes",
    "LR150": "quantized checkpoint: an undeclared method, bit width, version or scheme",
    "LR151": "quantized checkpoint: a malformed quantization_config value",
    "LR152": "quantized checkpoint: a skip list or per-module override reaches the routed experts",
    "LR153": "quantized checkpoint: a scale, zero-point or g_idx whose shape does not match its weight",
    "LR154": "quantized checkpoint: a packed tensor with the wrong byte count",
    "LR155": "quantized checkpoint: a g_idx out of range",
    "LR156": "quantized checkpoint: a scale that is not finite (an E8M0 byte 255, a NaN or infinite float scale)",
    "LR157": "quantized checkpoint: the config disagrees with the tensors (dtype, bit width, unquantized tensors)",
    "LR158": "quantized checkpoint: a scheme whose layout the family's format cannot hold",
    "LR159": "quantized checkpoint: a topology the quantized runner does not run (expert parallelism, --ep > 1)",
    "LR160": "quantized checkpoint: the reference contract cannot be read or declares no decode for a weight",
    "LR161": "quantized checkpoint: the contract packs the checkpoint's words another way (count or axis)",
    "LR162": "quantized checkpoint: the contract needs a parameter the scheme does not give, or cannot hold it",
    "LR163": "quantized checkpoint: no contract declares the method and the intermediate does not split evenly",
    "LR164": "quantized checkpoint: a stored tensor the contract's loader needs is absent",
    "LR165": "quantized checkpoint: the contract text found differs from the text the generated module was compiled from",
    "LR166": "quantized checkpoint: GPTQ qzeros that are not the symmetric constant where the config says sym: true",
    "LR170": "quantized checkpoint: the checkpoint's own quantization method (the engine object its quant_method selects) refuses the degree",
    "LR180": "`kit`: no such kit driver, or the driver drives another contract",
    "LR181": "`kit`: the contract does not load or check",
    "LR182": "`kit`: the kit file cannot be written",
    "LR183": "`kit`: no admitted configuration pads and none is refused (the kit would see no pad bug)",
    "LR184": "`kit`: the contract has no `models` line for the driver's engine (no releases to hold it to)",
    "LR199": "`run`: an unexpected error (set LAYOUTC_TRACEBACK=1 and please report it)",
}

# Codes whose error means "the input could not be used", not "the input is wrong":
# the CLI exits 2 for them (a missing file must not look like a finding).
EXIT_2_CODES = frozenset({"LC100", "LC603", "LC702", "LC703", "LC704", "LC705", "LC801", "LC802", "LC900"})


def error(code: str, span: Span, message: str, *, related: tuple[Related, ...] = (),
          help: str | None = None) -> Diagnostic:
    assert code in CODES, code
    return Diagnostic(code, "error", span, message, related, help)


def warning(code: str, span: Span, message: str, *, help: str | None = None) -> Diagnostic:
    assert code in CODES, code
    return Diagnostic(code, "warning", span, message, (), help)


MAX_SNIPPET = 160  # characters of a source line shown around the caret


def _snippet(span: Span, lines: list[str] | None) -> list[str]:
    if lines is None or span.line <= 0 or span.line > len(lines):
        return []
    text = lines[span.line - 1].expandtabs(1)
    width = 1
    if span.end_line == span.line and span.end_column > span.column:
        width = span.end_column - span.column
    column = span.column
    if len(text) > MAX_SNIPPET:  # show a window of a very long line
        start = max(0, column - 1 - MAX_SNIPPET // 2)
        text = text[start:start + MAX_SNIPPET]
        column -= start
    width = max(1, min(width, len(text) - column + 2))
    gutter = f"{span.line:>4} | "
    caret = " " * (len(gutter) - 2) + "| " + " " * (column - 1) + "^" * width
    return [gutter + _printable(text), caret]


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def render_text(diags: list[Diagnostic], sources: dict[str, str]) -> str:
    """Render diagnostics as `file:line:col: severity[CODE]: message` plus the line and a caret."""
    out: list[str] = []
    split: dict[str, list[str]] = {}

    def lines(file: str) -> list[str] | None:
        if file not in split and file in sources:
            split[file] = sources[file].splitlines()
        return split.get(file)

    for d in diags:
        out.append(f"{d.span}: {d.severity}[{d.code}]: {_printable(d.message)}")
        out.extend(_snippet(d.span, lines(d.span.file)))
        for rel in d.related:
            out.append(f"{rel.span}: note: {_printable(rel.message)}")
            out.extend(_snippet(rel.span, lines(rel.span.file)))
        if d.help:
            out.append(f"  = help: {_printable(d.help)}")
    return "\n".join(out) + ("\n" if out else "")


def span_dict(span: Span) -> dict[str, object]:
    return {"file": span.file, "line": span.line, "column": span.column,
            "end_line": span.end_line, "end_column": span.end_column}


def to_json(diags: list[Diagnostic]) -> str:
    """Diagnostics as a JSON list: code, severity, message, span, related, help."""
    rows = [
        {
            "code": d.code,
            "severity": d.severity,
            "message": d.message,
            "span": span_dict(d.span),
            "related": [{"span": span_dict(r.span), "message": r.message} for r in d.related],
            "help": d.help,
        }
        for d in diags
    ]
    return json.dumps(rows, indent=2, sort_keys=True) + "\n"


def has_errors(diags: list[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diags)


def exit_code(diags: list[Diagnostic]) -> int:
    """0 no errors; 2 an error in :data:`EXIT_2_CODES` (unreadable input, inconclusive,
    usage, internal); else 1 (a finding: a contract error, a counterexample, drift)."""
    errors = [d for d in diags if d.severity == "error"]
    if not errors:
        return 0
    # LC100 "cannot read" (missing, FIFO, device) is exit 2; "not UTF-8" is a finding in the file.
    unusable = any(d.code in EXIT_2_CODES and (d.code != "LC100" or d.message.startswith("cannot read"))
                   for d in errors)
    return 2 if unusable else 1


def shown(value: str, limit: int = 80) -> str:
    """An untrusted value (an environment variable, an argument) as a message shows it:
    Python's ``ascii()`` of its first `limit` characters (non-ASCII and control characters
    escaped, so a Cyrillic e (U+0435) reads `\\u0435`, not `e`), and its length where it is cut."""
    if len(value) <= limit:
        return ascii(value)
    return f"{value[:limit]!a}... ({len(value)} characters)"


def file_span(path: str, line: int = 1, column: int = 1) -> Span:
    """A span at one position of a file (line/column 1-based; a whole-file finding uses 1:1)."""
    line, column = max(1, line), max(1, column)
    return Span(path, line, column, line, column + 1)


def _gh_escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_escape(text).replace(":", "%3A").replace(",", "%2C")


def render_github(diags: list[Diagnostic]) -> str:
    """GitHub Actions workflow commands: ``::error file=F,line=L,col=C,title=layoutc LCxxx::message``."""
    out = []
    for d in diags:
        kind = {"error": "error", "warning": "warning"}.get(d.severity, "notice")
        where = f"file={_gh_prop(d.span.file)},line={max(1, d.span.line)},col={max(1, d.span.column)}"
        message = d.message + (f" (help: {d.help})" if d.help else "")
        out.append(f"::{kind} {where},title={_gh_prop('layoutc ' + d.code)}::{_gh_escape(message)}")
    return "\n".join(out) + ("\n" if out else "")


def emit(diags: list[Diagnostic], sources: dict[str, str], fmt: str) -> None:
    """Write diagnostics in ``fmt``: ``text`` to stderr, ``json`` and ``github`` to stdout."""
    import sys

    if fmt == "json":
        sys.stdout.write(to_json(diags))
    elif fmt == "github":
        sys.stdout.write(render_github(diags))
    elif diags:
        sys.stderr.write(render_text(diags, sources))
