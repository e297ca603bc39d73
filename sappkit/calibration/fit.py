"""Fit a cluster's physical parameters to the user's measured runs, refusing what the runs cannot identify.

The parameters are the few the shipped presets were fitted with
(``data/calibrate.py``): the device's ``mfu``, ``matmul_half_gflop``,
``hbm_efficiency`` and ``kernel_us``, its MoE grouped-GEMM ``expert_half_tokens``
and FP8 ``fp8_mfu`` and ``fp8_matmul_half_gflop``
(:meth:`sappkit.hardware.DeviceConfig.matmul_efficiency`), the cluster's
``intra_efficiency`` and ``inter_efficiency``. An FP8 one the device leaves
unset (None: the 16-bit one's value) starts from that value. Each run's residual is ``predicted / measured - 1``
(:func:`sappkit.evaluate_strategy`'s step against the log's median step);
the fit minimises their sum of squares within each parameter's bounds
(``scipy.optimize.least_squares``, on parameters scaled to [0, 1]).

**What the runs identify.** Before fitting, the sensitivity matrix (each
run's residual's change per parameter, over its range) is taken at the base
values. A parameter no run depends on (no run crosses nodes: the inter-node
link) is *not determined* and keeps the base's value. The rest are fitted
only if the matrix's rank (its columns scaled to unit length) reaches their count; else :func:`calibrate` refuses
and says so (two runs cannot fix four parameters).

**Uncertainty.** One standard deviation from the Jacobian at the optimum:
``sqrt(diag(s² (JᵀJ)⁻¹))`` with ``s² = Σ r² / (runs - parameters)``; none
(NaN) when the runs are no more than the parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError
from ..hardware import Cluster
from ..strategy import evaluate_strategy
from .runs import Run

__all__ = ["PARAMETERS", "DEVICE_PARAMETERS", "Observed", "with_values", "value_of", "predicted_ms", "sensitivity",
           "fit_runs", "parameters_frame"]

#: Parameter -> (lower, upper) bound of the fit.
PARAMETERS = {
    "mfu": (0.05, 1.0), "matmul_half_gflop": (0.0, 100.0), "hbm_efficiency": (0.05, 1.0), "kernel_us": (0.0, 100.0),
    "expert_half_tokens": (0.0, 8192.0), "fp8_mfu": (0.05, 1.0), "fp8_matmul_half_gflop": (0.0, 200.0),
    "intra_efficiency": (0.05, 1.0), "inter_efficiency": (0.05, 1.0),
}
#: The parameters that are the device's (the rest are the cluster's).
DEVICE_PARAMETERS = ("mfu", "matmul_half_gflop", "hbm_efficiency", "kernel_us", "expert_half_tokens", "fp8_mfu",
                     "fp8_matmul_half_gflop")
#: The device parameters that may be None, and the one whose value they then take.
_DEFAULTS_TO = {"fp8_mfu": "mfu", "fp8_matmul_half_gflop": "matmul_half_gflop"}
#: A parameter whose sensitivity column is below this (change of the residuals over its whole range) is not
#: determined; a singular value below ``_RANK_TOLERANCE`` times the largest adds no rank.
_UNDETERMINED, _RANK_TOLERANCE = 1e-6, 1e-3


def with_values(base: Cluster, values: dict) -> Cluster:
    """``base`` with the parameters ``values`` (device ones on its device)."""
    device = {name: value for name, value in values.items() if name in DEVICE_PARAMETERS}
    links = {name: value for name, value in values.items() if name not in DEVICE_PARAMETERS}
    return dataclasses.replace(base, device=dataclasses.replace(base.device, **device), **links)


def value_of(base: Cluster, name: str) -> float:
    """The value of the parameter ``name`` in ``base`` (an unset FP8 one: the 16-bit one it defaults to)."""
    value = getattr(base.device if name in DEVICE_PARAMETERS else base, name)
    return value_of(base, _DEFAULTS_TO[name]) if value is None else float(value)


def predicted_ms(runs: Sequence[Run], cluster: Cluster) -> np.ndarray:
    """Each run's predicted step on ``cluster``, ms."""
    return np.array([evaluate_strategy(run.model, run.strategy, cluster=cluster, global_batch=run.global_batch,
                                       recompute=run.recompute, kernels=run.kernels).step_time for run in runs])


def _residuals(model: Observed, base: Cluster, names: Sequence[str], scaled: np.ndarray) -> np.ndarray:
    values = {name: PARAMETERS[name][0] + u * (PARAMETERS[name][1] - PARAMETERS[name][0])
              for name, u in zip(names, scaled)}
    return model.predict(with_values(base, values)) / model.measured - 1


