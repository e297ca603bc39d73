"""The rules a trainer holds a strategy to, shared by the strategy search, :func:`sappkit.evaluate_strategy` and
the trainer config readers: one check, so they accept exactly the same strategies.

The rules, in the order they are checked (a strategy keeps the first it breaks):

- ``heads``: ``t`` divides the attention heads and the key/value heads of
  every stack (Megatron-LM splits whole heads and whole query groups over
  the tensor-parallel ranks); all-to-all context parallelism (Ulysses,
  ``cp_kind="a2a"``) splits the heads again over ``cp``, so ``cp · t``
  divides the attention heads.
- ``node``: ``t`` divides the devices of a node, so a tensor-parallel group
  stays on the node's links (the search's default; ``tensor_across_nodes``
  and :func:`check_strategy_fits` lift it: pricing a group across nodes is
  a question one may ask).
- ``sequence``: with ``cp > 1`` the sequence splits into ``2 cp`` chunks
  (Megatron-LM's load-balanced causal ring attention), and with sequence
  parallelism a rank's share splits again over ``t``; tensor-parallel
  communication overlap (``tp_comm_overlap``) needs sequence parallelism
  (Megatron overlaps its all-gathers and reduce-scatters).
- ``experts``: a dense model runs ``ep = 1`` and no MoE overlap; a MoE
  model's ``ep`` divides its routed experts, and ``ep · etp`` divides ``t ·
  cp · dp``. ``moe_a2a_overlap`` needs ``ep > 1``, with a pipeline
  ``v > 1``, and not ``moe_shared_expert_overlap`` too (Megatron-Core's
  ``TransformerConfig`` checks); ``moe_shared_expert_overlap`` needs shared
  experts.
- ``batch``: ``dp · b`` divides the global batch (whole micro-batches).
- ``cells``: every (chunk, stage) cell holds at least one body layer.
- ``schedule``: the schedule's own rules (:func:`sappkit.pipeline.schedules.check_pipeline`).
- ``size``: the step stays within what sappkit simulates
  (:data:`~sappkit.limits.MAX_SIMULATED_PASSES` forward passes).

One more rule holds a strategy's precision to its device
(:func:`check_precision`, checked before the others): ``dtype="fp8"``
needs FP8 tensor cores (``DeviceConfig.fp8_tflops``: Hopper, Ada and
Blackwell; Transformer Engine's per-tensor recipes need SM 8.9 or later),
and the ``mxfp8`` recipe block-scaled ones (``DeviceConfig.mxfp8_tflops``:
Blackwell, SM 10.0: Transformer Engine's "MXFP8" documentation page).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError
from ..hardware import DeviceConfig
from ..layers import TransformerConfig
from ..layers.configs import fp8_recipe_of
from ..limits import MAX_SIMULATED_PASSES
from ..pipeline.schedules import check_pipeline
from .config import Strategy

__all__ = ["RULES", "PIPELINE_RULES", "RULE", "REASON", "MICRO_BATCHES", "RuledModel", "apply_rules",
           "first_broken_rule",
           "check_strategy_fits", "check_precision"]

#: The rules, in the order they are checked (module docstring).
RULES = ("heads", "node", "sequence", "experts", "batch", "cells", "schedule", "size")
#: The rules that read the pipeline's chunks and schedule (the last ones checked).
PIPELINE_RULES = ("cells", "schedule", "size")
RULE, REASON, MICRO_BATCHES = "rule", "reason", "micro_batches"
#: The columns :func:`apply_rules` reads, :class:`~sappkit.Strategy`'s field names.
_FIELDS = ("tensor_parallel", "pipeline_parallel", "virtual_stages", "data_parallel", "context_parallel",
           "expert_parallel", "expert_tensor_parallel", "micro_batch_size", "sequence_parallel", "schedule")
#: The fields it reads where a frame has them, with the default it takes where not (a search varies none).
_OPTIONAL = {"tp_comm_overlap": False, "cp_kind": "ring", "moe_a2a_overlap": False, "moe_shared_expert_overlap": False}


@dataclass(frozen=True)
class RuledModel:
    """What the rules read of a model: its stacks' heads, its body layers, its experts, its sequence."""

    heads: tuple[tuple[int, int], ...]
    layers: int
    experts: int
    seq_length: int
    shared_experts: int = 0

    @classmethod
    def of(cls, models: Sequence[TransformerConfig]) -> RuledModel:
        return cls(heads=tuple((m.num_heads, m.num_kv_heads) for m in models),
                   layers=sum(m.layers for m in models), experts=max(m.experts for m in models),
                   seq_length=models[-1].seq_length, shared_experts=max(m.shared_experts for m in models))


