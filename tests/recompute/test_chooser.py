"""choose_recompute and sweep_recompute: brute force, independent memory, the working-set rule, refusals."""

import math

import numpy as np
import pandas as pd
import pytest

from sappkit.errors import InputError
from sappkit.layers.table import LayerTable
from sappkit.recompute.choice import RecomputeChoice
from sappkit.recompute.chooser import HostLink, choose_recompute, sweep_recompute
from sappkit.recompute.partition import Partition
from sappkit.trainers.recompute import megatron_setting, torchtitan_setting

from .test_chooser_cases import (
    brute_force_stages, check_reported_memory, limit_between, random_partition, random_table, stage_memory,
)

MODES = ("off", "selective", "full")


def _assert_matches_brute_force(choice, expected):
    if any(math.isinf(t) for t in expected):
        assert not choice.chosen
        failed = [s for s, t in enumerate(expected) if math.isinf(t)]
        assert choice.reason.startswith(f"stage {failed[0]} cannot fit")
        return
    assert choice.chosen, choice.reason
    assert choice.stages["time"].tolist() == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("kinds", [1, 2])
def test_choice_over_fronts_equals_brute_force(rng, kinds):
    for _ in range(15):
        frame = random_table(rng, kinds=kinds, once=True, head=bool(rng.integers(2)), tail=bool(rng.integers(2)))
        table, part = random_partition(rng, frame, stages=int(rng.integers(2, 4)))
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        limit = limit_between(table, part, offered, rng)
        choice = choose_recompute(table, part, memory_mb=limit)
        _assert_matches_brute_force(choice, brute_force_stages(table, part, limit, offered))
        if choice.chosen:
            check_reported_memory(choice)


def test_mode_per_layer_equals_brute_force(rng):
    for _ in range(15):
        frame = random_table(rng, once=True)
        table, part = random_partition(rng, frame, stages=3)
        offered = {kind: ("none", "selective", "full") for kind in table.body_kinds}
        limit = limit_between(table, part, offered, rng)
        choice = choose_recompute(table, part, memory_mb=limit, modes=MODES, per_layer=True)
        _assert_matches_brute_force(choice, brute_force_stages(table, part, limit, offered))
        if choice.chosen:
            check_reported_memory(choice)
            assert set(choice.layer_options["mode"]) <= set(MODES)
            named = dict(zip(("none", "selective", "full"), MODES))
            assert all(named[o] == m for o, m in zip(choice.layer_options["option"], choice.layer_options["mode"]))


def test_one_mode_is_the_fastest_mode_that_fits(rng):
    for _ in range(15):
        frame = random_table(rng)
        table, part = random_partition(rng, frame, stages=3)
        offered = {kind: ("none", "selective", "full") for kind in table.body_kinds}
        limit = limit_between(table, part, offered, rng)
        choice = choose_recompute(table, part, memory_mb=limit, modes=MODES)
        fitting = []
        for mode, option in zip(MODES, ("none", "selective", "full")):
            peaks = stage_memory(table, part, [option] * part.layer_count)
            if all(peak[0] <= limit for peak in peaks):
                fitting.append((sum(peak[2] for peak in peaks), mode))
        if not fitting:
            assert not choice.chosen and choice.reason.startswith("no mode fits every stage: the lightest, 'full'")
            continue
        assert choice.mode == min(fitting)[1]
        assert choice.trainer_plan() == (choice.mode, {})
        check_reported_memory(choice)


def _two_layer_case(working_none, working_selective, working_full):
    """Two stages of two layers; stage 0 holds 2 micro-batches, its layer 1 ends warm-up."""
    rows = [dict(kind="b", role="body", count=4, param_mb=0, option=o, forward_time=1.0, backward_time=b,
                 activation_mb=a, working_mb=w)
            for o, a, b, w in (("none", 30, 2.0, working_none), ("selective", 20, 2.2, working_selective),
                               ("full", 2, 3.0, working_full))]
    rows.append(dict(kind="t", role="tail", count=1, param_mb=0, option="none", forward_time=1, backward_time=1,
                     activation_mb=0))
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    return LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=2, cells=cells)


