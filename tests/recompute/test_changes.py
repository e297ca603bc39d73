"""What a choice changes against its baseline: per stage the memory under each, and the layers moved or changed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sappkit import HostLink, Partition, choose_recompute, read_layers_json
from sappkit.layers.units import layer_ranges
from sappkit.recompute.changes import CHANGE_COLUMNS
from sappkit.recompute.choice import build_choice
from sappkit.recompute.pricing import price

from ..bundled import DATA
from .test_chooser import _two_layer_case
from .test_chooser_cases import limit_between, random_partition, random_table
from .test_chooser_peaks import _offload_case


def _changes(configured, options, memory_mb=1000):
    """The changes of ``options`` against ``configured`` on the two-stage, two-layer case (no working sets)."""
    table, part = _two_layer_case(0, 0, 0)
    pricing = price(table, Partition(stages=2, micro_batches=2, cells=part.cells, configured=configured),
                    memory_mb=memory_mb)
    assert pricing.baseline.name == "configured"
    return build_choice(pricing, options).layout_changes()


def test_a_selective_layer_moved_to_the_end_of_warm_up_holds_less():
    # Configured as MindFormers runs it (the stage's first layer recomputed): 2 x 20 + 2 x 30 + the plain layer
    # ending warm-up, 30, is 130 MB. Selective on the layer ending warm-up instead: 2 x 30 + 2 x 20 + 20 = 120 MB.
    changes = _changes(["selective", "none", "none", "none"], ["none", "selective", "none", "none"])
    assert list(changes.columns) == list(CHANGE_COLUMNS)
    assert changes.to_dict("records") == [dict(stage=0, baseline_memory_mb=130.0, memory_mb=120.0,
                                               memory_change_mb=-10.0, time_saved=0.0, layers_changed="0-1",
                                               change="selective moved from layer 0 to layer 1")]


def test_options_that_change_are_named_from_and_to_per_stage():
    changes = _changes(["full", "none", "none", "full"], ["selective", "selective", "none", "none"])
    assert changes["stage"].tolist() == [0, 1]
    assert changes["change"].tolist() == ["layer 0 full -> selective; layer 1 none -> selective",
                                          "layer 3 full -> none"]
    assert changes["layers_changed"].tolist() == ["0-1", "3"]
    assert changes["time_saved"].tolist() == pytest.approx([0.8 - 0.2, 1.0])


def test_a_choice_that_keeps_the_baseline_changes_nothing():
    assert _changes("none", ["none"] * 4).empty
    table, part = _two_layer_case(0, 0, 0)
    refused = choose_recompute(table, part, memory_mb=1)
    assert not refused.chosen and list(refused.layout_changes().columns) == list(CHANGE_COLUMNS)
    assert refused.layout_changes().empty


def test_layers_that_offload_are_named():
    table, part = _offload_case()
    choice = choose_recompute(table, part, memory_mb=40, link=HostLink(100.0))
    # Against every layer at full (plain does not fit): plain layers, the first two offloading what they keep.
    changes = choice.layout_changes()
    assert changes["change"].tolist() == ["layers 0-2 full -> none; layers 0-1 offload to the host",
                                          "layer 3 full -> none"]


@pytest.mark.parametrize("options", [dict(), dict(modes=("off", "selective", "full"), per_layer=True)])
def test_the_changes_are_the_layers_that_differ_from_the_baseline_priced_apart(rng, options):
    # Cross-checked against the baseline's stage frame, priced on its own, and the layers compared one by one.
    checked = 0
    for _ in range(12):
        table, part = random_partition(rng, random_table(rng, kinds=int(rng.integers(1, 3)), once=True),
                                       stages=int(rng.integers(2, 4)))
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        choice = choose_recompute(table, part, memory_mb=limit_between(table, part, offered, rng), **options)
        if not choice.chosen:
            continue
        baseline = choice.pricing.evaluate(list(choice.pricing.baseline.options))
        differs = np.array(choice.pricing.baseline.options) != choice.layer_options["option"].to_numpy()
        stage_of = choice.layer_options["stage"].to_numpy()
        changes = choice.layout_changes().set_index("stage")
        assert changes.index.tolist() == sorted(set(stage_of[differs]))
        for s, row in changes.iterrows():
            on = differs & (stage_of == s)
            assert row["layers_changed"] == layer_ranges(choice.layer_options["layer"].to_numpy()[on])
            assert row["baseline_memory_mb"] == pytest.approx(baseline.at[s, "memory_mb"], rel=1e-12)
            assert row["memory_mb"] == pytest.approx(choice.stages.at[s, "memory_mb"], rel=1e-12)
            assert row["memory_change_mb"] == pytest.approx(row["memory_mb"] - row["baseline_memory_mb"], abs=1e-9)
            before = sorted(np.array(choice.pricing.baseline.options)[on])
            after = sorted(choice.layer_options["option"].to_numpy()[on])
            assert (" moved from " in row["change"]) == (before == after)
            checked += 1
    assert checked


def test_the_bundled_plan_read_back_moves_each_selective_layer_to_its_stage_end():
    # `sappkit balance ... --yaml` recomputes each stage's first layers, as MindFormers does; the chooser, as fast
    # either way, runs the stage's last layer selective, whose backward then holds less at the warm-up peak.
    llama = read_layers_json(DATA / "llama2_70b.json")
    part = Partition.from_offsets(llama, stages=16, micro_batches=32, select_recompute=[2, 1, 1, 1] + [0] * 12)
    choice = choose_recompute(llama, part, memory_mb=58000)
    changes = choice.layout_changes()
    assert changes["change"].tolist() == ["selective moved from layer 1 to layer 4",
                                          "selective moved from layer 5 to layer 9",
                                          "selective moved from layer 10 to layer 14",
                                          "selective moved from layer 15 to layer 19"]
    assert changes["memory_change_mb"].round(6).tolist() == [-640.0] * 4 and (changes["time_saved"] == 0).all()
    assert round(changes.at[1, "baseline_memory_mb"]) == 56657 and round(changes.at[1, "memory_mb"]) == 56017
    lines = choice.describe().splitlines()
    assert lines[2] == "peak 56,017 MB of 58,000 MB (stage 1; the baseline's: 56,657 MB on stage 1)"
    assert lines[-4:] == [f"  stage {row.stage}: {row.baseline_memory_mb:,.0f} MB -> {row.memory_mb:,.0f} MB "
                          f"(-640 MB): {row.change}" for row in changes.itertuples()]
    assert isinstance(changes, pd.DataFrame) and changes.attrs["time_unit"] == "ms"