def apply_rules(frame: pd.DataFrame, model: RuledModel, devices_per_node: int, global_batch: int,
                tensor_across_nodes: bool, *, rules: Sequence[str] = RULES) -> None:
    """Write into ``rule`` and ``reason`` the first rule each row breaks (rows already rejected are left), of
    ``rules`` (default all; the strategy search checks the others before it lays out the pipelines, and
    :data:`PIPELINE_RULES` after, on the rows still accepted; a frame checked only on the others needs no
    ``virtual_stages`` or ``schedule``)."""
    columns = {key: frame[key].to_numpy() for key in (*_FIELDS, MICRO_BATCHES, *_OPTIONAL) if key in frame}
    pipelines = bool(set(PIPELINE_RULES) & set(rules))
    for rule, broken, reason in _broken_rules(columns, model, devices_per_node, global_batch, tensor_across_nodes):
        if rule in PIPELINE_RULES and not pipelines:
            break
        if rule not in rules:
            continue
        rows = np.flatnonzero(broken & frame[RULE].isna().to_numpy())
        if rows.size:
            frame.loc[frame.index[rows], RULE] = rule
            frame.loc[frame.index[rows], REASON] = [reason(i) for i in rows]


def first_broken_rule(strategy: Strategy, model: RuledModel, *, micro_batches: int, devices_per_node: int,
                      global_batch: int, tensor_across_nodes: bool) -> tuple[str, str] | None:
    """The first rule one strategy breaks and why (:func:`apply_rules` on a one-row frame, without the frame), or
    None where it keeps them all."""
    columns = {key: np.array([getattr(strategy, key)])
               for key in (*_FIELDS, *_OPTIONAL)} | {MICRO_BATCHES: np.array([micro_batches])}
    for rule, broken, reason in _broken_rules(columns, model, devices_per_node, global_batch, tensor_across_nodes):
        if broken[0]:
            return rule, reason(0)
    return None


