"""The alternatives scatter on the bundled DeepSeek-V3-class model: few labels, none overlapping, the points that
lower the peak on top, units on both axes."""

import numpy as np
import pytest

from sappkit import Partition, alternatives, choose_recompute, even_assignment, plot_alternatives
from sappkit.plots.alternatives import _label_order

from ..drawing import drawn_texts, overlapping


@pytest.fixture(scope="module")
def found(deepseek):
    part = Partition.from_assignment(even_assignment(deepseek, stages=16, option="full"), stages=16,
                                     micro_batches=32, kind_order=deepseek.body_kinds)
    choice = choose_recompute(deepseek, part, memory_mb=70000, modes=("off", "selective", "full"), per_layer=True)
    return alternatives(choice).frame, choice.memory_mb


def test_a_few_labels_that_matter_and_none_overlap(found):
    frame, peak = found
    ax = plot_alternatives(frame, peak_mb=peak)
    texts = drawn_texts(ax)
    assert texts[0].get_text() == "current" and 3 <= len(texts) - 1 <= 6
    assert overlapping(texts) == []
    lower = frame[frame["memory_mb"] < peak]
    named = {text.get_text() for text in texts[1:]}
    assert {f"s{row.stage} {row.kind} ({row.from_mode})" for row in lower.itertuples()} <= named
    assert "s0 dense_decoder (off)" in named  # frees the most: on the front of the trade
    assert ax.get_xlabel() == "time cost on its stage, forward + backward per micro-batch (ms)"
    assert ax.get_ylabel() == "memory freed on its stage (MB)"


def test_every_label_asked_for_where_it_fits(found):
    frame, peak = found
    texts = drawn_texts(plot_alternatives(frame, peak_mb=peak, labels=True))
    assert 7 < len(texts) - 1 < len(frame) and overlapping(texts) == []
    assert [t.get_text() for t in drawn_texts(plot_alternatives(frame, labels=0))] == ["current"]


def test_the_points_that_lower_the_peak_are_drawn_on_top_and_ringed(found):
    frame, peak = found
    ax = plot_alternatives(frame, peak_mb=peak)
    lower = frame[frame["memory_mb"] < peak]
    ringed = [c for c in ax.collections if len(c.get_edgecolors()) and tuple(c.get_edgecolors()[0]) == (1, 0, 0, 1)]
    points = np.concatenate([c.get_offsets() for c in ringed])
    np.testing.assert_allclose(sorted(map(tuple, points)), sorted(map(tuple, lower[["time_cost",
                                                                                   "memory_freed_mb"]].to_numpy())))
    plain = [c for c in ax.collections if c not in ringed]
    assert min(c.get_zorder() for c in ringed) > max(c.get_zorder() for c in plain if c.get_offsets().shape[0] > 1)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["from selective", "from off", "lowers the peak"]
    colorbar = [other for other in ax.figure.axes if other is not ax]
    assert len(colorbar) == 1 and colorbar[0].get_ylabel() == "stage"


def test_label_order_lowers_the_peak_then_the_front(found):
    frame, peak = found
    order = _label_order(frame, peak_mb=peak)
    assert sorted(order) == sorted(frame.index)
    lower = set(frame.index[frame["memory_mb"] < peak])
    assert set(order[:len(lower)]) == lower
    cost, freed = frame["time_cost"].to_numpy(), frame["memory_freed_mb"].to_numpy()
    front = [i for i in frame.index if not any((cost <= cost[i]) & (freed >= freed[i]) &
                                               ((cost < cost[i]) | (freed > freed[i])))]
    rest = [i for i in order if i not in lower]
    assert set(rest[:len(set(front) - lower)]) == set(front) - lower
