"""The recompute plots: what they draw and what they refuse."""

import numpy as np
import pandas as pd
import pytest

from sappkit import alternatives
from sappkit.errors import InputError
from sappkit.plots.recompute import plot_before_after, plot_layer_options, plot_time_saved
from sappkit.recompute.chooser import HostLink, choose_recompute, sweep_recompute

from ..bundled import MODES, even_partition
from ..drawing import drawn_texts, overlapping


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
    assert ax.get_lines()[0].get_label() == BASELINE
    assert ax.get_ylabel() == "time saved (ms)"
    assert ax.get_title() == "forward + backward per micro-batch, summed over the stages"
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


def bar_alphas(ax) -> dict[int, set]:
    """The alpha of each stage's bars (the stacked parts), by stage."""
    alphas = {}
    for bars in ax.containers:
        for bar in bars:
            alphas.setdefault(round(bar.get_x() + bar.get_width() / 2), set()).add(bar.get_alpha())
    return alphas


def test_before_after_writes_every_change_on_its_stage(llama):
    choice = choose_recompute(llama, even_partition(llama), memory_mb=45000, modes=MODES, per_layer=True)
    before, after = plot_before_after(choice)
    change = (choice.stages.memory_mb - choice.configured_stages().memory_mb).to_numpy()
    texts = drawn_texts(after)
    assert [t.get_text() for t in texts] == [f"{d:+,.0f} MB".replace("-", "\u2212") for d in change
                                             if abs(d) >= 0.5]
    assert overlapping(texts) == [] and all(t.get_window_extent().y1 <= after.get_window_extent().y1 for t in texts)
    assert before.get_ylim() == after.get_ylim()


def test_before_after_against_a_baseline_highlights_the_stage_that_changed(deepseek):
    part = even_partition(deepseek, stages=16, micro_batches=32)
    choice = choose_recompute(deepseek, part, memory_mb=70000, modes=MODES, per_layer=True)
    found = alternatives(choice)
    row = found.frame.loc[found.frame["memory_mb"].idxmin()]
    plan = found.plans[int(row["alternative"])]
    before, after = plot_before_after(plan, baseline=choice)
    assert before.get_title() == "before"
    (text,) = drawn_texts(after)
    freed = choice.stages.memory_mb[row.stage] - plan.stages.memory_mb[row.stage]
    assert text.get_text() == f"\u2212{freed:,.0f} MB" and text.xy[0] == row.stage and text.get_rotation() == 0
    for ax in (before, after):
        alphas = bar_alphas(ax)
        assert alphas.pop(row.stage) == {None} and all(value == {0.3} for value in alphas.values())


def test_before_after_of_one_plan_marks_nothing(llama):
    choice = choose_recompute(llama, even_partition(llama), memory_mb=45000, modes=MODES, per_layer=True)
    before, after = plot_before_after(choice, baseline=choice)
    assert drawn_texts(after) == [] and set().union(*bar_alphas(after).values()) == {0.3}
    with pytest.raises(InputError) as error:
        plot_before_after(choice, baseline="plan")
    assert str(error.value) == "baseline must be a RecomputeChoice; got str"


BASELINE = "against the baseline (configured where it fits, else the most recomputed)"
SAVED = pd.DataFrame(dict(memory_mb=[100, 200, 300, 400], feasible=[False, True, True, True], mode=None,
                          time=[np.nan, 5.0, 4.0, 3.0], time_saved=[np.nan, -1.0, 0.0, 1.0],
                          time_saved_vs_full=[np.nan, 2.0, 3.0, 4.0], baseline=[None, *["configured"] * 3]))
SAVED.attrs["time_unit"] = "ms"


def test_time_saved_lines_neither_hides_the_other():
    apart = plot_time_saved(SAVED, against="both").get_lines()[:2]
    assert [line.get_label() for line in apart] == [BASELINE, "against full recompute everywhere"]
    assert apart[0].get_linestyle() != apart[1].get_linestyle() and apart[0].get_marker() != apart[1].get_marker()
    assert apart[1].get_zorder() > apart[0].get_zorder()
    same = plot_time_saved(SAVED.assign(time_saved=SAVED.time_saved_vs_full), against="both")
    curves = [line for line in same.get_lines() if len(line.get_xdata()) == len(SAVED)]
    assert [line.get_label() for line in curves] == [f"{BASELINE} = full recompute everywhere"]
    assert same.get_ylabel() == "time saved (ms)"


def test_time_saved_shades_a_single_capacity_where_nothing_fits():
    ax = plot_time_saved(SAVED.iloc[:3])
    (span,) = ax.patches
    assert span.get_x() == ax.get_xlim()[0] < 100 == span.get_x() + span.get_width()


def test_layer_options_name_the_runtimes_modes_as_trainer_plans_do(llama):
    part = even_partition(llama)
    choice = choose_recompute(llama, part, memory_mb=45000, modes=MODES, per_layer=True)
    legend = [t.get_text() for t in plot_layer_options(choice).get_legend().get_texts()]
    assert legend == ["off (none)", "selective"] and "off" in choice.trainer_plan()[1].values()
    options = choose_recompute(llama, part, memory_mb=45000)
    assert [t.get_text() for t in plot_layer_options(options).get_legend().get_texts()] == ["none", "selective"]


def test_the_report_figures_of_deepseek_read_without_overlaps(deepseek):
    """Notebook 03's figures: the time-saved curve's legend and label clear of the data, and no change written
    on a stage crossed by the limit line."""
    from sappkit import Partition, even_assignment

    from ..drawing import figure_overlaps

    part = Partition.from_assignment(even_assignment(deepseek, stages=16, option="full"), stages=16,
                                     micro_batches=32, kind_order=deepseek.body_kinds)
    choice = choose_recompute(deepseek, part, memory_mb=60000, modes=MODES, per_layer=True)
    before, after = plot_before_after(choice)
    assert len(drawn_texts(after)) == 16 and figure_overlaps(after.figure) == []
    curve = sweep_recompute(deepseek, part, memory_mb=np.arange(20_000, 80_001, 2_000), modes=MODES, per_layer=True)
    assert figure_overlaps(plot_time_saved(curve, current_mb=60000, against="both").figure) == []