def _scaled(base: Cluster, names: Sequence[str]) -> np.ndarray:
    return np.array([(value_of(base, name) - PARAMETERS[name][0]) / (PARAMETERS[name][1] - PARAMETERS[name][0])
                     for name in names])


@dataclass(frozen=True, eq=False)
class Observed:
    """What is fitted: ``measured`` times (ms) and ``predict(cluster)``, the same times as the model prices them."""

    measured: np.ndarray
    predict: Callable[[Cluster], np.ndarray]

    @classmethod
    def of_runs(cls, runs: Sequence[Run]) -> Observed:
        """The runs' measured steps and their predicted steps (:func:`predicted_ms`)."""
        return cls(np.array([run.step_ms for run in runs]), lambda cluster: predicted_ms(runs, cluster))


def sensitivity(runs: Observed, base: Cluster, names: Sequence[str], *, step: float = 0.05) -> np.ndarray:
    """The runs' residuals' change per parameter over its range (runs x parameters), by central differences at
    ``base`` (one-sided at a bound) of ``step`` of the range, or a tenth of the value where that is less."""
    start = np.clip(_scaled(base, names), 0, 1)
    columns = []
    for index in range(len(names)):
        up, down = start.copy(), start.copy()
        delta = min(step, max(1e-5, 0.1 * start[index]))  # a tenth of a small value: the model is not linear
        up[index], down[index] = min(1.0, start[index] + delta), max(0.0, start[index] - delta)
        change = _residuals(runs, base, names, up) - _residuals(runs, base, names, down)
        columns.append(change / (up[index] - down[index]))
    return np.column_stack(columns)


def fit_runs(runs: Observed, base: Cluster, fit: Sequence[str]) -> tuple[dict, dict, list[str]]:
    """Fit the parameters ``fit`` of ``base`` to the observed ``runs`` (or kernels): (fitted values, their
    uncertainty, the names not determined). Refuses (InputError) more parameters than the runs identify."""
    matrix = sensitivity(runs, base, fit)
    undetermined = [name for name, column in zip(fit, matrix.T) if np.abs(column).max() < _UNDETERMINED]
    names = [name for name in fit if name not in undetermined]
    if not names:
        return {}, {}, undetermined
    kept = matrix[:, [fit.index(name) for name in names]]
    # each column scaled to unit length: the rank says whether the runs tell the parameters apart, whatever
    # their ranges
    singular = np.linalg.svd(kept / np.linalg.norm(kept, axis=0), compute_uv=False)
    rank = int(np.sum(singular > _RANK_TOLERANCE * singular.max()))
    if rank < len(names):
        count = len(runs.measured)
        reason = (f"only {count} observation{'s' if count != 1 else ''}" if count < len(names) else
                  "the runs' sensitivities to them are linearly dependent (singular values "
                  + ", ".join(f"{value:.2g}" for value in singular) + ")")
        raise InputError(f"the runs identify {rank} of the {len(names)} parameters to fit ({', '.join(names)}): "
                         f"{reason}; fix some (fix=... or --fix NAME=VALUE) or add runs that differ in them")
    from scipy.optimize import least_squares

    result = least_squares(lambda u: _residuals(runs, base, names, u), np.clip(_scaled(base, names), 0, 1),
                           bounds=(0, 1), diff_step=1e-3, xtol=1e-4, ftol=1e-6)
    spans = np.array([PARAMETERS[name][1] - PARAMETERS[name][0] for name in names])
    values = {name: float(PARAMETERS[name][0] + u * span) for name, u, span in zip(names, result.x, spans)}
    dof = len(runs.measured) - len(names)
    if dof > 0:
        variance = 2 * result.cost / dof * np.linalg.pinv(result.jac.T @ result.jac)
        sigma = np.sqrt(np.clip(np.diag(variance), 0, None)) * spans
    else:
        sigma = np.full(len(names), np.nan)
    return values, dict(zip(names, sigma)), undetermined


def parameters_frame(base: Cluster, values: dict, sigma: dict, undetermined: list,
                     fixed: dict) -> pd.DataFrame:
    """One row per parameter: ``parameter``, ``base``, ``value``, ``uncertainty`` (one standard deviation),
    ``status`` (``fitted``, ``fixed``, ``not determined``)."""
    rows = []
    for name in PARAMETERS:
        status = "fitted" if name in values else "fixed" if name in fixed else \
            "not determined" if name in undetermined else "base"
        value = values.get(name, fixed.get(name, value_of(base, name)))
        rows.append({"parameter": name, "base": value_of(base, name), "value": float(value),
                     "uncertainty": float(sigma.get(name, np.nan)), "status": status})
    return pd.DataFrame(rows)
