"""plot_step_terms: a stacked bar per strategy whose length is its step, the terms it spends time on in the
legend, refusals by name."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, plot_step_terms
from sappkit.strategy.search.explain import TERMS

from ..drawing import figure_overlaps

TERMS_FRAME = pd.DataFrame({"a": [900.0, 300, 0, 0, 0, 10, 20, 1, 500], "b": [800.0, 0, 0, 0, 0, 10, 60, 1, 50]},
                           index=list(TERMS)).assign(b_minus_a=lambda f: f["b"] - f["a"])


def test_a_bar_per_strategy_as_long_as_its_step():
    _, ax = plt.subplots()
    assert plot_step_terms(TERMS_FRAME, ax=ax) is ax
    ends = {}
    for patch in ax.patches:
        y = round(patch.get_y() + patch.get_height() / 2)
        ends[y] = max(ends.get(y, 0.0), patch.get_x() + patch.get_width())
    assert ends == pytest.approx({0: TERMS_FRAME["a"].sum(), 1: TERMS_FRAME["b"].sum()})
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["compute", "tp comm", "pp comm", "dp comm",
                                                                  "optimizer", "bubble"]
    assert ax.get_xlabel() == "time in one step (ms)" and figure_overlaps(ax.figure) == []


@pytest.mark.parametrize("terms, message", [
    (TERMS_FRAME.iloc[:-1], "terms must be a DataFrame with a row per term, in order (compute_ms, tp_comm_ms"),
    (TERMS_FRAME.assign(a=np.nan), "terms must hold a finite time per term for at least one strategy"),
])
def test_bad_terms_are_refused_by_name(terms, message):
    with pytest.raises(InputError) as raised:
        plot_step_terms(terms)
    assert str(raised.value).startswith(message)
