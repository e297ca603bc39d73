"""The frame checks every public function shares: duplicated and MultiIndex columns, missing names (None, NaN, ''),
booleans and overflowing numbers where numbers are expected."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from sappkit import (
    InputError, LayerTable, Partition, cell_costs, even_assignment, fit_memory, plot_stage_memory, read_dryrun_csv,
    simulate,
)

from .bundled import DATA

LAYERS = pd.DataFrame([dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1, backward_time=t,
                            activation_mb=a) for o, t, a in (("none", 2, 50), ("full", 3, 5))])
OBSERVED = read_dryrun_csv(DATA / "llama2_70b_dryruns.csv")
CELLS = pd.DataFrame({"chunk": [0, 0], "stage": [0, 1], "kind": ["b", "b"], "layers": [2, 2]})
COSTS = cell_costs(LAYERS, even_assignment(LAYERS, stages=2), stages=2)


def raises_exactly(message: str):
    """Expect an InputError with exactly ``message``."""
    return pytest.raises(InputError, match=f"^{re.escape(message)}$")


def twice(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    return pd.concat([frame, frame[[column]]], axis=1)


def two_levels(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.set_axis(pd.MultiIndex.from_tuples([(c, "") for c in frame.columns]), axis=1)


CALLS = {
    "LayerTable": (LayerTable, LAYERS, "layers", "a layer table"),
    "fit_memory": (fit_memory, OBSERVED, "observations", "dry-run observations"),
    "simulate": (lambda costs: simulate(costs, micro_batches=4), COSTS, "costs", "a costs frame"),
    "Partition": (lambda cells: Partition(stages=2, micro_batches=4, cells=cells), CELLS, "cells", "a cells frame"),
    "plot_stage_memory": (plot_stage_memory, pd.DataFrame(dict(
        stage=[0, 1], param_mb=1.0, activation_mb=1.0, overhead_mb=0.0, working_mb=0.0, const_mb=0.0, memory_mb=2.0)),
        "stages", "per-stage memory"),
}


@pytest.mark.parametrize("call", CALLS)
def test_duplicated_and_multiindex_columns(call):
    function, frame, name, what = CALLS[call]
    column = frame.columns[1]
    with raises_exactly(f"{name} has column {column!r} 2 times; expected each column once"):
        function(twice(frame, column))
    with raises_exactly(f"{name} has 2 levels of column names; {what} has one level (flatten them, e.g. "
                        "frame.columns = frame.columns.get_level_values(0))"):
        function(two_levels(frame))


@pytest.mark.parametrize("missing, shown", [(None, "None"), (np.nan, "nan"), ("", "''"), ("  ", "'  '")])
def test_missing_names(missing, shown):
    with raises_exactly(f"layers row 0 column 'kind' is {shown}; expected a non-empty name"):
        LayerTable(LAYERS.assign(kind=pd.Series([missing, "b"], dtype=object)))
    with raises_exactly(f"layers row 1 column 'option' is {shown}; expected a non-empty name"):
        LayerTable(LAYERS.assign(option=pd.Series(["none", missing], dtype=object)))
    with raises_exactly(f"observations row 3 column 'run' is {shown}; expected a non-empty name"):
        fit_memory(OBSERVED.assign(run=OBSERVED["run"].astype(object).where(OBSERVED.index != 3, missing)))
    with raises_exactly(f"observations row 0 (run 'round1', stage 0) column 'kind' is {shown}; expected a non-empty "
                        "name"):
        fit_memory(OBSERVED.assign(kind=pd.Series([missing] + ["decoder"] * (len(OBSERVED) - 1), dtype=object)))
    with raises_exactly(f"cells row 1 column 'kind' is {shown}; expected a non-empty name"):
        Partition(stages=2, micro_batches=4, cells=CELLS.assign(kind=pd.Series(["b", missing], dtype=object)))


def test_booleans_are_not_numbers():
    with raises_exactly("layers row 0 (kind 'b') column 'count' is True; expected a finite number >= 0"):
        LayerTable(LAYERS.assign(count=True))
    with raises_exactly("layers row 1 (kind 'b') column 'param_mb' is False; expected a finite number >= 0"):
        LayerTable(LAYERS.assign(param_mb=pd.Series([100, False], dtype=object)))
    with raises_exactly("observations row 0 (run 'round1', stage 0) column 'memory_mb' is True; expected the "
                        "stage's peak memory, a number > 0 (MB)"):
        fit_memory(OBSERVED.assign(memory_mb=True))
    with raises_exactly("costs row 0 column 'forward_time' is True; expected a finite number >= 0"):
        simulate(COSTS.assign(forward_time=True), micro_batches=4)
    with raises_exactly("cells row 0 column 'layers' is True; expected a whole number >= 0"):
        Partition(stages=2, micro_batches=4, cells=CELLS.assign(layers=True))
    with raises_exactly("stages row 0 column 'memory_mb' is True; expected a finite number"):
        plot_stage_memory(CALLS["plot_stage_memory"][1].assign(memory_mb=True))


def test_numbers_that_would_overflow():
    with raises_exactly("layers row 0 (kind 'b') column 'count' is 1e+300; expected at most 2048 "
                        "(sappkit.limits.MAX_LAYERS)"):
        LayerTable(LAYERS.assign(count=1e300))
    with raises_exactly("layers row 0 (kind 'b') column 'count' is 1000000000000000000000000000000; expected at "
                        "most 2048 (sappkit.limits.MAX_LAYERS)"):
        LayerTable(LAYERS.assign(count=pd.Series([10**30, 10**30], dtype=object)))
    with raises_exactly("layers row 0 (kind 'b') column 'activation_mb' is 1e+300; expected at most 1073741824 "
                        "(sappkit.limits.MAX_MEMORY_MB)"):
        LayerTable(LAYERS.assign(activation_mb=1e300))
    with raises_exactly("layers row 0 (kind 'b') column 'forward_time' is 1e+308; expected at most "
                        "1000000000000000 (sappkit.limits.MAX_TIME)"):
        LayerTable(LAYERS.assign(forward_time=1e308))
    with raises_exactly("layers has 4000 body layers ('b': 2000, 'c': 2000); expected at most 2048 "
                        "(sappkit.limits.MAX_LAYERS)"):
        LayerTable(pd.concat([LAYERS.assign(count=2000), LAYERS.assign(kind="c", count=2000)]))
    with raises_exactly("observations row 0 (run 'round1', stage 0) column 'stages' is 1180591620717411303424; "
                        "expected at most 256 (sappkit.limits.MAX_STAGES)"):
        fit_memory(OBSERVED.assign(stages=pd.Series([2**70] * len(OBSERVED), dtype=object)))
    with raises_exactly("observations row 0 (run 'round1', stage 0) column 'memory_mb' is 1e+27; expected at most "
                        "1073741824 (sappkit.limits.MAX_MEMORY_MB)"):
        fit_memory(OBSERVED.assign(memory_mb=1e27))
    with raises_exactly("costs row 1 column 'stage' is 1180591620717411303424; expected at most 256 "
                        "(sappkit.limits.MAX_STAGES)"):
        simulate(COSTS.assign(stage=pd.Series([0, 2**70], dtype=object)), micro_batches=4)
    with raises_exactly("cells place 4000 body layers; expected at most 2048 (sappkit.limits.MAX_LAYERS)"):
        Partition(stages=2, micro_batches=4, cells=CELLS.assign(layers=2000))
