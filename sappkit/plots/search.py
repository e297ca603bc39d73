"""Plots of a strategy search: throughput against peak memory, one marker per schedule, and the front."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from .._frames import check_frame
from ..pipeline.schedules import SCHEDULES
from ._axes import axes_for, optional_number

__all__ = ["plot_strategy_pareto"]

_MARKERS = dict(zip(SCHEDULES, ("o", "s", "D", "P", "v", "^", "<", ">", "X")))
_COLUMNS = ("label", "schedule", "tokens_per_s_per_device", "peak_memory_mb")


def plot_strategy_pareto(frame: pd.DataFrame, *, memory_mb: float | None = None, highlight=None,
                         ax: Axes | None = None) -> Axes:
    """Tokens/s per device against peak memory for every priced strategy, one marker per schedule.

    ``frame`` is :attr:`sappkit.StrategySearch.frame` (rows without a step are left out). The strategies no
    other beats on both throughput and memory headroom (:meth:`sappkit.StrategySearch.pareto`) are joined by a
    line; ``memory_mb`` draws the device's memory, ``highlight`` (a row's index label) rings one strategy.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(label=["a", "b", "c"], schedule=["1f1b", "zbv", "zbv"],
    ...                           tokens_per_s_per_device=[900.0, 1000.0, 950.0],
    ...                           peak_memory_mb=[40000.0, 70000.0, 75000.0]))
    >>> ax = plot_strategy_pareto(frame, memory_mb=80000, highlight=1)
    >>> [text.get_text() for text in ax.get_legend().get_texts()]
    ['1f1b', 'zbv', 'Pareto front', 'device memory', 'chosen']
    """
    frame = check_frame(frame, "frame", _COLUMNS, "a strategy search's frame", gaps=_COLUMNS[2:])
    limit = optional_number("memory_mb", memory_mb)
    priced = frame[np.isfinite(frame["tokens_per_s_per_device"].to_numpy(dtype=float))]
    ax = axes_for(ax, (9.0, 5.0))
    for schedule, rows in priced.groupby("schedule", sort=False):
        ax.scatter(rows["peak_memory_mb"] / 1e3, rows["tokens_per_s_per_device"], marker=_MARKERS.get(schedule, "o"),
                   alpha=0.7, label=schedule)
    front = _front(priced)
    ax.plot(front["peak_memory_mb"] / 1e3, front["tokens_per_s_per_device"], color="0.3", linewidth=1,
            drawstyle="steps-post", label="Pareto front")
    if limit is not None:
        ax.axvline(limit / 1e3, color="tab:red", linestyle="--", label="device memory")
    if highlight is not None and highlight in priced.index:
        chosen = priced.loc[highlight]
        ax.scatter([chosen["peak_memory_mb"] / 1e3], [chosen["tokens_per_s_per_device"]], s=220, facecolors="none",
                   edgecolors="black", linewidths=1.5, label="chosen")
    ax.set_xlabel("peak memory of the busiest stage (GB, 1e3 MB)")
    ax.set_ylabel("tokens/s per device")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)  # clear of the points
    return ax


def _front(priced: pd.DataFrame) -> pd.DataFrame:
    """The priced rows no other has both more throughput and less memory, by memory."""
    ranked = priced.sort_values(["peak_memory_mb", "tokens_per_s_per_device"], ascending=[True, False])
    throughput = ranked["tokens_per_s_per_device"].to_numpy()
    best_so_far = np.r_[-np.inf, np.maximum.accumulate(throughput)[:-1]]
    return ranked[throughput > best_so_far]
