"""What one more fully recomputed layer buys: memory freed against time cost, one point per plan."""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from .._check import check_int
from .._frames import check_frame
from ..columns import KIND, MEMORY_MB, STAGE
from ..layers.units import time_unit_of
from ._axes import axes_for, optional_number, time_label

__all__ = ["plot_alternatives"]

# The alternatives frame's columns this plot reads (sappkit.alternatives builds the frame).
_FROM_MODE = "from_mode"
_FREED = "memory_freed_mb"
_COST = "time_cost"
_NEEDED = (STAGE, KIND, _FROM_MODE, _FREED, _COST)
_MARKERS = ("o", "^", "s", "D", "v", "P")


def plot_alternatives(frame: pd.DataFrame, *, ax=None, peak_mb: float | None = None, labels: int | bool = 12):
    """Memory each alternative frees on its stage against the time it costs, the current plan at the origin.

    Parameters
    ----------
    frame : DataFrame
        The frame :func:`sappkit.alternatives` returns: one row per plan,
        with ``stage``, ``kind``, ``from_mode``, ``memory_freed_mb`` and
        ``time_cost`` (and ``memory_mb`` when ``peak_mb`` is given); the
        time axis shows the frame's ``attrs["time_unit"]``.
    ax : Axes, optional
        Where to draw; a new figure when omitted.
    peak_mb : float, optional
        The current plan's peak: alternatives whose peak (``memory_mb``) is
        lower are ringed, as they relieve the stage that binds.
    labels : int or bool
        Label points with their stage, kind and the mode the layer leaves:
        the ``labels`` that free the most memory (True: every point).

    Returns
    -------
    Axes
        Colour is the stage, the marker the mode the layer leaves; points
        up and to the left free more for less.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(stage=[0, 2], kind=["block", "block"], from_mode=["off", "selective"],
    ...                           memory_freed_mb=[1200.0, 400.0], time_cost=[6.0, 2.5],
    ...                           memory_mb=[5000.0, 5400.0]))
    >>> ax = plot_alternatives(frame, peak_mb=5400.0)
    >>> [text.get_text() for text in ax.texts]
    ['current', 's0 block (off)', 's2 block (selective)']
    >>> [text.get_text() for text in ax.get_legend().get_texts()]
    ['from off', 'from selective', 'lowers the peak']
    """
    unit = time_unit_of(frame)
    needed = _NEEDED + ((MEMORY_MB,) if peak_mb is not None else ())
    frame = check_frame(frame, "frame", needed, "a sappkit.alternatives frame", numeric=(_FREED, _COST, MEMORY_MB),
                        whole=(STAGE,))
    peak_mb = optional_number("peak_mb", peak_mb)
    if not isinstance(labels, bool):
        labels = check_int("labels", labels, minimum=0)
    ax = axes_for(ax, (8, 5))
    ax.scatter([0.0], [0.0], marker="*", s=160, color="black", zorder=3)
    ax.annotate("current", (0.0, 0.0), xytext=(6, -12), textcoords="offset points", fontsize=8)
    handles = []
    if not frame.empty:
        stages = frame[STAGE].astype(int)
        scale = dict(cmap="viridis", vmin=int(stages.min()), vmax=max(int(stages.max()), int(stages.min()) + 1))
        points = None
        for (mode, rows), marker in zip(frame.groupby(_FROM_MODE, sort=False), _MARKERS * len(frame)):
            points = ax.scatter(rows[_COST], rows[_FREED], c=rows[STAGE].astype(int), marker=marker, zorder=2,
                                **scale)
            handles.append(Line2D([], [], marker=marker, linestyle="", color="grey", label=f"from {mode}"))
        ax.figure.colorbar(points, ax=ax, label="stage")
        if peak_mb is not None:
            lower = frame[frame[MEMORY_MB] < peak_mb]
            ax.scatter(lower[_COST], lower[_FREED], s=150, facecolors="none", edgecolors="red", zorder=1)
            handles.append(Line2D([], [], marker="o", markersize=11, linestyle="", markerfacecolor="none",
                                  markeredgecolor="red", label="lowers the peak"))
        ax.legend(handles=handles, loc="upper left", fontsize=8)
    shown = frame if labels is True else frame.nlargest(0 if labels is False else int(labels), _FREED)
    for row in shown.sort_index().itertuples(index=False):
        ax.annotate(f"s{getattr(row, STAGE)} {getattr(row, KIND)} ({getattr(row, _FROM_MODE)})",
                    (getattr(row, _COST), getattr(row, _FREED)), xytext=(5, 3), textcoords="offset points",
                    fontsize=7)
    ax.axhline(0.0, color="grey", linewidth=0.6)
    ax.axvline(0.0, color="grey", linewidth=0.6)
    ax.margins(x=0.25, y=0.08)
    if not frame.empty:
        low = min(0.0, float(frame[_COST].min()))
        ax.set_xlim(left=low - 0.05 * max(float(frame[_COST].max()) - low, 1e-9))
    ax.set_xlabel(time_label("time cost on its stage: added forward + backward per micro-batch", unit))
    ax.set_ylabel("memory freed on its stage (MB)")
    ax.set_title("one more fully recomputed layer" if not frame.empty else "no alternative fits")
    return ax
