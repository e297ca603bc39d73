"""``sappkit.calibrate``: a cluster fitted to the user's runs, with each run's error before and after.

Examples
--------
>>> from sappkit.strategy.validation import published_runs, run_inputs
>>> row = published_runs().iloc[0]
>>> model, strategy, batch = run_inputs(row)
>>> run = Run("sc21-1.7b", model, strategy, batch, step_ms=5000.0, recompute="full")
>>> calibrate([run, run], base="dgx-a100", fit=["mfu", "kernel_us", "hbm_efficiency"])
Traceback (most recent call last):
...
sappkit.errors.InputError: the runs identify 1 of the 3 parameters to fit (mfu, kernel_us, hbm_efficiency): only 2 observations; fix some (fix=... or --fix NAME=VALUE) or add runs that differ in them
"""

from __future__ import annotations

import dataclasses
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._check import check_choice, check_number
from ..errors import InputError
from ..hardware import Cluster, write
from ..layers.units import text_table
from .fit import PARAMETERS, Observed, fit_runs, parameters_frame, with_values
from .kernels import kernels_observed, read_kernel_times
from .runs import Run, read_run

__all__ = ["Calibration", "calibrate"]


@dataclass(frozen=True, eq=False)
class Calibration:
    """A fitted cluster (:func:`calibrate`).

    ``cluster``: the base with the fitted values. ``parameters``: ``parameter``, ``base``, ``value``,
    ``uncertainty`` (one standard deviation; NaN where not fitted or the runs leave no degree of freedom),
    ``status`` (``fitted``, ``fixed``, ``not determined``, ``base``). ``runs``: ``run``, ``measured_ms``,
    ``before_ms``, ``after_ms``, ``error_before``, ``error_after`` (``predicted / measured - 1``).
    """

    cluster: Cluster
    parameters: pd.DataFrame = field(repr=False)
    runs: pd.DataFrame = field(repr=False)

    def describe(self) -> str:
        """Each run's error before and after, the fitted values with their uncertainty, what was not determined."""
        runs = self.runs.assign(error_before=[f"{e:+.1%}" for e in self.runs["error_before"]],
                                error_after=[f"{e:+.1%}" for e in self.runs["error_after"]]).round(1)
        shown = self.parameters.assign(  # each row its own digits: one column holds 0.6 and 768
            base=[f"{v:.4g}" for v in self.parameters["base"]], value=[f"{v:.4g}" for v in self.parameters["value"]],
            uncertainty=["" if np.isnan(u) else f"± {u:.2g}" for u in self.parameters["uncertainty"]])
        lines = [f"calibrated {self.cluster.name} on {len(self.runs)} runs "
                 f"(mean |error| {self.runs['error_before'].abs().mean():.1%} before, "
                 f"{self.runs['error_after'].abs().mean():.1%} after)", text_table(runs), "", text_table(shown)]
        missing = self.parameters.loc[self.parameters["status"] == "not determined", "parameter"].tolist()
        if missing:
            lines.append(f"not determined by these runs (no run's step depends on them; kept at the base's "
                         f"value): {', '.join(missing)}")
        return "\n".join(lines)

    def write(self, path) -> os.PathLike:
        """Write the fitted cluster as a hardware file (:func:`sappkit.hardware.write`), each fitted value's
        uncertainty and runs beside it."""
        notes = {}
        for row in self.parameters.itertuples():
            if row.status == "fitted":
                spread = "" if np.isnan(row.uncertainty) else f" +- {row.uncertainty:.2g}"
                notes[row.parameter] = f"fitted on {len(self.runs)} runs by sappkit calibrate{spread}"
        device = {name: text for name, text in notes.items() if hasattr(self.cluster.device, name)}
        links = {name: text for name, text in notes.items() if name not in device}
        return write(self.cluster, path, notes={**links, "device": device},
                     source=f"sappkit calibrate on runs {', '.join(self.runs['run'])}")

    def __repr__(self) -> str:
        fitted = self.parameters[self.parameters["status"] == "fitted"]
        values = ", ".join(f"{row.parameter}={row.value:.4g}" for row in fitted.itertuples())
        return (f"Calibration({self.cluster.name}: {values}; mean |error| {self.runs['error_after'].abs().mean():.1%} over {len(self.runs)} runs)")

    def _repr_html_(self) -> str:
        return (f"<div><b>{html.escape(repr(self))}</b>{self.runs.round(3).to_html(index=False)}"
                f"{self.parameters.to_html(index=False)}</div>")


