"""The recompute options a layer table may name: SAPP's five, and those a user declares.

A table that names another option (a typo such as ``fulll``, or a measured
``"attention"``) is refused unless that name is declared:
``LayerTable(..., custom_options=...)``, ``read_layers_csv(...,
custom_options=...)``, ``--custom-options``; :func:`sappkit.torch.measure_layers`
declares the names it measures.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from .._check import short
from ..columns import OPTION, SAPP_OPTIONS
from ..errors import InputError

__all__ = ["CUSTOM_OPTIONS", "check_custom_options", "check_option_names"]

#: The key a table's custom options go under in its frame's ``attrs``.
CUSTOM_OPTIONS = "custom_options"


def check_custom_options(value, name: str = "custom_options") -> tuple[str, ...]:
    """``value`` as a tuple of option names beside SAPP's: distinct, non-empty strings on one line.

    Examples
    --------
    >>> check_custom_options(["attention", "mlp"])
    ('attention', 'mlp')
    """
    if value is None:
        return ()
    names = (value,) if isinstance(value, str) else value
    try:
        names = tuple(names)
    except TypeError:
        raise InputError(f"{name} must be a tuple of option names; got {short(value)}") from None
    for index, option in enumerate(names):
        if not (isinstance(option, str) and option.strip() == option and option and option.isprintable()):
            raise InputError(f"{name}[{index}] is {short(option)}; expected an option name (a non-empty string on "
                             "one line, without leading or trailing spaces)")
    return tuple(dict.fromkeys(names))


def check_option_names(frame: pd.DataFrame, custom: tuple[str, ...], where: Callable[[int], str]) -> None:
    """Refuse the first row whose ``option`` is neither SAPP's nor in ``custom``, naming the known ones (the
    command line's wording names ``--custom-options``); ``where(row)`` names a row."""
    known = (*SAPP_OPTIONS, *custom)
    for row, option in frame[OPTION].items():
        if option not in known:
            refused = (f"{where(row)} column 'option' is {short(option)}; expected a recompute option, one of "
                       f"{', '.join(map(repr, known))}")
            raise InputError(f"{refused} (declare others with custom_options=...)",
                             cli=f"{refused} (declare others with --custom-options NAME,...)")
