"""What one more fully recomputed layer buys: memory freed against time cost, one point per plan."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from ..columns import KIND, STAGE
from ..errors import InputError

__all__ = ["plot_alternatives"]

# The alternatives frame's columns this plot reads (sappkit.alternatives builds the frame).
_FROM_MODE = "from_mode"
_FREED = "memory_freed_mb"
_COST = "time_cost"
_NEEDED = (STAGE, KIND, _FROM_MODE, _FREED, _COST)


def plot_alternatives(frame: pd.DataFrame, *, ax=None, labels: bool = True, **scatter_kw):
    """Memory each alternative frees on its stage against the step time it costs.

    Parameters
    ----------
    frame : DataFrame
        The frame :func:`sappkit.alternatives` returns: one row per plan,
        with ``stage``, ``kind``, ``from_mode``, ``memory_freed_mb`` and
        ``time_cost``.
    ax : Axes, optional
        Where to draw; a new figure when omitted.
    labels : bool
        Label each point with its stage, kind and the mode the layer leaves.
    **scatter_kw
        Passed to ``Axes.scatter`` for the alternatives' points.

    Returns
    -------
    Axes
        The current plan sits at the origin; points up and to the left free
        more for less.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(stage=[0, 2], kind=["block", "block"], from_mode=["off", "selective"],
    ...                           memory_freed_mb=[1200.0, 400.0], time_cost=[6.0, 2.5]))
    >>> ax = plot_alternatives(frame)
    >>> [text.get_text() for text in ax.texts]
    ['current', 's0 block (off)', 's2 block (selective)']
    """
    missing = [column for column in _NEEDED if column not in frame.columns]
    if missing:
        raise InputError(f"frame is missing column(s) {', '.join(map(repr, missing))}; plot_alternatives "
                         f"draws the frame sappkit.alternatives returns ({', '.join(_NEEDED)})")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter([0.0], [0.0], marker="*", s=160, color="black", zorder=3)
    ax.annotate("current", (0.0, 0.0), xytext=(6, -12), textcoords="offset points", fontsize=8)
    if not frame.empty:
        stages = frame[STAGE].astype(int)
        scatter_kw.setdefault("c", stages)
        scatter_kw.setdefault("cmap", "viridis")
        scatter_kw.setdefault("vmin", int(stages.min()))
        scatter_kw.setdefault("vmax", max(int(stages.max()), int(stages.min()) + 1))
        points = ax.scatter(frame[_COST], frame[_FREED], zorder=2, **scatter_kw)
        ax.figure.colorbar(points, ax=ax, label="stage")
    if labels:
        for row in frame.itertuples(index=False):
            ax.annotate(f"s{getattr(row, STAGE)} {getattr(row, KIND)} ({getattr(row, _FROM_MODE)})",
                        (getattr(row, _COST), getattr(row, _FREED)), xytext=(4, 4),
                        textcoords="offset points", fontsize=7)
    ax.axhline(0.0, color="grey", linewidth=0.6)
    ax.axvline(0.0, color="grey", linewidth=0.6)
    ax.set_xlabel("time cost (added forward + backward time per micro-batch)")
    ax.set_ylabel("memory freed on its stage (MB)")
    title = "one more fully recomputed layer" if not frame.empty else "no alternative fits"
    ax.set_title(title)
    return ax