def test_the_layer_that_ends_warm_up_is_charged_its_working_set():
    table, part = _two_layer_case(working_none=10, working_selective=10, working_full=10)
    # Both layers plain keep 2 * 30 each; the second also holds 30 + 10 as warm-up ends: 160 MB.
    assert choose_recompute(table, part, memory_mb=160).layer_options["option"].tolist()[:2] == ["none", "none"]
    # One MB less: without the working set they would keep 120 MB and still fit. With it one layer gives
    # way; equally fast either way, the lighter plan wins: the ending layer selective, 20 + 10 as it ends.
    choice = choose_recompute(table, part, memory_mb=159)
    assert choice.layer_options["option"].tolist()[:2] == ["none", "selective"]
    assert choice.stages.at[0, "memory_mb"] == 60 + 40 + 30 and choice.stages.at[0, "working_mb"] == 30
    check_reported_memory(choice)


def test_the_working_set_is_weighed_with_the_option_not_reserved_at_its_worst():
    # The ending layer's working set: plain 30 + 40 under none and full, 20 + 0 under selective.
    table, part = _two_layer_case(working_none=40, working_selective=0, working_full=40)
    choice = choose_recompute(table, part, memory_mb=120)
    # [none, selective]: 60 + 40 + 20 = 120. Reserving the worst working set (70) leaves 50 for 2 layers at
    # 2 micro-batches: only [full, full] or [selective, full] would fit, both slower.
    assert choice.layer_options["option"].tolist()[:2] == ["none", "selective"]
    assert choice.stages.at[0, "memory_mb"] == 120
    check_reported_memory(choice)


def test_a_full_layer_ending_warm_up_holds_the_plain_layers_activations():
    table, part = _two_layer_case(working_none=0, working_selective=0, working_full=0)
    choice = choose_recompute(table, part, memory_mb=1000, modes=("full",))
    # Each layer keeps 2 * 2; the second, fully recomputed, rebuilds one plain micro-batch: 30.
    assert choice.stages.at[0, "memory_mb"] == 4 + 4 + 30
    assert choice.stages.at[1, "memory_mb"] == 2 + 2


def test_time_saved_is_against_the_configured_options_where_they_fit():
    table, part = _two_layer_case(0, 0, 0)
    configured = Partition(stages=2, micro_batches=2, cells=part.cells, configured=["full", "selective", "none",
                                                                                   "full"])
    choice = choose_recompute(table, configured, memory_mb=1000)
    assert choice.layer_options["option"].tolist() == ["none"] * 4
    assert choice.stages["time_saved"].tolist() == pytest.approx([1.0 + 0.2, 1.0])
    # Stage times include the tail (1 + 1) on stage 1, as a balancer plan's and the simulator's do.
    assert choice.configured_stages()["time"].tolist() == pytest.approx([4.0 + 3.2, 3.0 + 4.0 + 2.0])
    assert choice.baseline_stages()["time"].tolist() == pytest.approx([4.0 + 3.2, 3.0 + 4.0 + 2.0])
    assert choice.baseline == "the configured recompute"
    default = choose_recompute(table, part, memory_mb=1000)
    assert default.time_saved == 0.0 and default.baseline == "the configured recompute, every layer none"


def test_time_saved_is_against_the_fastest_single_option_that_fits_where_the_configured_do_not():
    # Unconfigured layers run plain: stage 0 then needs 4 * 30 + 30 = 150 MB, over the 120 MB device; selective on
    # every layer fits, and is what a runtime running one option for all would run (not full, the slowest).
    table, part = _two_layer_case(0, 0, 0)
    choice = choose_recompute(table, part, memory_mb=120)
    assert choice.configured_stages()["memory_mb"].max() > 120
    assert choice.baseline == ("every layer at selective, the fastest single option that fits (the configured "
                               "recompute, every layer none, does not fit)")
    assert choice.baseline_stages()["time"].tolist() == pytest.approx([6.4, 6.4 + 2.0])  # the tail on stage 1
    # [none, selective] on stage 0 and [none, none] on stage 1 against four selective layers.
    assert choice.stages["time_saved"].tolist() == pytest.approx([6.4 - 6.2, 6.4 - 6.0])
    assert choice.baseline_step_time == pytest.approx(choose_recompute(table, part, memory_mb=1000,
                                                                       modes=("selective",)).step_time)
    modes = choose_recompute(table, part, memory_mb=120, modes=("off", "selective"), per_layer=True)
    assert modes.baseline == choice.baseline and modes.time_saved >= 0
    # Where no single option fits, every layer at its most recomputed option (here full) is the baseline.
    tight = choose_recompute(table, part, memory_mb=1, modes=("off", "full"), per_layer=True)
    assert tight.pricing.baseline.name == "most recomputed"


