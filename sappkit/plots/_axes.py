"""The Axes a drawing goes on (the caller's, checked, or a new figure's), and how a time axis is labelled."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.ticker import MaxNLocator

from .._check import check_number, short
from ..errors import InputError

__all__ = ["axes_for", "axes_list", "optional_number", "stage_colorbar", "stage_scale", "stage_ticks",
           "time_label"]


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


def stage_scale(first: int, last: int) -> dict:
    """``cmap`` and ``norm`` giving stages ``first..last`` one colour each (viridis short of its palest yellow)."""
    count = last - first + 1
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, count))
    return dict(cmap=ListedColormap(colors), norm=BoundaryNorm(np.arange(first, last + 2) - 0.5, count))


def stage_colorbar(ax: Axes, mappable) -> None:
    """A colour bar labelled ``stage`` beside ``ax``, ticks on whole stages."""
    bar = ax.figure.colorbar(mappable, ax=ax, label="stage", pad=0.02)
    bar.locator = MaxNLocator(nbins=9, integer=True)
    bar.update_ticks()


def stage_ticks(axis) -> None:
    """Whole-stage ticks on ``axis`` (``ax.xaxis`` or ``ax.yaxis``), as many as its length fits when drawn:
    every stage where there is room, every 2nd, 4th or 5th… where a tick per stage would overlap."""
    axis.set_major_locator(MaxNLocator(nbins="auto", integer=True, steps=[1, 2, 4, 5, 10]))
