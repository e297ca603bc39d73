"""Whether the installed HyperParallel trainer runs a recompute mode per layer, and the plan it can run otherwise.

HyperParallel's trainer reads ``activation_checkpoint.mode`` for every layer;
a plan per layer also states ``activation_checkpoint.layers``, which only a
trainer whose ``ActivationCheckpointConfig`` declares a ``layers`` field
reads (the one at the commit :mod:`sappkit.trainers.hyperparallel` cites
declares none, and refuses a YAML that states it). Where the trainer cannot
read it, a per-layer choice is advice it cannot run: the plan it can run is
the fastest one mode that fits every stage (:func:`one_mode_fallback`), as
SAPP's chooser falls back to it.
"""

from __future__ import annotations

import importlib
from dataclasses import fields, is_dataclass

from ..recompute.choice import RecomputeChoice
from ..recompute.chooser import choose_priced

__all__ = ["trainer_runs_layer_plans", "one_mode_fallback", "TRAINER_CHECKPOINT_CONFIG"]

#: Where the trainer configures activation checkpointing: the module, and the dataclass whose fields are the keys
#: ``activation_checkpoint`` takes.
TRAINER_CHECKPOINT_CONFIG = ("hyper_parallel.trainer.config.parallelism", "ActivationCheckpointConfig")


def trainer_runs_layer_plans() -> bool | None:
    """Whether the installed trainer reads ``activation_checkpoint.layers``: True where its
    ``ActivationCheckpointConfig`` is a dataclass declaring ``layers``, False where it declares none, None where
    no such trainer is installed (a planner often runs away from the trainer, so sappkit does not guess; SAPP's
    tool, which runs inside the trainer's tree, reads that as False).

    Examples
    --------
    >>> trainer_runs_layer_plans() in (True, False, None)
    True
    """
    module, name = TRAINER_CHECKPOINT_CONFIG
    try:
        config = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return is_dataclass(config) and any(field.name == "layers" for field in fields(config))


def one_mode_fallback(choice: RecomputeChoice) -> RecomputeChoice:
    """The fastest one-mode choice on ``choice``'s partition, prices and device: what a trainer that runs every
    layer one mode can run instead of a per-layer ``choice`` (a refused choice, with its reason, where no mode fits
    every stage)."""
    return choose_priced(choice.pricing, per_layer=False)