def _broken_rules(columns: dict, model: RuledModel, devices_per_node: int, global_batch: int,
                  tensor_across_nodes: bool):
    """Each rule's checks in order: ``(rule, broken, reason)``, ``broken`` a mask over the rows of ``columns`` (a
    strategy field's values per row) and ``reason(i)`` row ``i``'s message (read before the next is drawn)."""
    t, cp, p, dp = (columns[key] for key in ("tensor_parallel", "context_parallel", "pipeline_parallel",
                                             "data_parallel"))
    # a frame without chunks lays out no MoE overlap (the search's), so no chunk count is checked against it
    v = columns["virtual_stages"] if "virtual_stages" in columns else np.zeros(len(t), dtype=int)
    ep, etp, b, m = (columns[key] for key in ("expert_parallel", "expert_tensor_parallel", "micro_batch_size",
                                              MICRO_BATCHES))
    seq = model.seq_length
    for heads, kv in model.heads:
        yield "heads", heads % t != 0, lambda i: f"tensor_parallel={t[i]} does not divide num_heads={heads}"
        yield "heads", kv % t != 0, lambda i: (f"tensor_parallel={t[i]} does not divide num_kv_heads={kv} "
                                               "(whole key/value heads per rank)")
        yield ("heads", (_column(columns, "cp_kind") == "a2a") & (heads % (cp * t) != 0),
               lambda i: f"context_parallel * tensor_parallel = {cp[i] * t[i]} does not divide num_heads={heads} "
                         "(all-to-all context parallelism splits whole heads over cp * t)")
    if not tensor_across_nodes:
        yield ("node", devices_per_node % t != 0,
               lambda i: f"tensor_parallel={t[i]} does not divide devices_per_node={devices_per_node} "
                         "(a tensor-parallel group stays inside a node)")
    yield ("sequence", (cp > 1) & (seq % (2 * cp) != 0),
           lambda i: f"seq_length={seq} does not split into 2 * context_parallel = {2 * cp[i]} equal chunks "
                     "(Megatron-LM's load-balanced ring attention)")
    shard = seq // cp
    yield ("sequence", columns["sequence_parallel"] & (shard % t != 0),
           lambda i: f"seq_length / context_parallel = {shard[i]} does not split over tensor_parallel={t[i]} "
                     "(sequence parallelism)")
    yield ("sequence", _column(columns, "tp_comm_overlap") & ~columns["sequence_parallel"].astype(bool),
           lambda i: "tp_comm_overlap needs sequence_parallel (Megatron overlaps the sequence-parallel all-gathers "
                     "and reduce-scatters with their matmuls)")
    yield from _expert_rules(model, t * cp * dp, ep, etp)
    yield from _overlap_rules(model, columns, ep, p, v)
    yield ("batch", global_batch % (dp * b) != 0,
           lambda i: f"data_parallel * micro_batch_size = {dp[i]} * {b[i]} = {dp[i] * b[i]} does not divide "
                     f"global_batch={global_batch}")
    yield ("cells", p * v > model.layers,
           lambda i: f"pipeline_parallel * virtual_stages = {p[i]} * {v[i]} = {p[i] * v[i]} cells exceed the "
                     f"{model.layers} body layers (each cell holds at least one)")
    refusals = _schedule_refusals(columns)
    yield "schedule", np.array([refusal is not None for refusal in refusals], dtype=bool), refusals.__getitem__
    yield ("size", p * v * m > MAX_SIMULATED_PASSES,
           lambda i: f"p * v * m = {p[i]} * {v[i]} * {m[i]} = {p[i] * v[i] * m[i]:,} forward passes; sappkit "
                     f"simulates at most {MAX_SIMULATED_PASSES.cited}")


def _column(columns: dict, name: str) -> np.ndarray:
    """An optional strategy field's values (:data:`_OPTIONAL`), or its default where ``columns`` has none."""
    return columns[name] if name in columns else np.full(len(columns["tensor_parallel"]), _OPTIONAL[name])


def _expert_rules(model: RuledModel, ranks: np.ndarray, ep: np.ndarray, etp: np.ndarray):
    if not model.experts:
        def dense(i):
            set_ = [f"{name}={value}" for name, value in (("expert_parallel", ep[i]), ("expert_tensor_parallel",
                                                                                       etp[i])) if value > 1]
            return f"{' and '.join(set_)} {'needs' if len(set_) == 1 else 'need'} a MoE model (this one has no experts)"

        yield "experts", (ep > 1) | (etp > 1), dense
        return
    yield ("experts", model.experts % ep != 0,
           lambda i: f"expert_parallel={ep[i]} does not divide the {model.experts} routed experts")
    yield ("experts", ranks % (ep * etp) != 0,
           lambda i: f"expert_parallel * expert_tensor_parallel = {ep[i] * etp[i]} does not divide tensor_parallel "
                     f"* context_parallel * data_parallel = {ranks[i]}")


def _overlap_rules(model: RuledModel, columns: dict, ep: np.ndarray, p: np.ndarray, v: np.ndarray):
    a2a, shared = (_column(columns, key).astype(bool) for key in ("moe_a2a_overlap", "moe_shared_expert_overlap"))
    if not model.experts:
        yield "experts", a2a | shared, lambda i: (f"{'moe_a2a_overlap' if a2a[i] else 'moe_shared_expert_overlap'}"
                                                  "=True needs a MoE model (this one has no experts)")
        return
    yield "experts", a2a & (ep == 1), lambda i: ("moe_a2a_overlap=True needs expert_parallel > 1 (it overlaps the "
                                                 "expert all-to-all)")
    yield ("experts", a2a & (p > 1) & (v == 1),
           lambda i: f"moe_a2a_overlap=True with pipeline_parallel={p[i]} needs virtual_stages > 1 (Megatron-Core "
                     "pairs micro-batches across model chunks)")
    yield "experts", a2a & shared, lambda i: ("moe_a2a_overlap=True and moe_shared_expert_overlap=True exclude "
                                              "each other (Megatron-Core refuses both)")
    if not model.shared_experts:
        yield "experts", shared, lambda i: ("moe_shared_expert_overlap=True needs shared experts (this model has "
                                            "none)")


