"""Plots of a strategy search: throughput against peak memory, one marker per schedule, and the front; the
fastest strategies' predicted steps with the band of the model's error about each."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from .._check import check_int
from .._frames import check_frame
from ..pipeline.schedules import SCHEDULES
from ._axes import axes_for, optional_number

__all__ = ["plot_strategy_pareto", "plot_step_bands"]

_MARKERS = dict(zip(SCHEDULES, ("o", "s", "D", "P", "v", "^", "<", ">", "X", "h")))
_COLUMNS = ("label", "schedule", "tokens_per_s_per_device", "peak_memory_mb")
_BAND_COLUMNS = ("rank", "label", "step_ms", "step_low_ms", "step_high_ms", "within_error")


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


def plot_step_bands(frame: pd.DataFrame, *, n: int = 10, ax: Axes | None = None) -> Axes:
    """The ``n`` fastest priced strategies' predicted steps, each with the band its family's error spans.

    ``frame`` is :attr:`sappkit.StrategySearch.frame` (its rank and band columns, :mod:`sappkit.strategy.bands`).
    One row per strategy, the fastest on top, labelled with its rank (``3=`` where steps tie): a dot at the
    predicted step and a line from ``step_low_ms`` to ``step_high_ms``. The best's band is shaded; the
    strategies whose band reaches it (``within_error``: the model cannot tell them from the best) are drawn in
    colour, the others in grey. A band open above (an error of 100% or more) runs to the axes' edge.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(rank=[1.0, 2.0, 2.0, 4.0], label=["a", "b", "c", "d"],
    ...                           step_ms=[100.0, 104.0, 104.0, 130.0], step_low_ms=[95.0, 99.0, 99.0, 124.0],
    ...                           step_high_ms=[105.0, 109.0, 109.0, 137.0],
    ...                           within_error=[True, True, True, False]))
    >>> [tick.get_text() for tick in plot_step_bands(frame).get_yticklabels()]
    ['1 a', '2= b', '2= c', '4 d']
    """
    n = check_int("n", n, minimum=1)
    frame = check_frame(frame, "frame", _BAND_COLUMNS, "a strategy search's frame", gaps=_BAND_COLUMNS[2:4])
    shown = frame[np.isfinite(frame["step_ms"].to_numpy(dtype=float))].sort_values("rank", kind="stable").head(n)
    ax = axes_for(ax, (9.0, 0.35 * max(len(shown), 1) + 1.5))
    if shown.empty:
        ax.set_title("no priced strategy")
        return ax
    rows = np.arange(len(shown))
    step, low = shown["step_ms"].to_numpy(dtype=float), shown["step_low_ms"].to_numpy(dtype=float)
    high = pd.to_numeric(shown["step_high_ms"]).to_numpy(dtype=float)  # inf where the band is open above
    edge = 1.05 * max(float(np.max(step)), float(np.max(high[np.isfinite(high)], initial=0.0)))
    within = shown["within_error"].to_numpy(dtype=bool)
    ax.axvspan(low[0], min(high[0], edge), color="tab:green", alpha=0.12, label="the best's band")
    for keep, color, label in ((within, "tab:green", "within the model's error"), (~within, "0.55", "outside")):
        if keep.any():
            ax.hlines(rows[keep], low[keep], np.minimum(high[keep], edge), color=color, linewidth=2)
            ax.plot(step[keep], rows[keep], "o", color=color, label=label)
    ties = shown["rank"].duplicated(keep=False).to_numpy()
    ax.set_yticks(rows, [f"{rank:.0f}{'=' if tie else ''} {label}"
                         for rank, tie, label in zip(shown["rank"], ties, shown["label"])])
    ax.invert_yaxis()
    ax.set_xlim(right=edge)
    ax.set_xlabel("predicted step with the model's error band (ms)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)  # clear of the bars
    return ax