def calibrate(runs=None, base="dgx-h100", *, kernels=None, fit: Sequence[str] | None = None,
              fix: dict | None = None, name: str | None = None) -> Calibration:
    """Fit ``base``'s physical parameters to the user's measured runs and/or kernels.

    Parameters
    ----------
    runs : sequence of Run or of (config, model, log), optional
        Measured runs (:func:`~sappkit.calibration.runs.read_run` reads a triple).
    base : str, path or Cluster
        The cluster to start from and keep everything else of (a preset name or a hardware file).
    kernels : DataFrame or path, optional
        Kernel times (:func:`~sappkit.calibration.kernels.read_kernel_times`, or the trace): the GEMMs fit the
        matmul curve, the collectives the links.
    fit : sequence of str, optional
        The parameters to fit (default every one of :data:`~sappkit.calibration.fit.PARAMETERS` not in ``fix``).
    fix : dict, optional
        Parameters held at a value.
    name : str, optional
        The fitted cluster's (and device's) name; default ``"<base>-calibrated"``.
    """
    observed, labels = _observed(runs, kernels)
    base = Cluster.preset(base) if isinstance(base, str | os.PathLike) else base
    if not isinstance(base, Cluster):
        raise InputError(f"base must be a Cluster, a preset name or a hardware file (.toml); got {base!r}")
    fix = {key: check_number(f"fix[{key!r}]", value) for key, value in (fix or {}).items()}
    for key in (*fix, *(fit or ())):
        check_choice("parameter", key, PARAMETERS)
    fit = [key for key in (fit or PARAMETERS) if key not in fix]
    start = with_values(base, fix)
    values, sigma, undetermined = fit_runs(observed, start, fit)
    fitted = with_values(start, values)
    fitted = dataclasses.replace(fitted, name=name or f"{base.name}-calibrated", device=dataclasses.replace(
        fitted.device, name=name or f"{base.device.name}-calibrated"))
    measured = observed.measured
    before, after = observed.predict(base), observed.predict(fitted)
    frame = pd.DataFrame({"run": labels, "measured_ms": measured, "before_ms": before, "after_ms": after,
                          "error_before": before / measured - 1, "error_after": after / measured - 1})
    return Calibration(fitted, parameters_frame(base, values, sigma, undetermined, fix), frame)


def _observed(runs, kernels) -> tuple[Observed, list[str]]:
    """The runs' and the kernels' measured and predicted times, one observation each, and their labels."""
    if runs is None and kernels is None:
        raise InputError("calibrate needs runs, kernels or both; got neither")
    parts, labels = [], []
    if runs is not None:
        runs = [run if isinstance(run, Run) else read_run(*run) for run in _sequence(runs)]
        parts.append(Observed.of_runs(runs))
        labels += [run.name for run in runs]
    if kernels is not None:
        frame = kernels if isinstance(kernels, pd.DataFrame) else read_kernel_times(kernels)
        parts.append(kernels_observed(frame))
        fitted = frame[(frame["kind"] == "gemm") | ((frame["kind"] == "collective") & (frame["ranks"] > 1))]
        fitted = fitted[fitted["duration_ms"] > 0]
        labels += [f"{row.kind} {_shape(row)}" for row in fitted.itertuples()]
    return Observed(np.concatenate([part.measured for part in parts]),
                    lambda cluster: np.concatenate([part.predict(cluster) for part in parts])), labels


def _shape(row) -> str:
    if row.kind == "gemm":
        shape = f"{int(row.m)}x{int(row.n)}x{int(row.k)}"
        return f"{int(row.batch)}x{shape}" if row.batch > 1 else shape
    return f"{row.collective} {row.nbytes / 2**20:.1f} MiB x{int(row.ranks)}"


def _sequence(runs) -> list:
    if isinstance(runs, Run | str) or not isinstance(runs, Sequence) or not runs:
        raise InputError(f"runs must be a non-empty sequence of Run or of (config, model, log); got {runs!r}")
    return list(runs)