def _schedule_refusals(columns: dict) -> list[str | None]:
    """Per row, what :func:`check_pipeline` refuses (None where it accepts, and without a pipeline); each shape
    is checked once."""
    refused: dict = {}
    rows = list(zip(*(columns[key] for key in ("schedule", "pipeline_parallel", MICRO_BATCHES, "virtual_stages"))))
    for key in dict.fromkeys(row for row in rows if row[1] > 1):
        schedule, p, m, v = key
        try:
            check_pipeline(schedule, int(p), max(int(m), 1), int(v))
        except InputError as error:
            refused[key] = str(error)
    return [refused.get(row) for row in rows]


def check_precision(dtype: str, fp8_recipe: str | None, device: DeviceConfig) -> str | None:
    """Raise when ``device`` cannot run ``dtype`` with ``fp8_recipe`` (module docstring), else return the recipe
    it runs (``delayed`` for ``fp8`` without one; None for the other dtypes).

    Examples
    --------
    >>> from sappkit.hardware import DeviceConfig
    >>> check_precision("fp8", None, DeviceConfig.preset("h100-sxm"))
    'delayed'
    >>> check_precision("fp8", "mxfp8", DeviceConfig.preset("h100-sxm"))
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: fp8_recipe='mxfp8' needs block-scaled FP8 tensor cores (Blackwell); device 'h100-sxm' has none (its mxfp8_tflops is None): use 'delayed' or 'current'
    """
    recipe = fp8_recipe_of(dtype, fp8_recipe)
    if recipe is not None and device.fp8_tflops is None:
        raise InputError(f"dtype='fp8' needs FP8 tensor cores; device {device.name!r} has none (its fp8_tflops is "
                         "None): use 'bf16'")
    if recipe == "mxfp8" and device.mxfp8_tflops is None:
        raise InputError(f"fp8_recipe='mxfp8' needs block-scaled FP8 tensor cores (Blackwell); device "
                         f"{device.name!r} has none (its mxfp8_tflops is None): use 'delayed' or 'current'")
    return recipe


def check_strategy_fits(strategy: Strategy, models: Sequence[TransformerConfig], *, global_batch: int,
                        devices_per_node: int | None = None, device: DeviceConfig | None = None) -> int:
    """Raise the rule ``strategy`` breaks for ``models`` (module docstring), else return its micro-batches ``m``.

    ``devices_per_node`` checks the ``node`` rule too (the search's default); ``device`` the precision
    (:func:`check_precision`).

    Examples
    --------
    >>> from sappkit import Strategy, TransformerConfig
    >>> gpt = TransformerConfig(layers=32, hidden_size=2048, num_heads=16, ffn_size=8192, seq_length=2048,
    ...                         vocab_size=51200)
    >>> check_strategy_fits(Strategy(pipeline_parallel=4), [gpt], global_batch=64)
    64
    >>> check_strategy_fits(Strategy(pipeline_parallel=64), [gpt], global_batch=64)
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: strategy t1 p64 v1 dp1 cp1 ep1 b1 1f1b zero1 breaks the 'cells' rule: pipeline_parallel * virtual_stages = 64 * 1 = 64 cells exceed the 32 body layers (each cell holds at least one)
    """
    if device is not None:
        check_precision(strategy.dtype, strategy.fp8_recipe, device)
    m = strategy.micro_batches(global_batch)
    broken = first_broken_rule(strategy, RuledModel.of(models), micro_batches=m,
                               devices_per_node=devices_per_node or 1, global_batch=global_batch,
                               tensor_across_nodes=devices_per_node is None)
    if broken is not None:
        raise InputError(f"strategy {strategy.label} breaks the {broken[0]!r} rule: {broken[1]}")
    return m
