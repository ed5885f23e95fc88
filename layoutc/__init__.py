"""layoutc: MoE kernel weight-layout contracts, verified with z3 and compiled to pad code."""

__version__ = "0.1.0"
