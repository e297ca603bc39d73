"""The recompute plots: what they draw and what they refuse."""

import numpy as np
import pytest

from sappkit.errors import InputError
from sappkit.plots.recompute import plot_before_after, plot_layer_options, plot_time_saved
from sappkit.recompute.chooser import HostLink, choose_recompute, sweep_recompute

from ..bundled import even_partition


def test_plots(llama):
    part = even_partition(llama)
    choice = choose_recompute(llama, part, memory_mb=45000, link=HostLink(50.0))
    before, after = plot_before_after(choice)
    assert before.get_title() == "configured recompute"
    assert after.get_title() == (f"chosen: {choice.time_saved:,.0f} ms saved, forward + backward summed over the "
                                 "stages (offload is not simulated)")
    simulated = choose_recompute(llama, part, memory_mb=45000)
    assert plot_before_after(simulated)[1].get_title() == f"chosen: {simulated.short_headline()}"
    assert simulated.short_headline().startswith(f"simulated step time {simulated.step_time:,.0f} ms, ")
    ax = plot_layer_options(choice)
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "offloaded"
    curve = sweep_recompute(llama, part, memory_mb=np.linspace(20000, 60000, 9))
    ax = plot_time_saved(curve, current_mb=45000)
    assert ax.get_lines()[0].get_label() == "against the baseline: configured where it fits, else the most recomputed"
    assert ax.get_ylabel() == "time saved (ms)\nfwd + bwd per micro-batch, summed over the stages"
    none = choose_recompute(llama, part, memory_mb=1000)
    assert plot_before_after(none)[1].get_title() == "lightest options (nothing fits)"


@pytest.mark.parametrize("call, message", [
    (lambda: plot_time_saved("curve"), "sweep must be a DataFrame with columns memory_mb, feasible, mode, time, "
                                       "time_saved, time_saved_vs_full, baseline; got str"),
    (lambda: plot_before_after(None), "choice must be a RecomputeChoice; got NoneType"),
    (lambda: plot_layer_options(3), "choice must be a RecomputeChoice; got int"),
])
def test_plots_refuse(call, message):
    with pytest.raises(InputError) as error:
        call()
    assert str(error.value) == message


def test_plot_time_saved_refuses_an_unknown_baseline(llama):
    curve = sweep_recompute(llama, even_partition(llama), memory_mb=[50000])
    with pytest.raises(InputError) as error:
        plot_time_saved(curve, against="none")
    assert str(error.value) == "against must be one of 'configured', 'full', 'both'; got 'none'"
