"""The plan the one-more-recomputed-layer analysis extends: ``current``, read and checked.

``current`` is a choice of a runtime mode per body layer: a
:class:`~sappkit.RecomputeChoice` (``choose_recompute(..., per_layer=True)``
or a plan the analysis returned) or its ranges frame (``first``, ``count``,
``kind``, ``mode``; optional ``option``, ``offloaded_mb``).
:func:`layer_modes` reads it as one mode per body layer of the partition the
analysis priced, refusing what the analysis cannot extend (gaps, overlaps,
other kinds, modes it does not price, offload); :func:`check_dimensions`
refuses a plan priced at other parallel degrees, stated as
:func:`dimension_pairs` states them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from .._check import short
from .._frames import check_frame
from ..columns import KIND, OPTION
from ..errors import InputError
from ..recompute.choice import MODE, OFFLOADED_MB, RecomputeChoice
from ..recompute.pricing import Pricing

__all__ = ["layer_modes", "check_dimensions", "dimension_pairs"]

_CURRENT_COLUMNS = ("first", "count", KIND, MODE)


def layer_modes(current, *, pricing: Pricing) -> np.ndarray:
    """Each body layer's mode under ``current``, refusing what the analysis cannot extend.

    Parameters
    ----------
    current : RecomputeChoice or DataFrame
        A choice of a mode per layer, or its ranges: ``first``, ``count``,
        ``kind``, ``mode`` (optional ``option``, ``offloaded_mb``).
    pricing : Pricing
        The prices of the analysis (priced with ``modes``): its body layers
        and modes.

    Returns
    -------
    ndarray of int
        Per body layer, the index of its mode in ``pricing.modes``.

    Raises
    ------
    InputError
        A choice that chose nothing; a range with count <= 0 or first < 0;
        overlapping ranges; a body layer missing or beyond the partition; a
        kind that is not the partition's; a mode not priced; a plan that
        offloads.

    Examples
    --------
    >>> from sappkit import LayerTable, Partition
    >>> from sappkit.recompute.pricing import price
    >>> table = LayerTable(pd.DataFrame({"kind": "b", "role": "body", "count": 4, "param_mb": 100.0,
    ...                                  "option": ["none", "full"], "forward_time": 1.0,
    ...                                  "backward_time": [2.0, 3.0], "activation_mb": [40.0, 5.0]}))
    >>> cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    >>> pricing = price(table, Partition(stages=2, micro_batches=4, cells=cells), memory_mb=1e5, modes=("off", "full"))
    >>> current = pd.DataFrame({"first": [0, 1], "count": [1, 3], "kind": "b", "mode": ["full", "off"]})
    >>> layer_modes(current, pricing=pricing).tolist()
    [1, 0, 0, 0]
    """
    if isinstance(current, RecomputeChoice):
        if not current.chosen:
            raise InputError(f"current made no choice ({current.reason}); there is no plan to extend")
        frame = current.ranges
    elif isinstance(current, pd.DataFrame):
        frame = current.reset_index(drop=True)
    else:
        raise InputError(f"current must be a RecomputeChoice or a ranges DataFrame; got {type(current).__name__}")
    check_frame(frame, "current", _CURRENT_COLUMNS, "a plan's ranges frame")
    body = pricing.body
    names = tuple(pricing.modes)
    count = len(body)
    modes = np.full(count, -1)
    owner = np.full(count, -1)
    for row, item in enumerate(frame.itertuples(index=False)):
        first, length = _range_bounds(row, item.first, item.count)
        _check_range_mode(row, item, pricing.modes)
        if first + length > count:
            raise InputError(f"current range {row} covers layers {first}-{first + length - 1}; the partition has "
                             f"body layers 0-{count - 1}")
        taken = owner[first:first + length]
        if (taken >= 0).any():
            at = first + int(np.argmax(taken >= 0))
            raise InputError(f"current ranges {owner[at]} and {row} overlap at layer {at}; each body layer "
                             "belongs to one range")
        placed = body[KIND].iloc[first:first + length].to_numpy()
        wrong = np.flatnonzero(placed != item.kind)
        if wrong.size:
            at = first + int(wrong[0])
            raise InputError(f"current range {row} gives layer {at} kind {item.kind!r}; the partition places "
                             f"kind {placed[wrong[0]]!r} there")
        owner[first:first + length] = row
        modes[first:first + length] = names.index(item.mode)
    absent = np.flatnonzero(modes < 0)
    if absent.size:
        listed = ", ".join(map(str, absent[:8])) + (", ..." if absent.size > 8 else "")
        raise InputError(f"current leaves {absent.size} body layer(s) out ({listed}); every body layer of the "
                         "partition needs a mode")
    return modes


def check_dimensions(current, dimensions: tuple[tuple[str, int], ...]) -> None:
    """Refuse ``current`` when it was priced at parallel degrees other than ``dimensions``.

    A plan states its degrees (``AlternativePlan.dimensions``); a plan that
    states none (a chooser's choice, a ranges frame) passes.

    Examples
    --------
    >>> check_dimensions(pd.DataFrame({"first": [0], "count": [4], "kind": "b", "mode": "off"}), (("tp", 4),))
    """
    stated = getattr(current, "dimensions", ())
    if stated and stated != dimensions:
        raise InputError(f"current was priced at dimensions {stated!r}, this analysis at {dimensions!r}; "
                         "alternatives keep the strategy: build a RecomputeAnalysis at those dimensions")


def dimension_pairs(dimensions) -> tuple[tuple[str, int], ...]:
    """Parallel degrees as ``((name, degree), ...)``, from pairs or a mapping name -> degree.

    Examples
    --------
    >>> dimension_pairs({"dp": 8, "tp": 4})
    (('dp', 8), ('tp', 4))
    """
    if isinstance(dimensions, str) or not isinstance(dimensions, Mapping | Iterable):
        raise InputError(f"dimensions must be (name, degree) pairs or a mapping name -> degree, e.g. "
                         f"{{'tp': 4}}; got {short(dimensions)}")
    pairs = list(dimensions.items()) if isinstance(dimensions, Mapping) else list(dimensions)
    out = []
    for index, pair in enumerate(pairs):
        ok = isinstance(pair, tuple | list) and len(pair) == 2 and isinstance(pair[0], str) and \
            bool(pair[0].strip()) and isinstance(pair[1], int | np.integer) and not isinstance(pair[1], bool) \
            and pair[1] >= 1
        if not ok:
            raise InputError(f"dimensions[{index}] is {short(pair)}; expected a (name, degree) pair with a degree "
                             ">= 1, e.g. ('tp', 4)")
        if any(name == pair[0] for name, _ in out):
            raise InputError(f"dimensions names {pair[0]!r} twice; give each parallel dimension once")
        out.append((pair[0], int(pair[1])))
    return tuple(out)


def _range_bounds(row: int, first, count) -> tuple[int, int]:
    def whole(value) -> bool:
        return isinstance(value, int | np.integer | float | np.floating) and not isinstance(value, bool) \
            and math.isfinite(value) and float(value).is_integer()

    if not (whole(first) and whole(count)) or count <= 0 or first < 0:
        raise InputError(f"current range {row} has first={first!r}, count={count!r}; a range needs whole numbers "
                         "first >= 0 and count >= 1")
    return int(first), int(count)


def _check_range_mode(row: int, item, modes: dict[str, str]) -> None:
    where = f"current range {row} (layers {int(item.first)}-{int(item.first + item.count - 1)})"
    offloaded = getattr(item, OFFLOADED_MB, 0.0)
    if offloaded and offloaded > 0:
        raise InputError(f"{where} offloads {offloaded!r} MB per micro-batch to the host; the analysis turns "
                         "layers up on the device and does not price offload (choose without a host link)")
    mode = item.mode
    if not isinstance(mode, str):
        raise InputError(f"{where} runs mode {mode!r}; the analysis extends a choice of a mode per layer "
                         "(choose_recompute(..., modes=..., per_layer=True))")
    if mode not in modes:
        raise InputError(f"{where} runs mode {mode!r}, which the analysis does not price; its modes are "
                         f"{', '.join(map(repr, modes))}")
    option = getattr(item, OPTION, modes[mode])
    if option != modes[mode]:
        raise InputError(f"{where} runs option {option!r} under mode {mode!r}; the analysis prices mode {mode!r} "
                         f"as option {modes[mode]!r}")