def test_a_faster_single_option_that_fits_beside_the_configured_is_stated_too():
    # Configured full everywhere fits 1,000 MB; so does every layer plain, which runs faster: the configured stays
    # the baseline, and the choice is stated against every layer plain as well.
    table, part = _two_layer_case(0, 0, 0)
    full = Partition(stages=2, micro_batches=2, cells=part.cells, configured="full")
    choice = choose_recompute(table, full, memory_mb=1000)
    assert choice.pricing.baseline.name == "configured" and choice.fastest_single == "none"
    plain = choose_recompute(table, part, memory_mb=1000, modes=("off",))
    assert choice.fastest_single_step_time == pytest.approx(plain.step_time)
    assert choice.fastest_single_step_time_saved == pytest.approx(0.0, abs=1e-9)
    assert choice.describe().splitlines()[1:3] == [
        "baseline: the configured recompute, every layer full",
        "against the fastest single option that fits, every layer none (22 time units): no faster"]
    # Configured plain: the configured is the fastest single option. Configured full at 120 MB, where plain does
    # not fit: selective does, and is faster. Nothing configured fits at 120 MB: the fastest single option is the
    # baseline itself.
    assert choose_recompute(table, part, memory_mb=1000).fastest_single is None
    assert choose_recompute(table, full, memory_mb=120).fastest_single == "selective"
    assert choose_recompute(table, part, memory_mb=120).fastest_single is None
    assert np.isnan(choose_recompute(table, part, memory_mb=120).fastest_single_step_time)


def test_the_fastest_single_option_equals_brute_force(rng):
    # Independently: of the options every kind offers, those whose every-layer plan fits every stage; the one
    # with the least summed stage time, named only where it beats the configured options that fit.
    named = 0
    for _ in range(16):
        table, part = random_partition(rng, random_table(rng, kinds=int(rng.integers(1, 3)), once=True),
                                       stages=int(rng.integers(2, 4)))
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        limit = limit_between(table, part, offered, rng)
        configured = Partition(stages=part.stages, micro_batches=part.micro_batches, cells=part.cells,
                               configured=[offered[kind][-1] for kind in part.body["kind"]])
        choice = choose_recompute(table, configured, memory_mb=limit)
        if not choice.chosen:
            continue
        pricing = choice.pricing
        count = len(pricing.body)
        common = set.intersection(*(set(options) for options in offered.values()))
        fits = {option: pricing.evaluate([option] * count) for option in common
                if (pricing.evaluate([option] * count)["memory_mb"] <= limit).all()}
        mine = pricing.evaluate(list(pricing.body["configured"]))
        faster = {option: frame["time"].sum() for option, frame in fits.items()
                  if frame["time"].sum() < mine["time"].sum() * (1 - 1e-12)}
        if pricing.baseline.name != "configured" or not faster:
            assert choice.fastest_single is None
            continue
        assert choice.fastest_single == min(faster, key=faster.get)
        named += 1
    assert named


@pytest.mark.parametrize("options", [dict(), dict(modes=MODES, per_layer=True)])
def test_time_saved_is_never_negative_against_a_baseline_on_offer(rng, options):
    # A choice per layer can always pick the baseline's options where they fit, so no stage loses time. (One mode
    # for every layer can be slower than a configured mix of options: that is not a choice per layer.)
    checked = 0
    for _ in range(12):
        frame = random_table(rng, kinds=int(rng.integers(1, 3)), once=True)
        table, part = random_partition(rng, frame, stages=int(rng.integers(2, 4)))
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        choice = choose_recompute(table, part, memory_mb=limit_between(table, part, offered, rng), **options)
        if not choice.chosen:
            continue
        pricing = choice.pricing
        fits = (choice.baseline_stages()["memory_mb"] <= pricing.memory_mb).all()
        assert fits or pricing.baseline.name == "most recomputed"
        if all(option in pricing.offered[kind] for kind, option in zip(pricing.body["kind"],
                                                                        pricing.baseline.options)):
            assert (choice.stages["time_saved"] >= -1e-9).all(), choice.stages["time_saved"].tolist()
            checked += 1
    assert checked


