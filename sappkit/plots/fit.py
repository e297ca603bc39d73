"""Drawings of a memory fit: the fitted parameters, observed against predicted peaks, and the residuals."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .._check import check_number
from .._frames import check_frame
from ..columns import MEMORY_MB, STAGE
from ..errors import InputError
from ..memfit.fit import LOO_RESIDUAL_MB, NAME, PREDICTED_MB, RESIDUAL_MB, STDERR_MB, VALUE_MB, MemoryFit
from ..memfit.stage_config import RUN
from ._axes import axes_for, axes_list

__all__ = ["plot_fit_params", "plot_fit_observations", "plot_fit_residuals", "plot_fit"]


def plot_fit_params(params: pd.DataFrame, *, ax=None, errors: float = 2.0):
    """Fitted parameters as horizontal bars, with ``± errors × stderr_mb`` error bars where over-determined.

    Examples
    --------
    >>> params = pd.DataFrame({"name": ["const_mb", "param_mb"], "value_mb": [3000.0, 760.0],
    ...                        "stderr_mb": [20.0, float("nan")]})
    >>> [label.get_text() for label in plot_fit_params(params).get_yticklabels()]
    ['const_mb', 'param_mb']
    """
    params = check_frame(params, "params", (NAME, VALUE_MB), "a MemoryFit.params frame",
                         numeric=(VALUE_MB,), gaps=(STDERR_MB,))
    errors = check_number("errors", errors, minimum=0)
    ax = axes_for(ax, (6, 0.35 * len(params) + 1))
    y = np.arange(len(params))
    values = params[VALUE_MB].to_numpy()
    spread = errors * params[STDERR_MB].to_numpy() if STDERR_MB in params else np.full(len(params), np.nan)
    ax.barh(y, values, color=np.where(values < 0, "tab:red", "tab:blue"), alpha=0.8)
    has = ~np.isnan(spread)
    if has.any():
        ax.errorbar(values[has], y[has], xerr=spread[has], fmt="none", ecolor="black", capsize=3,
                    label=f"± {errors:g} stderr")
        ax.legend(loc="lower right")
    for yi, value, error in zip(y, values, np.nan_to_num(spread)):
        ax.annotate(f"{value:,.1f}", (max(value, 0) + error, yi), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.set_yticks(y, params[NAME])
    ax.invert_yaxis()
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("MB")
    ax.set_title("fitted memory parameters")
    return ax


def _stages(observations: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per observed (run, stage) and its x position: runs side by side with a gap between them."""
    stages = observations.drop_duplicates([RUN, STAGE]).reset_index(drop=True)
    run_index = pd.factorize(stages[RUN])[0]
    return stages, np.arange(len(stages)) + run_index


def _label_runs(ax, stages: pd.DataFrame, x: np.ndarray) -> None:
    ax.set_xticks(x, stages[STAGE].astype(str), fontsize=7)
    ax.set_xlabel("stage (runs left to right)")
    for run, rows in stages.groupby(RUN, sort=False):
        at = x[rows.index]
        ax.annotate(str(run), ((at.min() + at.max()) / 2, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=8)


def plot_fit_observations(observations: pd.DataFrame, *, ax=None):
    """Each observed stage's peak as a bar and the fit's prediction as a marker, runs side by side.

    Examples
    --------
    >>> frame = pd.DataFrame({"run": ["a", "a", "b"], "stage": [0, 1, 0], "memory_mb": [10.0, 8.0, 9.0],
    ...                       "predicted_mb": [10.5, 7.5, 9.0]})
    >>> ax = plot_fit_observations(frame)
    >>> [float(bar.get_height()) for bar in ax.patches]
    [10.0, 8.0, 9.0]
    """
    observations = check_frame(observations, "observations", (RUN, STAGE, MEMORY_MB, PREDICTED_MB),
                               "a MemoryFit.observations frame", numeric=(MEMORY_MB, PREDICTED_MB), whole=(STAGE,))
    ax = axes_for(ax, (8, 3.5))
    stages, x = _stages(observations)
    ax.bar(x, stages[MEMORY_MB], color="tab:blue", alpha=0.6, label="observed")
    ax.plot(x, stages[PREDICTED_MB], linestyle="none", marker="_", markersize=12, markeredgewidth=2,
            color="black", label="predicted")
    _label_runs(ax, stages, x)
    ax.set_ylabel("MB")
    ax.set_title("observed and predicted peak memory", pad=14)
    # Beside the Axes: the tallest stage of a run may stand anywhere, and its bar and mark fill the corner.
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return ax


def plot_fit_residuals(observations: pd.DataFrame, *, ax=None):
    """Residuals (observed − predicted) per observed stage; leave-one-out residuals as markers where defined.

    Examples
    --------
    >>> frame = pd.DataFrame({"run": ["a", "a"], "stage": [0, 1], "residual_mb": [5.0, -5.0]})
    >>> [float(bar.get_height()) for bar in plot_fit_residuals(frame).patches]
    [5.0, -5.0]
    """
    observations = check_frame(observations, "observations", (RUN, STAGE, RESIDUAL_MB),
                               "a MemoryFit.observations frame", numeric=(RESIDUAL_MB,), gaps=(LOO_RESIDUAL_MB,),
                               whole=(STAGE,))
    ax = axes_for(ax, (8, 3))
    stages, x = _stages(observations)
    residual = stages[RESIDUAL_MB].to_numpy()
    ax.bar(x, residual, color=np.where(residual < 0, "tab:red", "tab:green"), alpha=0.7, label="residual")
    if LOO_RESIDUAL_MB in stages and stages[LOO_RESIDUAL_MB].notna().any():
        ax.plot(x, stages[LOO_RESIDUAL_MB], linestyle="none", marker="o", markersize=4, color="black",
                label="left out")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)  # clear of the bars
    ax.axhline(0, color="grey", linewidth=0.8)
    _label_runs(ax, stages, x)
    ax.set_ylabel("MB")
    ax.set_title("residuals: observed − predicted", pad=14)
    return ax


def plot_fit(fit: MemoryFit, *, axes=None):
    """The three drawings of ``fit`` in one figure; returns the three Axes.

    Examples
    --------
    >>> from sappkit import fit_memory, read_dryrun_csv
    >>> axes = plot_fit(fit_memory(read_dryrun_csv("data/llama2_70b_dryruns.csv")))
    >>> [ax.get_title() for ax in axes]
    ['fitted memory parameters', 'observed and predicted peak memory', 'residuals: observed − predicted']
    """
    if not isinstance(fit, MemoryFit):
        raise InputError(f"fit must be a MemoryFit (sappkit.fit_memory); got {type(fit).__name__}")
    if axes is None:
        figure = plt.figure(figsize=(13, 6), layout="constrained")
        grid = figure.add_gridspec(2, 2, width_ratios=(1, 1.8))
        axes = [figure.add_subplot(grid[:, 0]), figure.add_subplot(grid[0, 1]), figure.add_subplot(grid[1, 1])]
    axes = axes_list("axes", axes, 3)
    plot_fit_params(fit.params, ax=axes[0])
    plot_fit_observations(fit.observations, ax=axes[1])
    plot_fit_residuals(fit.observations, ax=axes[2])
    return list(axes)
