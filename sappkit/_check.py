"""Small argument checks shared by every public function (messages name argument, value, expectation).

Values are shown with :func:`short`, which bounds the work and the length of
the text however big the value (an alias bomb, a million-item list).
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterable, Mapping

import numpy as np

from .errors import InputError
from .limits import Limit

__all__ = ["check_int", "check_number", "check_choice", "check_bool", "check_numbers", "check_name", "short",
           "as_whole", "as_finite"]

#: Longest repr :func:`short` shows in full.
_SHORT = 60


def short(value) -> str:
    """``repr(value)`` when short, else a description (``a list of 9 items``), in bounded time.

    Examples
    --------
    >>> short([1, 2]), short(list(range(100))), short("x" * 100)
    ('[1, 2]', 'a list of 100 items', 'a str of 100 characters')
    """
    text = ""
    if _few_items(value):
        try:
            text = repr(value)
        except Exception:  # an int past Python's digit limit, an object whose repr fails: describe it instead
            text = ""
    if text and len(text) <= _SHORT:
        return text
    if isinstance(value, str):
        return f"a str of {len(value)} characters"
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return f"an int of {int(value).bit_length()} bits"
    try:
        size = f" of {len(value)} items"
    except Exception:
        size = ""
    return f"a {type(value).__name__}{size}"


def _few_items(value) -> bool:
    """Whether ``value`` holds few enough items, few enough levels deep, that its repr is cheap to make.

    Containers are walked without recursion and only up to a budget, so a
    value that shares itself a billion times over (YAML aliases) is not expanded.
    """
    budget, stack = _SHORT, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        budget -= 1
        if budget < 0 or depth > 4 or (isinstance(item, str | bytes) and len(item) > _SHORT):
            return False
        if isinstance(item, list | tuple | set | frozenset | dict):
            if len(item) > budget:
                return False
            stack.extend((child, depth + 1) for child in ([*item.keys(), *item.values()]
                                                          if isinstance(item, dict) else item))
    return True


def as_whole(value) -> int | None:
    """``value`` as an int when it is a whole number (not a bool), else None."""
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    number = as_finite(value)
    return int(number) if number is not None and number.is_integer() else None


def as_finite(value) -> float | None:
    """``value`` as a finite float when it is a real number (not a bool), else None."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    return number if math.isfinite(number) else None


def check_int(name: str, value, *, minimum: int | None = None, maximum: Limit | None = None, why: str = "") -> int:
    """Return ``value`` as an int, or raise naming ``name`` when it is not an int in ``minimum..maximum``.

    Examples
    --------
    >>> from sappkit.limits import MAX_STAGES
    >>> check_int("stages", 4.0, minimum=2, maximum=MAX_STAGES)
    4
    >>> check_int("stages", 2**70, minimum=2, maximum=MAX_STAGES)
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: stages must be an int <= 256 (sappkit.limits.MAX_STAGES); got 1180591620717411303424
    """
    number = as_whole(value)
    if number is not None and (minimum is None or number >= minimum):
        if maximum is not None and number > maximum:
            raise InputError(f"{name} must be an int <= {maximum.cited}; got {short(value)}")
        return number
    expected = "an int" if minimum is None else f"an int >= {minimum}"
    hint = f" ({why})" if why else ""
    raise InputError(f"{name} must be {expected}; got {short(value)}{hint}")


def check_number(name: str, value, *, minimum: float | None = None, strict: bool = False,
                 maximum: Limit | None = None) -> float:
    """Return ``value`` as a finite float, or raise when it is not a number above ``minimum`` (up to ``maximum``)."""
    number = as_finite(value)
    if number is not None and (minimum is None or number > minimum or (not strict and number == minimum)):
        if maximum is not None and number > maximum:
            raise InputError(f"{name} must be a number <= {maximum.cited}; got {short(value)}")
        return number
    bound = "" if minimum is None else (f" > {minimum:g}" if strict else f" >= {minimum:g}")
    raise InputError(f"{name} must be a finite number{bound}; got {short(value)}")


def check_numbers(name: str, values, *, maximum_count: Limit, maximum: Limit | None = None) -> list[float]:
    """A non-empty sequence of finite numbers > 0 (a sweep's memory limits), at most ``maximum_count`` of them.

    Examples
    --------
    >>> from sappkit.limits import MAX_SWEEP_POINTS
    >>> check_numbers("memory_mb", range(1, 4), maximum_count=MAX_SWEEP_POINTS)
    [1.0, 2.0, 3.0]
    """
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise InputError(f"{name} must be a sequence of memory limits in MB; got {short(values)}")
    # One more than allowed is enough to refuse, and an endless iterator cannot hang the call.
    values = list(itertools.islice(values, maximum_count + 1))
    if not values:
        raise InputError(f"{name} must list at least one memory limit; got an empty sequence")
    if len(values) > maximum_count:
        raise InputError(f"{name} lists more than {maximum_count.cited} memory limits; sweep fewer")
    return [check_number(f"{name}[{i}]", value, minimum=0, strict=True, maximum=maximum)
            for i, value in enumerate(values)]


def check_choice(name: str, value, choices: Iterable[str]) -> str:
    """Return ``value`` when it is one of ``choices``, else raise listing them."""
    choices = tuple(choices)
    for choice in choices:
        try:
            if isinstance(value, type(choice)) and value == choice:
                return choice
        except (TypeError, ValueError):  # an array or an object whose == is not a bool
            break
    raise InputError(f"{name} must be one of {', '.join(map(repr, choices))}; got {short(value)}")


def check_bool(name: str, value) -> bool:
    """Return ``value`` as a bool when it is one (numpy's included), else raise."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise InputError(f"{name} must be a bool; got {short(value)}")


def check_name(name: str, value):
    """Return ``value`` when it names something (a kind, option, mode or run): a non-empty str, or an int."""
    if (isinstance(value, str) and value.strip()) or (isinstance(value, numbers.Integral)
                                                     and not isinstance(value, bool | np.bool_)):
        return value
    raise InputError(f"{name} must be a non-empty name; got {short(value)}")
