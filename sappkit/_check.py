"""Small argument checks shared by every public function (messages name argument, value, expectation)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from .errors import InputError

__all__ = ["check_int", "check_number", "check_choice"]


def check_int(name: str, value, *, minimum: int | None = None, why: str = "") -> int:
    """Return ``value`` as an int, or raise naming ``name`` when it is not an int >= ``minimum``."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and float(value).is_integer()
    if ok and (minimum is None or value >= minimum):
        return int(value)
    expected = "an int" if minimum is None else f"an int >= {minimum}"
    hint = f" ({why})" if why else ""
    raise InputError(f"{name} must be {expected}; got {value!r}{hint}")


def check_number(name: str, value, *, minimum: float | None = None, strict: bool = False) -> float:
    """Return ``value`` as a finite float, or raise when it is not a number above ``minimum``."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (minimum is None or value > minimum or (not strict and value == minimum)):
        return float(value)
    bound = "" if minimum is None else (f" > {minimum:g}" if strict else f" >= {minimum:g}")
    raise InputError(f"{name} must be a finite number{bound}; got {value!r}")


def check_choice(name: str, value, choices: Iterable[str]) -> str:
    """Return ``value`` when it is one of ``choices``, else raise listing them."""
    choices = tuple(choices)
    if value in choices:
        return value
    raise InputError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
