"""A multimodal model gets a one-mode choice, the whole model priced under each mode, stated on every submodule.

The expected numbers are SAPP's chooser's rule worked by hand: each mode's
stage peak is Σ param + Σ activation × in-flight + the working set of the
layer ending warm-up (its activation at one micro-batch, the plain layer's
under ``full``), and the choice is the fastest mode whose every stage fits.
"""

import pandas as pd
import pytest

import sappkit
from sappkit import LayerTable, Partition, choose_recompute, sweep_recompute
from sappkit.recompute.submodules import submodule_modes

MODES = ("off", "selective", "full")
OPTIONS = (("none", 40.0, 2.0), ("selective", 20.0, 2.5), ("full", 5.0, 3.0))
REFUSAL = ("the model is multimodal (modules 'vision', 'language'): per-layer budgets would be built from one "
           "module's layers, so no choice per layer is made (a one-mode choice is: pass modes)")


@pytest.fixture
def vlm():
    rows = [dict(kind=kind, role="body", count=2, param_mb=100.0, option=option, forward_time=1.0,
                 backward_time=backward, activation_mb=activation, module=module)
            for kind, module in (("vit", "vision"), ("b", "language")) for option, activation, backward in OPTIONS]
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": ["vit", "b"], "layers": 2})
    return LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=2, cells=cells)


# p = 2, m = 2: stage 0 holds 2 micro-batches in flight, stage 1 one. Two layers of 100 MB a stage.
#   off:       200 + 2 x 40 x 2 + 40 = 400 | 200 + 2 x 40 x 1 + 40 = 320
#   selective: 200 + 2 x 20 x 2 + 20 = 300 | 200 + 2 x 20 x 1 + 20 = 260
#   full:      200 + 2 x  5 x 2 + 40 = 260 | 200 + 2 x  5 x 1 + 40 = 250
@pytest.mark.parametrize("limit, mode, peaks", [(400, "off", [400, 320]), (399, "selective", [300, 260]),
                                                (300, "selective", [300, 260]), (299, "full", [260, 250])])
def test_the_fastest_mode_whose_whole_model_fits_every_stage(vlm, limit, mode, peaks):
    choice = choose_recompute(*vlm, memory_mb=limit, modes=MODES)
    assert choice.chosen and choice.mode == mode and choice.stages["memory_mb"].tolist() == peaks
    assert choice.ranges[["kind", "mode"]].values.tolist() == [["vit", mode], ["b", mode]]
    assert submodule_modes(choice)[["module", "kind", "layers", "mode"]].values.tolist() == [
        ["vision", "vit", 2, mode], ["language", "b", 2, mode]]
    assert choice.notes[-1] == (f"multimodal: every submodule runs mode {mode!r}: vision (vit x2), language (b x2); "
                                "the whole model is priced under each mode (no choice per layer: its budgets "
                                "would come from one submodule's layers)")


def test_no_mode_fits_below_the_lightest(vlm):
    choice = choose_recompute(*vlm, memory_mb=259, modes=MODES)
    assert choice.reason == ("no mode fits every stage: the lightest, 'full', needs 260.0 MB on stage 0 against a "
                             "limit of 259.0 MB")


def test_a_choice_per_layer_or_among_options_stays_refused(vlm):
    for arguments in (dict(modes=MODES, per_layer=True), dict()):
        choice = choose_recompute(*vlm, memory_mb=1000, **arguments)
        assert choice.reason == REFUSAL and choice.layer_options.empty and submodule_modes(choice).empty


def test_the_sweep_gives_the_same_modes(vlm):
    curve = sweep_recompute(*vlm, memory_mb=[400, 399, 299, 259], modes=MODES)
    assert curve["mode"].tolist() == ["off", "selective", "full", None]
    assert curve["feasible"].tolist() == [True, True, True, False]
    assert sweep_recompute(*vlm, memory_mb=[400], modes=MODES, per_layer=True)["time"].isna().all()


