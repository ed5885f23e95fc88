# Copied by `layoutc compile` from layoutc/runtime/errors.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""The named exceptions of generated modules (shared by every contract module)."""

from __future__ import annotations

from .twin import adopt


class LayoutContractError(ValueError):
    """A configuration, plan or tensor that a layout contract does not admit.

    The message starts with the contract's name and names the rule, the values
    and, where there is one, the contract line.
    """


class KernelUnavailableError(RuntimeError):
    """The kernel library a contract binds is not installed or cannot run on this CPU."""


adopt(globals())  # one class per process beside layoutc (twin.py)