def test_the_headline_is_the_simulated_step_against_the_baseline():
    table, part = _two_layer_case(0, 0, 0)
    choice = choose_recompute(table, part, memory_mb=120)
    baseline = choose_recompute(table, part, memory_mb=1000, modes=("selective",))
    assert choice.baseline_step_time == pytest.approx(baseline.step_time)
    assert choice.step_time == pytest.approx(choice.simulate().step_time)
    assert choice.step_time_saved == pytest.approx(choice.baseline_step_time - choice.step_time)
    assert choice.step_time_saved > 0
    lines = choice.describe().splitlines()
    assert (choice.step_time, choice.baseline_step_time) == pytest.approx((22.2, 23.2))
    assert lines[:4] == [
        "simulated step time 22.2 time units: 1.00 time units (4.3%) faster than the baseline's 23.2 time units",
        f"baseline: {choice.baseline}",
        "peak 120 MB of 120 MB (stage 0; the baseline's: 100 MB on stage 0)",
        "forward + backward per micro-batch, summed over the stages: 0.60 time units saved"]
    assert choice.stages.attrs["time_unit"] == choice.time_unit == "time units"


def test_sweep_is_monotone_and_equals_choose_at_every_budget(rng):
    for _ in range(4):
        frame = random_table(rng, kinds=2, once=True)
        table, part = random_partition(rng, frame, stages=3)
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        low = limit_between(table, part, offered, rng)
        budgets = np.arange(low - 40, low + 120, 7.5)
        for options in (dict(), dict(modes=MODES), dict(modes=MODES, per_layer=True)):
            curve = sweep_recompute(table, part, memory_mb=budgets, **options)
            feasible = curve["feasible"].to_numpy()
            assert np.all(np.diff(feasible.astype(int)) >= 0)
            assert np.all(np.diff(curve["time"].to_numpy()[feasible]) <= 1e-9)
            assert np.all(np.diff(curve["time_saved_vs_full"].to_numpy()[feasible]) >= -1e-9)
            for budget, row in zip(budgets[::5], curve.iloc[::5].itertuples()):
                choice = choose_recompute(table, part, memory_mb=budget, **options)
                assert choice.chosen == row.feasible
                if choice.chosen:
                    assert row.time_saved == pytest.approx(choice.time_saved, abs=1e-9)
                    assert (row.mode, row.baseline) == (choice.mode, choice.pricing.baseline.name)


def test_sweep_time_saved_against_full_recompute():
    table, part = _two_layer_case(0, 0, 0)
    curve = sweep_recompute(table, part, memory_mb=[10, 1000])
    assert curve["feasible"].tolist() == [False, True]
    assert math.isnan(curve.at[0, "time_saved_vs_full"])
    # Every layer full takes 4.0, plain 3.0: four layers save 4.0.
    assert curve.at[1, "time_saved_vs_full"] == pytest.approx(4.0)
    assert list(curve.columns) == ["memory_mb", "feasible", "mode", "time", "time_saved", "time_saved_vs_full",
                                   "baseline"]
    assert curve.attrs["time_unit"] == "time units"


def test_no_choice_when_a_stage_cannot_fit():
    table, part = _two_layer_case(0, 0, 0)
    choice = choose_recompute(table, part, memory_mb=30)
    assert not choice.chosen and choice.ranges.empty
    assert choice.reason == ("stage 0 cannot fit: at its lightest options it needs 38.0 MB against a limit of "
                             "30.0 MB")
    assert choice.stages["memory_mb"].tolist() == [38.0, 4.0]
    assert choice.describe() == f"no choice: {choice.reason}"
    with pytest.raises(InputError) as error:
        choice.trainer_plan()
    assert str(error.value) == f"trainer_plan needs a choice, and none was made: {choice.reason}"