def test_the_bundled_vlm_gets_one_mode_on_both_submodules():
    vlm = sappkit.read_layers_json("data/vlm.json")
    cells = sappkit.even_assignment(vlm, stages=4, option="full")
    part = Partition.from_assignment(cells, stages=4, micro_batches=8, kind_order=vlm.body_kinds)
    choice = choose_recompute(vlm, part, memory_mb=60_000, modes=MODES)
    assert choice.mode == "selective" and (choice.stages["memory_mb"] <= 60_000).all()
    assert submodule_modes(choice)["module"].tolist() == ["vision", "language"]
    assert choose_recompute(vlm, part, memory_mb=200_000, modes=MODES).mode == "off"


def test_the_second_peak_charges_the_main_modules_first_layer_where_a_tower_shares_the_stage():
    # Stage 0 runs vit, vit, b; stage 1 b, b, b. The language model (the tail's module) is the main one: as its
    # first layer on stage 0 runs its backward every tower activation is still held, so that layer's working
    # set counts, 30 + 100, not the tower's first layer's 30 + 10. Stage 0 holds 2 micro-batches in flight and
    # keeps half of each layer's 2 x 30 then: 3 x 30 + 130 = 220; stage 1 holds one, keeps none of it: 130.
    rows = [dict(kind=kind, role="body", count=count, param_mb=0.0, option="none", forward_time=1.0,
                 backward_time=2.0, activation_mb=30.0, module=module, first_working_mb=first)
            for kind, module, count, first in (("vit", "vision", 2, 10.0), ("b", "language", 4, 100.0))]
    rows.append(dict(kind="out", role="tail", count=1, param_mb=0.0, option="none", forward_time=1.0,
                     backward_time=1.0, activation_mb=0.0, module="language"))
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 0, 1], "kind": ["vit", "b", "b"], "layers": [2, 1, 3]})
    table, part = LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=2, cells=cells)
    choice = choose_recompute(table, part, memory_mb=1e4, modes={"off": "none"}, fsdp_holds_grads=True)
    assert choice.pricing.body["first"].tolist() == [False, False, True, True, False, False]
    assert choice.stages["backward_mb"].tolist() == [220.0, 130.0]


def test_a_choice_per_layer_offers_exactly_the_modes_given():
    # SAPP's chooser adds off and full to any per-layer choice; sappkit offers what the caller's runtime runs.
    # One language model, the p = 2, m = 2 case above at 300 MB: among selective alone every layer is selective
    # (300 | 260); with off and full too, stage 1 has room for a layer off (200 + 40 + 20 + 20 = 280).
    rows = [dict(kind="b", role="body", count=4, param_mb=100.0, option=option, forward_time=1.0,
                 backward_time=backward, activation_mb=activation) for option, activation, backward in OPTIONS]
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    table, part = LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=2, cells=cells)
    alone = choose_recompute(table, part, memory_mb=300, modes=("selective",), per_layer=True)
    assert alone.layer_options["mode"].tolist() == ["selective"] * 4
    seeds = choose_recompute(table, part, memory_mb=300, modes=MODES, per_layer=True)
    assert seeds.layer_options["mode"].tolist() == ["selective", "selective", "off", "selective"]


def test_the_one_mode_choice_plots_before_and_after(vlm):
    import matplotlib.pyplot as plt

    choice = choose_recompute(*vlm, memory_mb=399, modes=MODES)
    before, after = sappkit.plot_before_after(choice)
    # The stacked bars reach each stage's memory: 300 and 260 MB with every layer selective.
    tops = {}
    for bar in after.patches:
        x = round(bar.get_x() + bar.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
    assert [tops[x] for x in sorted(tops)] == pytest.approx([300.0, 260.0])
    plt.close("all")
    cells = pd.DataFrame({"chunk": [0, 0, 1, 1], "stage": [0, 1, 1, 0], "kind": ["vit", "vit", "b", "b"],
                          "layers": 1})
    dual = Partition(stages=2, micro_batches=4, chunks=2, schedule="dualpipev", cells=cells)
    refused = choose_recompute(vlm[0], dual, memory_mb=399, modes=MODES)
    with pytest.raises(sappkit.InputError) as error:
        sappkit.plot_before_after(refused)
    assert str(error.value) == ("there is no stage memory to plot: schedule 'dualpipev' is not supported by the "
                                "recompute chooser: it prices the in-flight counts and end-of-warm-up working set of "
                                "1f1b and interleaved only")
