"""A recompute choice stated for runtimes: HyperParallel's trainer plan, Megatron-LM, torchtitan.

A runtime runs a choice when one policy of its grammar gives every cell the choice's count of fully recomputed
layers (sappkit.balancer.grammar): the chooser's layers of a group are interchangeable.
"""

import pandas as pd
import pytest

from sappkit.errors import InputError
from sappkit.layers.table import LayerTable
from sappkit.recompute.choice import build_choice
from sappkit.recompute.partition import Partition
from sappkit.recompute.pricing import price
from sappkit.trainers.recompute import megatron_setting, torchtitan_setting

OPTIONS = (("none", 30, 2.0), ("selective", 20, 2.2), ("comm", 25, 2.1), ("full", 2, 3.0))


def _choice(options, *, modes=("off", "selective", "full"), kinds=("b",), per_cell=(3, 3), chunks=1,
            offloaded=None):
    counts = {kind: 0 for kind in kinds}
    layer_kinds = [kinds[min(i * len(kinds) // len(options), len(kinds) - 1)] for i in range(len(options))]
    for kind in layer_kinds:
        counts[kind] += 1
    rows = [dict(kind=kind, role="body", count=counts[kind], param_mb=0, option=o, forward_time=1.0,
                 backward_time=b, activation_mb=a) for kind in kinds for o, a, b in OPTIONS]
    cells, at = [], 0
    stages = len(per_cell) // chunks
    for cell, n in enumerate(per_cell):
        c, s = divmod(cell, stages)
        cells.extend((c, s, kind, 1) for kind in layer_kinds[at:at + n])
        at += n
    part = Partition(stages=stages, micro_batches=4, chunks=chunks,
                     cells=pd.DataFrame(cells, columns=["chunk", "stage", "kind", "layers"]))
    pricing = price(LayerTable(pd.DataFrame(rows)), part, memory_mb=1e6, modes=modes)
    return build_choice(pricing, options, offloaded_mb=offloaded)


@pytest.mark.parametrize("options, expected", [
    (["full", "full", "none", "selective", "full", "full"], ("full", {"2": "off", "3": "selective"})),
    # A tie between full and selective goes to full, even where off is the majority.
    (["full", "selective", "none", "none", "none", "none"], ("full", {"1": "selective", "2-5": "off"})),
    (["selective", "selective", "full", "none", "selective", "selective"], ("selective", {"2": "full", "3": "off"})),
    (["none"] * 6, ("off", {})),
    (["none", "none", "none", "none", "none", "full"], ("full", {"0-4": "off"})),
])
def test_trainer_plan_rules(options, expected):
    assert _choice(options).trainer_plan() == expected


def test_trainer_plan_merges_consecutive_layers_of_one_mode_across_kinds():
    choice = _choice(["full", "full", "none", "none", "full", "full"], kinds=("dense", "moe"))
    assert choice.ranges["kind"].tolist() == ["dense", "dense", "moe", "moe"]
    assert choice.trainer_plan() == ("full", {"2-3": "off"})


def test_one_mode_choice_names_no_layers():
    choice = _choice(["selective"] * 6)
    one = build_choice(choice.pricing, ["selective"] * 6, mode="selective")
    assert one.trainer_plan() == ("selective", {})


def test_trainer_plan_refuses_front_options_and_foreign_modes():
    front = _choice(["none"] * 6, modes=None)
    with pytest.raises(InputError) as error:
        front.trainer_plan()
    assert str(error.value) == ("trainer_plan needs a choice among modes: this choice gives layers options from "
                                "their kinds' fronts, which the trainer cannot name; choose with "
                                "modes=('off', 'selective', 'full') and per_layer=True")
    custom = _choice(["comm"] * 6, modes={"off": "none", "talk": "comm"})
    with pytest.raises(InputError) as error:
        custom.trainer_plan()
    assert str(error.value) == ("trainer_plan: the trainer runs modes 'full', 'selective', 'off'; this choice runs "
                                "'talk'")


def test_recompute_lists():
    choice = _choice(["full", "none", "none", "selective", "full", "full"])
    assert choice.recompute_lists() == {"full": [0, 4, 5], "off": [1, 2], "selective": [3]}
    assert _choice(["comm"] * 6, modes=None).recompute_lists() == {"comm": [0, 1, 2, 3, 4, 5]}


@pytest.mark.parametrize("options, chunks, settings", [
    (["none"] * 6, 1, {}),
    (["full"] * 6, 1, {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}),
    (["selective"] * 6, 1, {"recompute_granularity": "selective"}),
    (["full", "full", "none", "full", "full", "none"], 1,
     {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 2}),
    # Four cells of (2, 1, 2, 1) layers: the first min(2, n) of each, every cell of one chunk.
    (["full", "full", "full", "full", "full", "full"], 2,
     {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}),
])
def test_megatron_where_expressible(options, chunks, settings):
    per_cell = (3, 3) if chunks == 1 else (2, 1, 2, 1)
    setting = megatron_setting(_choice(options, chunks=chunks, per_cell=per_cell))
    assert setting.expressible and setting.settings == settings and setting.runtime == "megatron"


def test_megatron_block_over_chunks():
    choice = _choice(["full", "none", "full", "full", "none", "full"], chunks=2, per_cell=(2, 1, 2, 1))
    setting = megatron_setting(choice)
    assert setting.expressible
    assert setting.settings == {"recompute_granularity": "full", "recompute_method": "block",
                                "recompute_num_layers": 1}


@pytest.mark.parametrize("options, modes, offloaded, note", [
    (["full", "none", "none", "full", "full", "none"], ("off", "selective", "full"), None,
     "the fully recomputed layers per cell ([1, 2]) are not the first N of every cell for one N: "
     "--recompute-num-layers takes one count for every stage"),
    (["full", "full", "full", "full", "none", "none"], ("off", "selective", "full"), None,
     "the fully recomputed layers per cell ([3, 1]) are not the first N of every cell for one N: "
     "--recompute-num-layers takes one count for every stage"),
    (["full", "selective", "none", "none", "none", "none"], ("off", "selective", "full"), None,
     "Megatron-LM runs one recompute granularity for every layer; this choice mixes selective with other options"),
    (["comm"] * 6, None, None, "Megatron-LM has no counterpart for option(s) 'comm' (it recomputes none, selective "
                               "or full)"),
    (["none"] * 6, ("off", "full"), [5.0, 0, 0, 0, 0, 0],
     "Megatron-LM's recompute settings do not offload activations to the host"),
])
def test_megatron_says_why_not(options, modes, offloaded, note):
    setting = megatron_setting(_choice(options, modes=modes, offloaded=offloaded))
    assert not setting.expressible and setting.settings == {} and setting.note == note


@pytest.mark.parametrize("options, settings", [
    (["none"] * 6, {"mode": "none"}),
    (["full"] * 6, {"mode": "full"}),
    (["selective"] * 6, {"mode": "selective", "selective_ac_option": "op"}),
    (["none", "full", "none", "none", "full", "none"], {"mode": "selective", "selective_ac_option": "2"}),
    # one full layer in each 3-layer cell: every 2nd block gives each cell one too (the first N that does)
    (["none", "none", "full", "none", "none", "full"], {"mode": "selective", "selective_ac_option": "2"}),
])
def test_torchtitan_where_expressible(options, settings):
    setting = torchtitan_setting(_choice(options))
    assert setting.expressible and setting.settings == settings


@pytest.mark.parametrize("options, note", [
    (["full", "full", "none", "none", "none", "none"],
     "torchtitan's layer-level checkpointing recomputes the blocks at positions N, 2N, ... of those a rank "
     "builds; this choice's fully recomputed blocks per cell ([2, 0]) follow no such pattern"),
    (["full", "full", "none", "none", "full", "none"],
     "torchtitan's layer-level checkpointing recomputes the blocks at positions N, 2N, ... of those a rank "
     "builds; this choice's fully recomputed blocks per cell ([2, 1]) follow no such pattern"),
    (["selective", "none", "none", "none", "none", "none"],
     "torchtitan runs op-level selective checkpointing on every block or none; this choice mixes it with others"),
])
def test_torchtitan_says_why_not(options, note):
    setting = torchtitan_setting(_choice(options))
    assert not setting.expressible and setting.note == note
