"""HyperParallel's trainer both ways: ``accelerator`` degrees and ``activation_checkpoint`` layer plans.

HyperParallel's trainer YAML sets the degrees under ``accelerator``
(``tp_size``, ``cp_size``, ``ep_size``, ``pp_size``, ``sequence_parallel``)
and recompute under ``activation_checkpoint``: a ``mode`` (``off``,
``selective``, ``full``) for every layer and, in the layer plans sappkit
writes, ``layers``: the body layers (by index, ``"7"``, or inclusive range,
``"3-5"``) that run another mode. The config places no layers per stage:
sappkit reads the layers as split evenly over ``pp_size`` stages.

Sources followed: HyperParallel ``hyper_parallel/trainer/config/
parallelism.py`` (``AcceleratorConfig``, ``ActivationCheckpointConfig``:
``mode`` ``off``/``full``/``selective``; at commit ``1df8e006cf17`` it
declares no ``layers``, so that trainer runs every layer its ``mode``, said
in the notes) and ``hyper_parallel/trainer/config/trainer.py``
(``TrainerConfig``: ``accelerator``, ``activation_checkpoint``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from .._check import check_bool, check_int, short
from .._files import as_path, load_yaml
from ..errors import InputError
from ..layers.units import format_time
from ..limits import MAX_DEVICES, MAX_LAYERS, MAX_MICRO_BATCHES, MAX_STAGES
from ..recompute.choice import RecomputeChoice
from ..recompute.trainer_plan import layer_plan
from ..strategy import Strategy
from .config import Finding, TrainerConfig, flag, pipeline_of, section, strategy_of, whole
from .layer_plans import one_mode_fallback, trainer_runs_layer_plans

__all__ = ["HyperParallelConfig", "hyperparallel_config", "read_hyperparallel"]

_MODE_OPTION = {"off": "none", "selective": "selective", "full": "full"}
_OPTION_MODE = {option: mode for mode, option in _MODE_OPTION.items()}
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_WHAT = "HyperParallel config"


@dataclass(frozen=True)
class HyperParallelConfig:
    """A plan as HyperParallel's trainer YAML sections, and what the trainer runs differently."""

    document: dict
    notes: tuple[str, ...] = ()

    def to_yaml(self) -> str:
        """The sections as YAML."""
        return yaml.safe_dump(self.document, sort_keys=False, default_flow_style=False)


def hyperparallel_config(source, *, strategy: Strategy | None = None,
                         layer_plans: bool | None = None) -> HyperParallelConfig:
    """A plan (or a recompute choice) as HyperParallel's ``accelerator`` and ``activation_checkpoint``.

    ``layer_plans``: whether the trainer reads ``activation_checkpoint.layers``
    (default :func:`~sappkit.trainers.layer_plans.trainer_runs_layer_plans`,
    the installed trainer's answer, None where none is installed). Where it
    does not (False), a per-layer recompute choice is stated as the fastest
    one mode that fits every stage instead, and the notes say so; where it is
    not known, the per-layer plan is written with a note.

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit import plan_from_offsets
    >>> rows = [dict(kind="block", role="body", count=4, param_mb=100, option=o, forward_time=1,
    ...              backward_time=b, activation_mb=a) for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> plan = plan_from_offsets(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000, recompute=[1, 0])
    >>> hyperparallel_config(plan).document["activation_checkpoint"]
    {'mode': 'full', 'layers': {'1-3': 'off'}}
    """
    pipe = pipeline_of(source)
    modes = []
    for option in pipe.options:
        if option not in _OPTION_MODE:
            raise InputError(f"HyperParallel's trainer runs modes off, selective and full; the plan runs option "
                             f"{option!r}")
        modes.append(_OPTION_MODE[option])
    mode, layers = layer_plan(modes)
    notes = [] if pipe.fits else [f"the plan does not fit memory_mb={pipe.memory_mb:g}"]
    runs = trainer_runs_layer_plans() if layer_plans is None else check_bool("layer_plans", layer_plans)
    if layers and runs is False and isinstance(source, RecomputeChoice):
        mode, layers, fallback_note = _one_mode_instead(source, mode, layers)
        notes.append(fallback_note)
    per_stage = [sum(pipe.layer_counts[c][s] for c in range(pipe.chunks)) for s in range(pipe.stages)]
    if pipe.chunks > 1 or len(set(per_stage)) > 1 or pipe.schedule != "1f1b":
        notes.append("HyperParallel's config sets pp_size only: it runs its own stage split, not the plan's "
                     f"({pipe.schedule}, {pipe.chunks} chunk(s), layers per stage {per_stage})")
    if layers and runs is not True:
        notes.append("activation_checkpoint.layers: a trainer whose ActivationCheckpointConfig declares no 'layers' "
                     f"runs every layer '{mode}'" + (" (the installed trainer's declares none)" if runs is False else
                                                      ""))
    accelerator = {"pp_size": pipe.stages}
    if strategy is not None:
        accelerator = {"tp_size": strategy.tensor_parallel, "cp_size": strategy.context_parallel,
                       "ep_size": strategy.expert_parallel, "pp_size": pipe.stages,
                       "sequence_parallel": strategy.sequence_parallel}
    checkpoint = {"mode": mode} | ({"layers": layers} if layers else {})
    return HyperParallelConfig({"accelerator": accelerator, "activation_checkpoint": checkpoint}, tuple(notes))


