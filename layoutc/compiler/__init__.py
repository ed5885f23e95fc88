"""The compiler: contracts (.moe) -> checked IR -> proofs (z3) -> generated modules.

Needs lark, jinja2 and z3 only; nothing here imports torch or a tool (docs/architecture.md).
"""
