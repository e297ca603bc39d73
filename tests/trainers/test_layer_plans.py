"""A per-layer choice for a trainer that reads no ``activation_checkpoint.layers`` falls back to one mode."""

import sys
import types
from dataclasses import dataclass

import pandas as pd
import pytest

from sappkit import LayerTable, Partition, choose_recompute
from sappkit.trainers.hyperparallel import hyperparallel_config
from sappkit.trainers.layer_plans import one_mode_fallback, trainer_runs_layer_plans

MODES = ("off", "selective", "full")


@pytest.fixture
def choice():
    # Two stages of two layers, 1F1B, m = 2 (stage 0 holds 2 micro-batches, stage 1 one), 300 MB. Stage 0: both
    # selective, 200 + 2 x 2 x 20 + 20 = 300 (off anywhere needs more); stage 1: its last layer ends warm-up,
    # layer 2 off and layer 3 selective, 200 + 40 + 20 + 20 = 280 (both off: 320).
    rows = [dict(kind="b", role="body", count=4, param_mb=100.0, option=option, forward_time=1.0,
                 backward_time=backward, activation_mb=activation)
            for option, activation, backward in (("none", 40.0, 2.0), ("selective", 20.0, 2.5), ("full", 5.0, 3.0))]
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    return choose_recompute(LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=2, cells=cells),
                            memory_mb=300, modes=MODES, per_layer=True)


def _installed(monkeypatch, *field_names):
    """A stand-in for the trainer's config module whose dataclass declares ``field_names``."""
    config = dataclass(type("ActivationCheckpointConfig", (), {"__annotations__": dict.fromkeys(field_names, str)}))
    module = types.ModuleType("hyper_parallel.trainer.config.parallelism")
    module.ActivationCheckpointConfig = config
    monkeypatch.setitem(sys.modules, "hyper_parallel.trainer.config.parallelism", module)


def test_the_installed_trainers_config_says_whether_it_reads_layers(monkeypatch):
    monkeypatch.setitem(sys.modules, "hyper_parallel.trainer.config.parallelism", None)
    assert trainer_runs_layer_plans() is None
    _installed(monkeypatch, "mode")
    assert trainer_runs_layer_plans() is False
    _installed(monkeypatch, "mode", "layers")
    assert trainer_runs_layer_plans() is True


def test_a_trainer_without_layers_gets_the_fastest_one_mode_that_fits(monkeypatch, choice):
    # Every layer one mode (the whole model priced under each): off 400 | 320, selective 300 | 260, full 260 | 250;
    # at 300 MB the fastest that fits everywhere is selective.
    assert choice.layer_options["mode"].tolist() == ["selective", "selective", "off", "selective"]
    assert one_mode_fallback(choice).mode == "selective"
    _installed(monkeypatch, "mode")
    config = hyperparallel_config(choice)
    assert config.document["activation_checkpoint"] == {"mode": "selective"}
    one = one_mode_fallback(choice)
    assert config.notes == (
        "the trainer reads no activation_checkpoint.layers (its ActivationCheckpointConfig declares none): every "
        "layer runs the fastest one mode that fits, 'selective' (simulated step 21 time units against 20 time units "
        "with a mode per layer), instead of the per-layer plan",)
    assert (one.step_time, choice.step_time) == (21.0, 20.0)


def test_a_trainer_with_layers_or_an_unknown_one_gets_the_per_layer_plan(monkeypatch, choice):
    _installed(monkeypatch, "mode", "layers")
    assert hyperparallel_config(choice).document["activation_checkpoint"] == {"mode": "selective",
                                                                               "layers": {"2": "off"}}
    assert hyperparallel_config(choice).notes == ()
    monkeypatch.setitem(sys.modules, "hyper_parallel.trainer.config.parallelism", None)
    unknown = hyperparallel_config(choice)
    assert unknown.document["activation_checkpoint"]["layers"] == {"2": "off"}
    assert unknown.notes == ("activation_checkpoint.layers: a trainer whose ActivationCheckpointConfig declares no "
                             "'layers' runs every layer 'selective'",)
    assert hyperparallel_config(choice, layer_plans=False).document["activation_checkpoint"] == {"mode": "selective"}
