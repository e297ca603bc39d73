"""The error band: the bundled per-family validation errors equal what the model gives today, a family without
runs falls back to the overall error and says so, bands and ties as the formulas state."""

import importlib.util

import numpy as np
import pandas as pd
import pytest

from sappkit.strategy.bands import band_columns, family_error, model_errors, robust_index, step_band, tie_ranks

from ..bundled import DATA


def test_the_bundled_errors_are_what_validate_gives_now():
    spec = importlib.util.spec_from_file_location("make_model_errors", DATA / "make_model_errors.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    now, bundled = script.model_errors_now(), model_errors()
    pd.testing.assert_frame_equal(bundled[["device", "family", "precision", "runs"]],
                                  now[["device", "family", "precision", "runs"]], check_dtype=False)
    assert np.allclose(bundled[["mean_error", "worst_error"]], now[["mean_error", "worst_error"]], atol=1e-6)


def test_a_family_takes_its_own_error_else_the_overall_one():
    errors = model_errors()
    own = errors[(errors["device"] == "h100-sxm") & (errors["family"] == "dense") & (errors["precision"] == "bf16")]
    error, basis = family_error(errors, "h100-sxm", "dense", "bf16")
    assert error == own["mean_error"].iloc[0] and basis == f"h100-sxm dense bf16, {own['runs'].iloc[0]} runs"
    whole = errors[errors["device"] == "all"].iloc[0]
    error, basis = family_error(errors, "h200", "moe", "fp8")
    assert error == whole["mean_error"] and basis == f"all {whole['runs']} runs (no h200 moe fp8 run)"


def test_the_band_and_the_ranks():
    low, high = step_band([100.0, 100.0], [0.25, 1.0])
    assert np.allclose(low, [80.0, 50.0]) and high[0] == pytest.approx(100 / 0.75) and high[1] == np.inf
    ranks = tie_ranks([1.0, 1.0004, 1.002, np.nan, 0.5])
    assert np.array_equal(ranks[[0, 1, 2, 4]], [2, 2, 4, 1]) and np.isnan(ranks[3])


def test_the_robust_choice_is_the_best_worst_case_not_the_fastest():
    errors = model_errors()
    frame = pd.DataFrame({"zero": [3, 1, 1, 1], "step_ms": [100.0, 101.0, 101.0004, np.nan]}, index=[7, 3, 5, 2])
    bands = band_columns(frame, device="h100-sxm", moe=False, precision="bf16", errors=errors)
    dense = family_error(errors, "h100-sxm", "dense", "bf16")
    fsdp = family_error(errors, "h100-sxm", "fsdp", "bf16")  # no such run: the overall error, larger
    assert fsdp[0] > 2 * dense[0] and bands["error_basis"].tolist() == [fsdp[1], dense[1], dense[1], dense[1]]
    assert bands["rank"].tolist()[:3] == [1, 2, 2] and pd.isna(bands["rank"].iloc[3])
    assert np.allclose(bands["step_high_ms"].iloc[:3], frame["step_ms"].iloc[:3] / (1 - bands["model_error"][:3]))
    assert bands["within_error"].tolist() == [True, True, True, False]
    assert robust_index(frame.assign(**bands)) == 3  # the first of the two dense rows, not the faster fsdp one
