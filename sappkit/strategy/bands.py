"""How sure a predicted step is: its family's validation error, the band it spans, ties and the robust choice.

Each prediction carries the mean absolute error :func:`sappkit.validate` measures on the published runs of its
family (:data:`~sappkit.strategy.validation.GROUPS`: the cluster's device, ``dense`` / ``fsdp`` (ZeRO 3) /
``moe``, the precision), read from the bundled ``model_errors.csv`` (written by ``data/make_model_errors.py``
from :meth:`sappkit.strategy.validation.Validation.by_group`). A family without a published run takes the
error over all runs, and its ``error_basis`` says so.

With error ``e`` a predicted step ``s`` may measure anywhere in ``[s / (1 + e), s / (1 - e)]`` (``e`` is the
error of the predicted throughput, ``1/s``); ``e >= 1`` leaves the band open above. Two strategies whose bands
overlap cannot be told apart by the model. Steps equal to the microsecond are ties: they share a rank.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .._files import as_path, bundled, read_csv
from .._frames import check_frame
from .validation import FAMILIES, GROUPS, family_of

__all__ = ["MODEL_ERRORS", "ERROR_COLUMNS", "BAND_COLUMNS", "model_errors", "family_error", "step_band",
           "tie_ranks", "band_columns", "robust_index"]

#: The bundled table of validation errors per family.
MODEL_ERRORS = "model_errors.csv"
#: Its columns (:meth:`~sappkit.strategy.validation.Validation.by_group`'s).
ERROR_COLUMNS = (*GROUPS, "runs", "mean_error", "worst_error")
#: The columns :func:`band_columns` adds to a search's frame.
BAND_COLUMNS = ("rank", "model_error", "error_basis", "step_low_ms", "step_high_ms", "within_error")
#: Steps equal to this many ms are ties (a microsecond).
TIE_MS = 1e-3


def model_errors(path=None) -> pd.DataFrame:
    """The validation errors per family (default the bundled ``model_errors.csv``), checked."""
    path = bundled(MODEL_ERRORS) if path is None else as_path("path", path)
    frame = read_csv(path, "model errors", "validation errors per device, family and precision")
    return check_frame(frame, "model errors", ERROR_COLUMNS, str(path), numeric=("mean_error", "worst_error"),
                       whole=("runs",), rows=True)


def family_error(errors: pd.DataFrame, device: str, family: str, precision: str) -> tuple[float, str]:
    """The mean absolute error of one family, and its basis in words (the overall error where the family has no
    published run)."""
    keys = (errors["device"] == device) & (errors["family"] == family) & (errors["precision"] == precision)
    if keys.any():
        row = errors[keys].iloc[0]
        return float(row["mean_error"]), f"{device} {family} {precision}, {int(row['runs'])} runs"
    whole = errors[errors["device"] == "all"].iloc[0]
    return float(whole["mean_error"]), f"all {int(whole['runs'])} runs (no {device} {family} {precision} run)"


def step_band(step_ms, error) -> tuple[np.ndarray, np.ndarray]:
    """``[s / (1 + e), s / (1 - e)]`` per step (module docstring), ms; ``inf`` above where ``e >= 1``."""
    step, error = np.asarray(step_ms, dtype=float), np.asarray(error, dtype=float)
    with np.errstate(divide="ignore"):
        high = np.where(error < 1, step / np.maximum(1 - error, 0), np.inf)
    return step / (1 + error), high


def tie_ranks(step_ms) -> np.ndarray:
    """The rank of each step, 1 the fastest, steps equal to the microsecond sharing the lowest of their ranks; NaN
    where the step is."""
    step = pd.Series(np.asarray(step_ms, dtype=float))
    return np.round(step / TIE_MS).rank(method="min").to_numpy()


def band_columns(frame: pd.DataFrame, *, device: str, moe: bool, precision: str,
                 errors: pd.DataFrame | None = None) -> pd.DataFrame:
    """:data:`BAND_COLUMNS` for a search's frame (``zero`` and ``step_ms`` per row), in its order: each row's
    rank, its family's error and basis, its band, and whether its band reaches the best's."""
    errors = model_errors() if errors is None else errors
    found = {family: family_error(errors, device, family, precision) for family in FAMILIES}
    families = [family_of(moe, int(zero)) for zero in frame["zero"]]
    error = np.array([found[family][0] for family in families])
    step = frame["step_ms"].to_numpy(dtype=float)
    low, high = step_band(step, error)
    priced = np.isfinite(step)
    best_high = high[priced][np.argmin(step[priced])] if priced.any() else -np.inf
    return pd.DataFrame({"rank": pd.array(tie_ranks(step), dtype="Int64"), "model_error": error,
                         "error_basis": [found[family][1] for family in families],
                         "step_low_ms": low, "step_high_ms": high,
                         "within_error": priced & (low <= best_high)}, index=frame.index)


def robust_index(frame: pd.DataFrame):
    """The index label of the priced row whose worst case (``step_high_ms``) is least, the first of equals in the
    frame's order; None when nothing is priced."""
    high = frame["step_high_ms"].to_numpy(dtype=float)
    priced = np.isfinite(frame["step_ms"].to_numpy(dtype=float))
    if not priced.any():
        return None
    return frame.index[np.flatnonzero(priced)[np.argmin(high[priced])]]
