"""A layer table read once into plain numbers for the recompute chooser, and the chooser's ``modes`` checked.

:func:`layer_prices` turns a :class:`~sappkit.LayerTable` into
:class:`LayerPrices` (per body kind its options, front, plain option and
each option's costs; head and tail rows as dicts) and keeps the result for
as long as the table lives, so the chooser pays the table's pandas lookups
once, not on every slider move.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .._check import check_bool, short
from ..columns import (
    ACTIVATION_MB, BACKWARD_TIME, DEFAULT_MODES, FIRST_WORKING_MB, FORWARD_TIME, GRAD_MB, KIND, MEMORY_ONCE_MB, OPTION,
    PARAM_MB, TIME, WORKING_MB,
)
from ..errors import InputError
from ..layers.table import LayerTable

__all__ = ["LayerPrices", "layer_prices", "resolve_modes", "holds_grads"]

_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class LayerPrices:
    """The numbers of a layer table the chooser uses.

    Attributes
    ----------
    kinds : tuple of str
        Body kinds, model order.
    counts, param_mb : dict
        Kind -> layers in the model, parameter MB of one layer.
    options, front : dict
        Kind -> its options in table order, and its front (fastest first).
    plain : dict
        Kind -> its plain option (:meth:`LayerTable.plain`).
    costs : dict
        ``(kind, option)`` -> one layer's ``activation_mb``,
        ``memory_once_mb``, ``forward_time``, ``time`` (forward + backward),
        ``working_mb`` (``W``, :meth:`LayerTable.working_set_mb`),
        ``first_working_mb`` (``W1``, the same with ``first=True``) and
        ``grad_mb``.
    head, tail : dict or None
        The head's and tail's rows.
    const_mb : float
    modules : tuple of str
        Modules of the body kinds; more than one makes the model multimodal.
    """

    kinds: tuple[str, ...]
    counts: dict[str, int]
    param_mb: dict[str, float]
    options: dict[str, tuple[str, ...]]
    front: dict[str, tuple[str, ...]]
    plain: dict[str, str]
    costs: dict[tuple[str, str], dict[str, float]]
    head: dict | None
    tail: dict | None
    const_mb: float
    modules: tuple[str, ...]


def layer_prices(table: LayerTable) -> LayerPrices:
    """The table's :class:`LayerPrices`, computed once per table object."""
    if table not in _CACHE:
        _CACHE[table] = _prices(table)
    return _CACHE[table]


def _prices(table: LayerTable) -> LayerPrices:
    records = table.frame.to_dict("records")
    kinds = table.body_kinds
    by_kind = {kind: {r[OPTION]: r for r in records if r[KIND] == kind} for kind in kinds}
    costs = {(kind, option): _costs(table, kind, row) for kind, rows in by_kind.items() for option, row in rows.items()}
    head, tail = table.head, table.tail
    return LayerPrices(
        kinds=kinds, counts={kind: table.count(kind) for kind in kinds},
        param_mb={kind: float(next(iter(rows.values()))[PARAM_MB]) for kind, rows in by_kind.items()},
        options={kind: tuple(rows) for kind, rows in by_kind.items()},
        front={kind: table.front(kind) for kind in kinds}, plain={kind: table.plain(kind) for kind in kinds},
        costs=costs, head=None if head is None else head.to_dict(), tail=None if tail is None else tail.to_dict(),
        const_mb=float(table.const_mb), modules=table.modules)


def _costs(table: LayerTable, kind: str, row: dict) -> dict[str, float]:
    option = row[OPTION]
    return {ACTIVATION_MB: row[ACTIVATION_MB], MEMORY_ONCE_MB: row[MEMORY_ONCE_MB],
            FORWARD_TIME: row[FORWARD_TIME], TIME: row[FORWARD_TIME] + row[BACKWARD_TIME],
            WORKING_MB: table.working_set_mb(kind, option),
            FIRST_WORKING_MB: table.working_set_mb(kind, option, first=True), GRAD_MB: row[GRAD_MB]}


def resolve_modes(modes, prices: LayerPrices) -> dict[str, str] | None:
    """``modes`` as a mapping mode -> option, checked against every body kind (None stays None)."""
    if modes is None:
        return None
    if isinstance(modes, str):
        raise InputError(f"modes must be a tuple of mode names or a mapping mode -> option; got the string "
                         f"{modes!r} (write modes=({modes!r},))")
    if isinstance(modes, Mapping):
        mapping = dict(modes)
    elif isinstance(modes, Iterable):
        names = list(itertools.islice(modes, len(DEFAULT_MODES) + 1))
        for index, name in enumerate(names):
            if not isinstance(name, str):
                raise InputError(f"modes[{index}] is {short(name)}; expected a mode name, one of "
                                 f"{', '.join(map(repr, DEFAULT_MODES))}")
            if name in names[:index]:
                raise InputError(f"modes names {name!r} twice; name each mode once")
            if name not in DEFAULT_MODES:
                raise InputError(f"modes names an unknown mode {name!r}; the default modes are "
                                 f"{', '.join(map(repr, DEFAULT_MODES))} (pass a mapping mode -> option for others)")
        mapping = {name: DEFAULT_MODES[name] for name in names}
    else:
        raise InputError(f"modes must be a tuple of mode names or a mapping mode -> option; got {short(modes)}")
    if not mapping:
        raise InputError("modes is empty; give at least one mode, e.g. modes=('off', 'selective', 'full')")
    seen: dict[str, str] = {}
    for mode, option in mapping.items():
        if not isinstance(mode, str) or not mode.strip() or not isinstance(option, str):
            raise InputError(f"modes must map mode names to option names; got {short(mode)}: {short(option)}")
        if option in seen:
            raise InputError(f"modes maps {seen[option]!r} and {mode!r} to the same option {option!r}; "
                             "each mode needs its own option")
        seen[option] = mode
        for kind in prices.kinds:
            if option not in prices.options[kind]:
                raise InputError(f"modes maps {mode!r} to option {option!r}, which kind {kind!r} does not have "
                                 f"(its options: {', '.join(map(repr, prices.options[kind]))})")
    return mapping


def holds_grads(prices: LayerPrices, micro_batches: int, fsdp_holds_grads: bool | None) -> bool:
    """Whether stages have the second peak: ``fsdp_holds_grads`` where given, else FSDP holds gradients (some
    body ``grad_mb`` above 0) and accumulates them over several micro-batches (``m > 1``)."""
    if fsdp_holds_grads is not None:
        return check_bool("fsdp_holds_grads", fsdp_holds_grads)
    held = any(cost[GRAD_MB] > 0 for (kind, _), cost in prices.costs.items() if kind in prices.kinds)
    return held and micro_batches > 1
