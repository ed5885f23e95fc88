"""Argument checks and integer helpers used by each generated `plan()`.

Every check raises `LayoutContractError` whose message starts with the contract
name (`who`) and names the parameter, the value and the admitted domain. The
integer helpers (`round_up`, `round_down`, `cdiv`, `lcm`) are the vocabulary's
(vocab.py), the ones the checker evaluates contracts with.
"""

from __future__ import annotations

from typing import Any

import torch

from .errors import LayoutContractError
from .plans import fall_back as fall_back
from .vocab import cdiv as cdiv
from .vocab import lcm as lcm
from .vocab import round_down as round_down
from .vocab import round_up as round_up


def check_int(who: str, name: str, value: object, low: int, high: int, where: str) -> int:
    """An int (not a bool) in low..high. Source: the contract's `param NAME: int in LOW..HIGH`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LayoutContractError(f"{who}: {name} must be an int, got {value!r}")
    if not low <= value <= high:
        raise LayoutContractError(f"{who}: {name}={value} is outside {low}..{high} ({where})")
    return value


def check_choice(who: str, name: str, value: object, choices: tuple[int, ...], where: str) -> int:
    """An int (not a bool) in a finite set. Source: `param NAME: int in {...}`."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in choices:
        raise LayoutContractError(f"{who}: {name}={value!r} is not one of {choices} ({where})")
    return value


def check_bool(who: str, name: str, value: object) -> bool:
    """A real bool. Source: `param NAME: bool`."""
    if not isinstance(value, bool):
        raise LayoutContractError(f"{who}: {name} must be a bool, got {value!r}")
    return value


def check_member(who: str, name: str, value: object, members: tuple[str, ...], where: str) -> str:
    """An enum member, given as its name (any case) or an enum whose `.value` is the name.

    Returns the member exactly as the contract spells it.
    """
    text = getattr(value, "value", value)
    if isinstance(text, str):
        for member in members:
            if text == member or text.lower() == member.lower():
                return member
    raise LayoutContractError(f"{who}: {name}={value!r} is not one of {members} ({where})")


def check_dtype(who: str, name: str, value: object, members: tuple[str, ...], where: str) -> str:
    """A dtype parameter: a member name or a `torch.dtype` (torch.bfloat16 -> "bfloat16")."""
    if isinstance(value, torch.dtype):
        value = str(value).removeprefix("torch.")
    return check_member(who, name, value, members, where)


def groups(size: int, group_size: int) -> int:
    """Groups along an axis of `size` values; group_size -1 is one group over the whole axis."""
    return 1 if group_size == -1 else size // group_size


def broken(who: str, kind: str, where: str, message: str, values: dict[str, Any]) -> str:
    """The text of a failed `require` or `admit`: rule kind, contract line, message and values."""
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    return f"{who}: {kind} failed ({where}): {message} [{shown}]"


def refused(who: str, where: str, message: str, values: dict[str, Any]) -> LayoutContractError:
    """The error of a broken `require` rule (`broken(who, "require", ...)`), for `raise`."""
    return LayoutContractError(broken(who, "require", where, message, values))


class Checker:
    """What `plan()` of one contract checks with: `check(name, value)` is `value` of `plan()`'s
    parameter `name` checked against its declared domain in `params` (the module's `PlanParam`
    table, interface.py): a range by `check_int`, a set by `check_choice`, a bool by
    `check_bool`, an enum by `check_member` (`check_dtype` for the storage dtype parameters
    named in `dtypes`); it returns the value as the plan holds it and raises
    LayoutContractError as those do. `refused` and `not_admitted` are the contract's broken
    `require` (an error to raise) and `admit` (the reason a plan is not supported)."""

    def __init__(self, who: str, where: str, params: tuple[Any, ...], dtypes: tuple[str, ...] = ()) -> None:
        self.who, self.where, self.dtypes = who, where, dtypes
        self.table = {p.name: p for p in params}

    def __call__(self, name: str, value: object) -> Any:
        who, where, p = self.who, self.where, self.table[name]
        if p.kind == "range":
            return check_int(who, name, value, p.low, p.high, where)
        if p.kind == "set":
            return check_choice(who, name, value, p.values, where)
        if p.kind == "bool":
            return check_bool(who, name, value)
        if name in self.dtypes:
            return check_dtype(who, name, value, p.values, where)
        return check_member(who, name, value, p.values, where)

    def dtype(self, name: str, value: object) -> str:
        """`check(name, value)` of a storage dtype parameter: the member's name (a `str`, also for
        a `torch.dtype` given)."""
        checked: str = self(name, value)
        return checked

    def refused(self, where: str, message: str, values: dict[str, Any]) -> LayoutContractError:
        """The error of the `require` rule at `where` (file:line), broken by `values`, for `raise`."""
        return refused(self.who, where, message, values)

    def not_admitted(self, where: str, message: str, values: dict[str, Any]) -> str:
        """The reason a plan is not supported: the `admit` rule at `where`, broken by `values`."""
        return broken(self.who, "admit", where, message, values)


def checker(who: str, where: str, params: tuple[Any, ...], dtypes: tuple[str, ...] = ()) -> Checker:
    """The `Checker` of one contract (`who`, its file `where`) over its `PlanParam` table."""
    return Checker(who, where, params, dtypes)