def test_unsupported_schedules_and_multimodal_models_come_back_with_a_reason():
    table, part = _two_layer_case(0, 0, 0)
    cells = pd.DataFrame({"chunk": [0, 0, 1, 1], "stage": [0, 1, 1, 0], "kind": "b", "layers": 1})
    v = Partition(stages=2, micro_batches=4, chunks=2, schedule="dualpipev", cells=cells)
    choice = choose_recompute(table, v, memory_mb=1000)
    assert choice.reason == ("schedule 'dualpipev' is not supported by the recompute chooser: it prices the "
                             "in-flight counts and end-of-warm-up working set of 1f1b and interleaved only")
    seq = Partition(stages=2, micro_batches=2, schedule="seqpipe", seq_split=2, cells=part.cells)
    assert choose_recompute(table, seq, memory_mb=1000).reason.startswith("schedule 'seqpipe' is not supported")
    frame = table.frame.copy()
    frame.loc[frame["kind"] == "b", "module"] = "language"
    vision = frame[frame["kind"] == "b"].assign(kind="vit", module="vision", count=2)
    frame.loc[frame["kind"] == "b", "count"] = 2
    multimodal = LayerTable(pd.concat([vision, frame]))
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 0, 1], "kind": ["vit", "b", "b"], "layers": [2, 0, 2]})
    mm = Partition(stages=2, micro_batches=2, cells=cells)
    choice = choose_recompute(multimodal, mm, memory_mb=1000, modes=MODES, per_layer=True)
    assert choice.reason == ("the model is multimodal (modules 'vision', 'language'): per-layer budgets would be "
                             "built from one module's layers, so no choice per layer is made (a one-mode choice "
                             "is: pass modes)")
    assert choice.layer_options.empty and not choice.to_records()


def test_bucket_granularity_is_conservative():
    rows = [dict(kind="b", role="body", count=2, param_mb=0, option=o, forward_time=1.0, backward_time=b,
                 activation_mb=a) for o, a, b in (("none", 10.25, 2.0), ("full", 1.0, 3.0))]
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 1})
    table, part = LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=2, cells=cells)
    # Stage 0 plain: 2 * 10.25 + 10.25 = 30.75 MB, 31 buckets of 1 MB: not within 30.9 MB...
    assert choose_recompute(table, part, memory_mb=30.9).layer_options["option"].tolist() == ["full", "none"]
    # ...but within 30.9 MB in buckets of 0.25 MB.
    fine = choose_recompute(table, part, memory_mb=30.9, bucket_mb=0.25)
    assert fine.layer_options["option"].tolist() == ["none", "none"]
    assert fine.stages.at[0, "memory_mb"] == 30.75


def test_describe_and_records():
    table, part = _two_layer_case(10, 10, 10)
    choice = choose_recompute(table, part, memory_mb=159, modes=MODES, per_layer=True)
    assert choice.to_records() == [
        {"first": 0, "count": 1, "kind": "b", "option": "none", "mode": "off"},
        {"first": 1, "count": 1, "kind": "b", "option": "selective", "mode": "selective"},
        {"first": 2, "count": 2, "kind": "b", "option": "none", "mode": "off"},
    ]
    # The configured recompute (none) does not fit at 159 MB: time saved is against every layer at selective.
    assert choice.describe().splitlines() == [
        "simulated step time 22.2 time units: 1.00 time units (4.3%) faster than the baseline's 23.2 time units",
        f"baseline: {choice.baseline}",
        "peak 130 MB of 159 MB (stage 0; the baseline's: 110 MB on stage 0)",
        "forward + backward per micro-batch, summed over the stages: 0.60 time units saved",
        "layer 0 (b): off (none)",
        "layer 1 (b): selective",  # the mode named once where the option has its name
        "layers 2-3 (b): off (none)",
        "against the baseline, 2 stages change:",
        "  stage 0: 110 MB -> 130 MB (+20 MB): layer 0 selective -> none",
        "  stage 1: 40 MB -> 60 MB (+20 MB): layers 2-3 selective -> none",
    ]
    assert choice.ranges.columns.tolist() == ["first", "count", "kind", "option", "mode", "offloaded_mb"]


