"""The `--help` texts of `layoutc`'s subcommands: what each does, an example, the exit codes
(issue 24 item 5). `layoutc run`'s are in layoutc.tools.run (RUN_HELP, RUN_EPILOG).

Every exit code is the one the command's code returns (layoutc.compiler.diagnostics.exit_code
for the contract commands: 0 no errors, 1 a finding, 2 an unusable input); every diagnostic
code printed is explained by `layoutc rule CODE`.
"""

from __future__ import annotations

_RULE = "`layoutc rule CODE` explains any code printed."

HELP: dict[str, tuple[str, str]] = {
    "check": (
        "Parse and check contracts: grammar, names, types and the contract's own rules, without the solver.",
        "examples:\n  layoutc check contracts/\n  layoutc check contracts/vllm_cpu_grouped_gemm.moe --format json\n\n"
        "exit codes:\n  0  no errors\n  1  a contract has errors (file:line:col: error[LCxxx]: ...)\n"
        "  2  a file cannot be read (LC100), no contracts found, or a usage error (LC801)\n\n" + _RULE),
    "verify": (
        "Prove with z3, for every admitted configuration, that each contract's pad is sound "
        "(alignment, placement, roundtrip, inertness, coverage, admission; docs/verification.md).",
        "examples:\n  layoutc verify contracts/\n  layoutc verify contracts/vllm_cpu_grouped_gemm.moe --budget-s 30\n\n"
        "exit codes:\n  0  every obligation proved\n  1  a counterexample (printed) or a vacuous contract\n"
        "  2  inconclusive (timeout, budget), an unreadable file, or a usage error (LC801)\n\n" + _RULE),
    "compile": (
        "Render each contract into a standalone Python module (plan, pad_*, unpad_*, shard_*, "
        "kernel_args, glue); verifies first unless --no-verify. Writes are atomic.",
        "examples:\n  layoutc compile contracts/ --out generated\n  layoutc compile contracts/ --out generated --check\n\n"
        "exit codes:\n  0  written (or, with --check, DIR is up to date)\n"
        "  1  a contract error, a counterexample, or (with --check) drift between DIR and the contracts\n"
        "  2  an unreadable file, an inconclusive proof, or a usage error (LC801)\n\n" + _RULE),
    "explain": (
        "Print one configuration's plan and a picture of each padded tensor and each rank's slice.",
        "examples:\n  layoutc explain contracts/vllm_cpu_grouped_gemm.moe --set num_experts=8 --set hidden_size=2048 "
        "--set intermediate_size=768 --set tp_size=2 --set isa=vec --set activation=silu --set dtype=bfloat16\n"
        "  layoutc explain contracts/vllm_cpu_grouped_gemm.moe --set num_experts=8 --set hidden_size=2048 "
        "--set intermediate_size=768 --set tp_size=4 --set isa=vec --set activation=silu --set dtype=bfloat16 "
        "--engine vllm,sglang\n\n"
        "exit codes:\n  0  the plan and pictures were printed\n"
        "  1  the contract has errors, or does not admit the configuration (its rule is printed)\n"
        "  2  an unreadable file, a bad or missing --set, or an unknown engine (LC703)\n\n" + _RULE),
    "audit": (
        "For model configs and TP degrees, which bundled kernels take the fast path, and why the others "
        "refuse (docs/audit.md).",
        "examples:\n  layoutc audit qwen3-30b-a3b mixtral-8x7b --tp 1,2,4,8\n"
        "  layoutc audit gpt-oss-120b --engine vllm,sglang --format markdown\n\n"
        "exit codes:\n  0  the audit ran (refused configurations are findings, not errors)\n"
        "  1  a contract has errors (its LCxxx diagnostics)\n"
        "  2  a config cannot be read or is not an MoE model, an unknown name (LC704), an unreadable "
        "contract (LC100), no contracts (LC705), or a bad --tp (LC801)\n\n" + _RULE),
    "kit": (
        "Write a self-contained pytest module (a test kit) that runs an engine's own pad code on CPU tensors "
        "at configurations z3 picks over the contract, and compares its bytes with the generated module's "
        "(docs/kits.md). The kit needs torch, pytest, the engine and the generated module, never layoutc.",
        "examples:\n  layoutc kit contracts/vllm_cpu_grouped_gemm.moe --path vllm_cpu_unquantized "
        "--out tests/kits/test_layoutc_vllm_cpu.py\n  layoutc kit --list\n\n"
        "exit codes:\n  0  written (or listed)\n"
        "  2  no such driver or a driver for another contract (LR180), a contract that does not load (LR181), "
        "an output that cannot be written (LR182), no padded configuration (LR183)\n\n" + _RULE),
    "formats": (
        "List the built-in checkpoint formats of `layoutc run` (the family table, docs/formats.md); "
        "with NAME, print that family's format as JSON, the schema of a --format-file.",
        "examples:\n  layoutc formats\n  layoutc formats qwen3_moe > my_format.json\n\n"
        "exit codes:\n  0  printed\n  2  NAME is not a built-in format (LC801; the built-in ones are listed)"),
    "rule": (
        "Print the documentation of a diagnostic code: the contract codes (LCxxx) and the tools' "
        "codes (LRxxx of run, ...), from the one diagnostic registry. Without CODE (or with --list), "
        "list every code with its one-line title.",
        "examples:\n  layoutc rule LC201\n  layoutc rule LR116\n  layoutc rule --list\n\n"
        "exit codes:\n  0  printed\n  2  the code is not registered (LC801)"),
}

#: what each positional argument is, by subcommand and metavar
POSITIONALS: dict[tuple[str, str], str] = {
    ("check", "PATH"): "a contract file (.moe) or a folder of them",
    ("verify", "PATH"): "a contract file (.moe) or a folder of them",
    ("compile", "PATH"): "a contract file (.moe) or a folder of them",
    ("explain", "CONTRACT"): "a contract file (.moe), e.g. contracts/vllm_cpu_grouped_gemm.moe",
    ("audit", "CONFIG"): "a config.json path, a checkpoint folder, or a bundled model name (e.g. qwen3-30b-a3b)",
    ("kit", "CONTRACT"): "a contract file (.moe), e.g. contracts/vllm_cpu_grouped_gemm.moe",
    ("rule", "CODE"): "a diagnostic code, e.g. LC201, LR116 (none: list every code)",
}
