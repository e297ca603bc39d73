"""Plots of the performance model: its error on published runs, and where a strategy's step goes."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from .._check import short
from .._frames import check_frame
from ..errors import InputError
from ..columns import STAGE
from ..strategy.search.explain import BUBBLE_MS, TERMS
from ._axes import axes_for, time_label

__all__ = ["plot_validation", "plot_step_breakdown", "plot_step_terms"]

#: The step's parts in the order the bars stack them (:data:`sappkit.strategy.step.STEP_COLUMNS`), with colours.
_PARTS = {"compute_ms": "tab:blue", "tp_comm_ms": "tab:orange", "cp_comm_ms": "tab:olive", "ep_comm_ms": "tab:pink",
          "pp_comm_ms": "tab:purple", "dp_comm_ms": "tab:red", "optimizer_ms": "tab:brown", "idle_ms": "lightgrey"}


def plot_validation(frame: pd.DataFrame, *, ax: Axes | None = None, targets=(0.035, 0.08)) -> Axes:
    """Each published run's error (predicted / measured - 1), with the mean and worst targets shaded.

    ``frame`` is :attr:`sappkit.strategy.validation.Validation.frame` (``run``, ``source``, ``measured``,
    ``predicted``, ``error``); a marker per run, one colour per source.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(run=["a", "b"], source=["x", "y"], measured=[1.0, 2.0],
    ...                           predicted=[1.02, 1.9], error=[0.02, -0.05]))
    >>> plot_validation(frame).get_xlabel()
    'error: predicted / measured - 1 (%)'
    """
    frame = check_frame(frame, "frame", ("run", "source", "measured", "predicted", "error"), "a validation frame",
                        numeric=("measured", "predicted", "error"), rows=True)
    ax = axes_for(ax, (9.0, 0.3 * len(frame) + 1.5))
    mean, worst = targets
    ax.axvspan(-100 * worst, 100 * worst, color="0.93", label=f"worst target ±{worst:.1%}")
    ax.axvspan(-100 * mean, 100 * mean, color="0.85", label=f"mean target ±{mean:.1%}")
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    rows = np.arange(len(frame))[::-1]
    for source, color in zip(dict.fromkeys(frame["source"]), ("tab:blue", "tab:green", "tab:orange", "tab:red")):
        chosen = (frame["source"] == source).to_numpy()
        ax.scatter(100 * frame["error"][chosen], rows[chosen], color=color, label=source, zorder=3)
    ax.set_yticks(rows, frame["run"])
    ax.set_xlabel("error: predicted / measured - 1 (%)")
    mean_error = float(frame["error"].abs().mean())
    ax.set_title(f"published runs: mean |error| {mean_error:.2%}, worst {float(frame['error'].abs().max()):.2%}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)  # clear of the data
    return ax


def plot_step_breakdown(breakdown: pd.DataFrame, *, ax: Axes | None = None) -> Axes:
    """Each stage's step as stacked bars: compute, each dimension's communication, the optimizer, the idle time.

    ``breakdown`` is :attr:`sappkit.StrategyEvaluation.breakdown` (times in ms, each row adding up to the step).

    Examples
    --------
    >>> frame = pd.DataFrame(dict(stage=[0, 1], compute_ms=[8.0, 7.0], tp_comm_ms=[1.0, 1.0], cp_comm_ms=0.0,
    ...                           ep_comm_ms=0.0, pp_comm_ms=[0.0, 0.5], dp_comm_ms=0.0, optimizer_ms=0.5,
    ...                           idle_ms=[0.5, 1.0]))
    >>> [t.get_text() for t in plot_step_breakdown(frame).get_legend().get_texts()]
    ['compute', 'tp comm', 'pp comm', 'optimizer', 'idle']
    """
    breakdown = check_frame(breakdown, "breakdown", (STAGE, *_PARTS), "a step breakdown",
                            numeric=(STAGE, *_PARTS), rows=True)
    ax = axes_for(ax, (9.0, 0.35 * len(breakdown) + 1.5))
    left = np.zeros(len(breakdown))
    stages = breakdown[STAGE].to_numpy()
    for column, color in _PARTS.items():
        values = breakdown[column].to_numpy() / 1e3
        if values.any():
            ax.barh(stages, values, left=left, color=color, label=column.removesuffix("_ms").replace("_", " "))
        left += values
    ax.invert_yaxis()
    ax.set_ylabel(STAGE)
    ax.set_xlabel(time_label("time in one step", "s"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)  # clear of the bars
    return ax


def plot_step_terms(terms: pd.DataFrame, *, ax: Axes | None = None) -> Axes:
    """A stacked bar per strategy: compute, each dimension's exposed communication, the optimizer, the bubble.

    ``terms`` has a row per term (:data:`sappkit.strategy.search.explain.TERMS`) and a column per strategy, ms:
    :attr:`Comparison.frame <sappkit.strategy.search.explain.Comparison.frame>` (its ``b_minus_a`` left out) or
    :meth:`StrategySearch.step_terms <sappkit.StrategySearch.step_terms>` of several rows side by side
    (``pd.concat({label: found.step_terms(row), ...}, axis=1)``). A term no strategy spends time on is left out
    of the legend.

    Examples
    --------
    >>> terms = pd.DataFrame({"a": [900.0, 300, 0, 0, 0, 10, 20, 1, 500], "b": [800.0, 0, 0, 0, 0, 10, 60, 1, 50]},
    ...                      index=list(TERMS))
    >>> [t.get_text() for t in plot_step_terms(terms).get_legend().get_texts()]
    ['compute', 'tp comm', 'pp comm', 'dp comm', 'optimizer', 'bubble']
    """
    if not isinstance(terms, pd.DataFrame) or list(terms.index) != list(TERMS):
        raise InputError(f"terms must be a DataFrame with a row per term, in order ({', '.join(TERMS)}); got "
                         f"{short(terms)}")
    shown = terms.drop(columns=["b_minus_a"], errors="ignore")
    if shown.empty or not np.isfinite(shown.to_numpy(dtype=float)).all():
        raise InputError(f"terms must hold a finite time per term for at least one strategy; got {short(terms)}")
    ax = axes_for(ax, (9.0, 0.5 * shown.shape[1] + 1.5))
    rows = np.arange(shown.shape[1])
    left = np.zeros(shown.shape[1])
    colors = _PARTS | {"zero_comm_ms": "tab:cyan", BUBBLE_MS: "lightgrey"}
    for term in TERMS:
        values = shown.loc[term].to_numpy(dtype=float)
        if values.any():
            ax.barh(rows, values, left=left, color=colors[term], label=term.removesuffix("_ms").replace("_", " "))
        left += values
    ax.set_yticks(rows, [str(column) for column in shown.columns])
    ax.invert_yaxis()
    ax.set_xlabel(time_label("time in one step", "ms"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)  # clear of the bars
    return ax