def test_link_left_aside_is_noted():
    table, part = _two_layer_case(0, 0, 0)
    link = HostLink(100.0)
    one = choose_recompute(table, part, memory_mb=1000, modes=MODES, link=link)
    assert one.notes == ("a one-mode choice does not offload: the host link was left aside",)
    no_off = choose_recompute(table, part, memory_mb=1000, modes=("selective", "full"), per_layer=True, link=link)
    assert no_off.notes == ("offloading layers run mode 'off', which is not among the modes: the host link was "
                            "left aside",)
    cells = pd.DataFrame({"chunk": [0, 0, 1, 1], "stage": [0, 1, 0, 1], "kind": "b", "layers": 1})
    interleaved = Partition(stages=2, micro_batches=2, chunks=2, cells=cells)
    assert choose_recompute(table, interleaved, memory_mb=1000, link=link).notes == (
        "offload is priced at one chunk per stage: the host link was left aside for 2 chunks",)


def _bad_grads():
    table, part = _two_layer_case(0, 0, 0)
    frame = table.frame.copy()
    frame.loc[frame["option"] == "full", "grad_mb"] = 3.0
    return LayerTable(frame), part


@pytest.mark.parametrize("change, message", [
    (dict(memory_mb=0), "memory_mb must be a finite number > 0; got 0"),
    (dict(bucket_mb=-1), "bucket_mb must be a finite number > 0; got -1"),
    (dict(modes=("off", "recompute")), "modes names an unknown mode 'recompute'; the default modes are 'off', "
                                       "'selective', 'full' (pass a mapping mode -> option for others)"),
    (dict(modes="full"), "modes must be a tuple of mode names or a mapping mode -> option; got the string 'full' "
                         "(write modes=('full',))"),
    (dict(modes=()), "modes is empty; give at least one mode, e.g. modes=('off', 'selective', 'full')"),
    (dict(modes=("off", "full", "off")), "modes names 'off' twice; name each mode once"),
    (dict(modes=("off", ["full"])), "modes[1] is ['full']; expected a mode name, one of 'off', 'selective', 'full'"),
    (dict(modes=("off", None)), "modes[1] is None; expected a mode name, one of 'off', 'selective', 'full'"),
    (dict(modes=3), "modes must be a tuple of mode names or a mapping mode -> option; got 3"),
    (dict(modes=float("nan")), "modes must be a tuple of mode names or a mapping mode -> option; got nan"),
    (dict(modes={}), "modes is empty; give at least one mode, e.g. modes=('off', 'selective', 'full')"),
    (dict(modes={"": "none"}), "modes must map mode names to option names; got '': 'none'"),
    (dict(modes={None: "none"}), "modes must map mode names to option names; got None: 'none'"),
    (dict(memory_mb=True), "memory_mb must be a finite number > 0; got True"),
    (dict(memory_mb=1e27), "memory_mb must be a number <= 1073741824 (sappkit.limits.MAX_MEMORY_MB); got 1e+27"),
    (dict(modes={"off": "none", "fast": "comm"}),
     "modes maps 'fast' to option 'comm', which kind 'b' does not have (its options: 'none', 'selective', 'full')"),
    (dict(modes={"off": "none", "lazy": "none"}),
     "modes maps 'off' and 'lazy' to the same option 'none'; each mode needs its own option"),
    (dict(per_layer=True), "per_layer=True chooses a mode per layer, so it needs modes; pass e.g. "
                           "modes=('off', 'selective', 'full')"),
    (dict(per_layer="yes", modes=MODES), "per_layer must be a bool; got 'yes'"),
    (dict(link=50), "link must be a sappkit.HostLink or None; got int"),
    (dict(fsdp_holds_grads=1), "fsdp_holds_grads must be a bool; got 1"),
    (dict(partition="p"), "partition must be a sappkit.Partition; got str"),
    (dict(partition=Partition(stages=2, micro_batches=2, cells=pd.DataFrame(
        {"chunk": 0, "stage": [0, 1], "kind": "b", "layers": [2, 1]}))),
     "partition places 3 layers of kind 'b'; the layer table has count 4 (a partition places every body layer)"),
    (dict(partition=Partition(stages=2, micro_batches=2, cells=pd.DataFrame(
        {"chunk": 0, "stage": [0, 1], "kind": ["b", "x"], "layers": [4, 1]}))),
     "partition places kind 'x', which is not a body kind of the layer table (body kinds: 'b')"),
    (dict(partition=Partition(stages=2, micro_batches=2, cells=pd.DataFrame(
        {"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2}), configured="comm")),
     "partition configures body layer 0 (kind 'b') as 'comm', which is not an option of 'b' "
     "('none', 'selective', 'full')"),
])
def test_choose_refuses_bad_input(change, message):
    table, part = _two_layer_case(0, 0, 0)
    arguments = dict(layers=table, partition=part, memory_mb=100) | change
    with pytest.raises(InputError) as error:
        choose_recompute(arguments.pop("layers"), arguments.pop("partition"), **arguments)
    assert str(error.value) == message


def test_refuses_a_second_peak_with_gradients_that_depend_on_the_option():
    table, part = _bad_grads()
    with pytest.raises(InputError) as error:
        choose_recompute(table, part, memory_mb=100, fsdp_holds_grads=True)
    assert str(error.value) == ("layers kind 'b' has different grad_mb on its options ([0.0, 3.0]); the second peak "
                                "needs one gradient size per kind")


@pytest.mark.parametrize("memory_mb, message", [
    ([], "memory_mb must list at least one memory limit; got an empty sequence"),
    ([100, -5], "memory_mb[1] must be a finite number > 0; got -5"),
    (5, "memory_mb must be a sequence of memory limits in MB; got 5"),
    (None, "memory_mb must be a sequence of memory limits in MB; got None"),
    ("100", "memory_mb must be a sequence of memory limits in MB; got '100'"),
    ([True], "memory_mb[0] must be a finite number > 0; got True"),
    ([["100"]], "memory_mb[0] must be a finite number > 0; got ['100']"),
])
def test_sweep_refuses_bad_budgets(memory_mb, message):
    table, part = _two_layer_case(0, 0, 0)
    with pytest.raises(InputError) as error:
        sweep_recompute(table, part, memory_mb=memory_mb)
    assert str(error.value) == message


def test_one_mode_refusal_names_the_lightest_mode():
    table, part = _two_layer_case(0, 0, 0)
    choice = choose_recompute(table, part, memory_mb=30, modes=MODES)
    assert choice.reason == ("no mode fits every stage: the lightest, 'full', needs 38.0 MB on stage 0 against a "
                             "limit of 30.0 MB")
    assert choice.stages["memory_mb"].tolist() == [38.0, 4.0]
    for what, export in (("megatron", megatron_setting), ("torchtitan", torchtitan_setting),
                         ("recompute_lists", RecomputeChoice.recompute_lists)):
        with pytest.raises(InputError) as error:
            export(choice)
        assert str(error.value) == f"{what} needs a choice, and none was made: {choice.reason}"


@pytest.mark.parametrize("call, message", [
    (lambda: HostLink(0.0), "mb_per_time must be a finite number > 0; got 0.0"),
    (lambda: HostLink(10.0, overlap=1.5), "overlap must be a share between 0 and 1; got 1.5"),
    (lambda: HostLink(10.0, overlap=-0.1), "overlap must be a finite number >= 0; got -0.1"),
    (lambda: HostLink(10.0, time_per_mb=-1), "time_per_mb must be a finite number >= 0; got -1"),
    (lambda: HostLink.from_gbps(50, time_unit_ms=0), "time_unit_ms must be a finite number > 0; got 0"),
])
def test_host_link_refuses(call, message):
    with pytest.raises(InputError) as error:
        call()
    assert str(error.value) == message


def test_pricing_refuses_unknown_options_and_short_assignments():
    from sappkit.recompute.pricing import price

    table, part = _two_layer_case(0, 0, 0)
    pricing = price(table, part, memory_mb=100)
    with pytest.raises(InputError) as error:
        pricing.cost("b", "comm")
    assert str(error.value) == "kind 'b' has no option 'comm'; its options are 'none', 'selective', 'full'"
    with pytest.raises(InputError) as error:
        pricing.evaluate(["none"] * 3)
    assert str(error.value) == "options has 3 entries; the partition has 4 body layers"
    with pytest.raises(InputError) as error:
        price(table, part, memory_mb=100, modes={"off": 0})
    assert str(error.value) == "modes must map mode names to option names; got 'off': 0"
