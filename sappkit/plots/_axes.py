"""The Axes a drawing goes on (the caller's, checked, or a new figure's), and how a time axis is labelled."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from .._check import check_number, short
from ..errors import InputError

__all__ = ["axes_for", "axes_list", "optional_number", "time_label"]


def axes_for(ax, figsize: tuple[float, float]) -> Axes:
    """``ax`` when it is a matplotlib Axes, a new figure of ``figsize`` when None; anything else is refused."""
    if ax is None:
        return plt.subplots(figsize=figsize)[1]
    if not isinstance(ax, Axes):
        raise InputError(f"ax must be a matplotlib Axes or None; got {short(ax)}")
    return ax


def time_label(what: str, unit: str) -> str:
    """The label of an axis of times, with their unit: ``time_label("step time", "ms")`` is ``"step time (ms)"``.

    Every time axis is labelled through here, so each shows the unit its
    frame or simulation carries (:mod:`sappkit.layers.units`).
    """
    return f"{what} ({unit})"


def optional_number(name: str, value) -> float | None:
    """A finite number, or None when not given (a drawing's optional line or marker)."""
    return None if value is None else check_number(name, value)


def axes_list(name: str, axes, count: int) -> list[Axes]:
    """``axes`` as a list of ``count`` matplotlib Axes, or refuse naming ``name``."""
    try:
        items = list(axes)
    except TypeError:
        items = None
    if items is None or len(items) != count or not all(isinstance(ax, Axes) for ax in items):
        raise InputError(f"{name} must be {count} matplotlib Axes; got {short(axes)}")
    return items