def _one_mode_instead(choice, mode: str, layers: dict) -> tuple[str, dict, str]:
    """The fastest one mode that fits in place of a per-layer choice's plan, and the note saying so (the plan
    unchanged, with why, where no mode fits)."""
    one = one_mode_fallback(choice)
    why = "the trainer reads no activation_checkpoint.layers (its ActivationCheckpointConfig declares none)"
    if not one.chosen:
        return mode, layers, f"{why}, and no one mode fits ({one.reason}): the per-layer plan is written as chosen"
    unit = choice.time_unit
    return one.mode, {}, (f"{why}: every layer runs the fastest one mode that fits, {one.mode!r} (simulated step "
                          f"{format_time(one.step_time, unit)} against {format_time(choice.step_time, unit)} with a "
                          "mode per layer), instead of the per-layer plan")


def read_hyperparallel(source, *, num_layers: int | None = None, micro_batches: int | None = None,
                       world_size: int | None = None) -> TrainerConfig:
    """A HyperParallel trainer YAML (a path or its document) as a :class:`TrainerConfig`.

    The config names neither the model's depth nor the micro-batches: give
    ``num_layers`` (or the layer table) and ``micro_batches`` (default ``p``).
    """
    document = source if isinstance(source, dict) else load_yaml(as_path("path", source), "a HyperParallel config")
    if not isinstance(document, dict):
        raise InputError(f"{_WHAT}: expected a mapping at the top; got {short(document)}")
    accelerator = section(_WHAT, document, "accelerator")
    checkpoint = section(_WHAT, document, "activation_checkpoint")
    if num_layers is None:
        raise InputError(f"{_WHAT}: the config does not name the model's depth; give num_layers (or the layer table)")
    num_layers = check_int("num_layers", num_layers, minimum=1, maximum=MAX_LAYERS)
    p = whole(_WHAT, accelerator, "pp_size", 1, maximum=MAX_STAGES)
    if num_layers % p:
        raise InputError(f"{_WHAT}: {num_layers} layers over pp_size {p}: the config states no split, and sappkit "
                         "reads an even one")
    modes = _modes(checkpoint, num_layers)
    t, cp = whole(_WHAT, accelerator, "tp_size", 1), whole(_WHAT, accelerator, "cp_size", 1)
    dp = 1 if world_size is None else max(1, check_int("world_size", world_size, minimum=1, maximum=MAX_DEVICES)
                                          // (t * cp * p))
    strategy = strategy_of(_WHAT, tensor_parallel=t, pipeline_parallel=p, data_parallel=dp, context_parallel=cp,
                        expert_parallel=whole(_WHAT, accelerator, "ep_size", 1),
                        sequence_parallel=flag(_WHAT, accelerator, "sequence_parallel", False))
    m = p if micro_batches is None else check_int("micro_batches", micro_batches, minimum=1, maximum=MAX_MICRO_BATCHES)
    findings = []
    if checkpoint.get("layers"):
        findings.append(Finding("layer_plan_ignored", "note", "activation_checkpoint.layers names per-layer modes, "
                                                              "which a trainer without that field runs as the "
                                                              f"mode '{checkpoint.get('mode', 'off')}'",
                                "check that your HyperParallel trainer's ActivationCheckpointConfig has 'layers'"))
    return TrainerConfig(trainer="hyperparallel", strategy=strategy, layer_counts=((num_layers // p,) * p,),
                         options=tuple(_MODE_OPTION[mode] for mode in modes), num_layers=num_layers,
                         micro_batches=m, findings=tuple(findings), settings=document,
                         notes=() if micro_batches is not None else (f"micro-batches taken as pp_size = {p}",),
                         source="document" if isinstance(source, dict) else str(source))


def _modes(checkpoint: dict, count: int) -> list[str]:
    mode = checkpoint.get("mode", "off") or "off"
    if not isinstance(mode, str) or mode not in _MODE_OPTION:
        raise InputError(f"{_WHAT}: activation_checkpoint.mode must be off, selective or full; got {short(mode)}")
    modes = [mode] * count
    for key, value in section(_WHAT, checkpoint, "layers").items():
        match = _RANGE.match(str(key))
        if match is None or not isinstance(value, str) or value not in _MODE_OPTION:
            raise InputError(f"{_WHAT}: activation_checkpoint.layers entry {short(key)}: {short(value)} must be "
                             "'i' or 'i-j' mapped to off, selective or full")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if not 0 <= first <= last < count:
            raise InputError(f"{_WHAT}: activation_checkpoint.layers {key!r} is outside layers 0-{count - 1}")
        modes[first:last + 1] = [value] * (last - first + 1)
    return modes
