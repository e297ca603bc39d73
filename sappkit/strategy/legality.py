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
    t, cp, p, dp = (frame[key].to_numpy() for key in ("tensor_parallel", "context_parallel", "pipeline_parallel",
                                                      "data_parallel"))
    ep, etp, b, m = (frame[key].to_numpy() for key in ("expert_parallel", "expert_tensor_parallel",
                                                       "micro_batch_size", MICRO_BATCHES))
    # a frame without chunks lays out no MoE overlap (the search's), so no chunk count is checked against it
    v = frame["virtual_stages"].to_numpy() if "virtual_stages" in frame else np.zeros(len(frame), dtype=int)
    seq = model.seq_length

    def reject(rule: str, broken: np.ndarray, reason) -> None:
        if rule not in rules:
            return
        rows = np.flatnonzero(broken & frame[RULE].isna().to_numpy())
        frame.loc[frame.index[rows], RULE] = rule
        frame.loc[frame.index[rows], REASON] = [reason(i) for i in rows]

    for heads, kv in model.heads:
        reject("heads", heads % t != 0, lambda i: f"tensor_parallel={t[i]} does not divide num_heads={heads}")
        reject("heads", kv % t != 0, lambda i: f"tensor_parallel={t[i]} does not divide num_kv_heads={kv} "
                                               "(whole key/value heads per rank)")
        reject("heads", (_column(frame, "cp_kind") == "a2a") & (heads % (cp * t) != 0),
               lambda i: f"context_parallel * tensor_parallel = {cp[i] * t[i]} does not divide num_heads={heads} "
                         "(all-to-all context parallelism splits whole heads over cp * t)")
    if not tensor_across_nodes:
        reject("node", devices_per_node % t != 0,
               lambda i: f"tensor_parallel={t[i]} does not divide devices_per_node={devices_per_node} "
                         "(a tensor-parallel group stays inside a node)")
    reject("sequence", (cp > 1) & (seq % (2 * cp) != 0),
           lambda i: f"seq_length={seq} does not split into 2 * context_parallel = {2 * cp[i]} equal chunks "
                     "(Megatron-LM's load-balanced ring attention)")
    shard = seq // cp
    reject("sequence", frame["sequence_parallel"].to_numpy() & (shard % t != 0),
           lambda i: f"seq_length / context_parallel = {shard[i]} does not split over tensor_parallel={t[i]} "
                     "(sequence parallelism)")
    reject("sequence", _column(frame, "tp_comm_overlap") & ~frame["sequence_parallel"].to_numpy(bool),
           lambda i: "tp_comm_overlap needs sequence_parallel (Megatron overlaps the sequence-parallel all-gathers "
                     "and reduce-scatters with their matmuls)")
    _expert_rules(reject, model, t * cp * dp, ep, etp)
    _overlap_rules(reject, model, frame, ep, p, v)
    reject("batch", global_batch % (dp * b) != 0,
           lambda i: f"data_parallel * micro_batch_size = {dp[i]} * {b[i]} = {dp[i] * b[i]} does not divide "
                     f"global_batch={global_batch}")
    if not set(PIPELINE_RULES) & set(rules):
        return
    reject("cells", p * v > model.layers,
           lambda i: f"pipeline_parallel * virtual_stages = {p[i]} * {v[i]} = {p[i] * v[i]} cells exceed the "
                     f"{model.layers} body layers (each cell holds at least one)")
    refusals = _schedule_refusals(frame)
    reject("schedule", refusals.notna().to_numpy(), lambda i: refusals.iloc[i])
    reject("size", p * v * m > MAX_SIMULATED_PASSES,
           lambda i: f"p * v * m = {p[i]} * {v[i]} * {m[i]} = {p[i] * v[i] * m[i]:,} forward passes; sappkit "
                     f"simulates at most {MAX_SIMULATED_PASSES.cited}")


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """An optional strategy field's column (:data:`_OPTIONAL`), or its default where the frame has none."""
    return frame[name].to_numpy() if name in frame else np.full(len(frame), _OPTIONAL[name])


def _expert_rules(reject, model: RuledModel, ranks: np.ndarray, ep: np.ndarray, etp: np.ndarray) -> None:
    if not model.experts:
        def dense(i):
            set_ = [f"{name}={value}" for name, value in (("expert_parallel", ep[i]), ("expert_tensor_parallel",
                                                                                       etp[i])) if value > 1]
            return f"{' and '.join(set_)} {'needs' if len(set_) == 1 else 'need'} a MoE model (this one has no experts)"

        reject("experts", (ep > 1) | (etp > 1), dense)
        return
    reject("experts", model.experts % ep != 0,
           lambda i: f"expert_parallel={ep[i]} does not divide the {model.experts} routed experts")
    reject("experts", ranks % (ep * etp) != 0,
           lambda i: f"expert_parallel * expert_tensor_parallel = {ep[i] * etp[i]} does not divide tensor_parallel "
                     f"* context_parallel * data_parallel = {ranks[i]}")


def _overlap_rules(reject, model: RuledModel, frame: pd.DataFrame, ep: np.ndarray, p: np.ndarray,
                   v: np.ndarray) -> None:
    a2a, shared = (_column(frame, key).astype(bool) for key in ("moe_a2a_overlap", "moe_shared_expert_overlap"))
    if not model.experts:
        reject("experts", a2a | shared, lambda i: f"{'moe_a2a_overlap' if a2a[i] else 'moe_shared_expert_overlap'}"
                                                  "=True needs a MoE model (this one has no experts)")
        return
    reject("experts", a2a & (ep == 1), lambda i: "moe_a2a_overlap=True needs expert_parallel > 1 (it overlaps the "
                                                 "expert all-to-all)")
    reject("experts", a2a & (p > 1) & (v == 1),
           lambda i: f"moe_a2a_overlap=True with pipeline_parallel={p[i]} needs virtual_stages > 1 (Megatron-Core "
                     "pairs micro-batches across model chunks)")
    reject("experts", a2a & shared, lambda i: "moe_a2a_overlap=True and moe_shared_expert_overlap=True exclude "
                                              "each other (Megatron-Core refuses both)")
    if not model.shared_experts:
        reject("experts", shared, lambda i: "moe_shared_expert_overlap=True needs shared experts (this model has "
                                            "none)")


def _schedule_refusals(frame: pd.DataFrame) -> pd.Series:
    """Per row, what :func:`check_pipeline` refuses (None where it accepts, and without a pipeline)."""
    keys = ["schedule", "pipeline_parallel", MICRO_BATCHES, "virtual_stages"]
    shapes = frame.loc[frame["pipeline_parallel"] > 1, keys].drop_duplicates()
    refused = {}
    for schedule, p, m, v in shapes.itertuples(index=False):
        try:
            check_pipeline(schedule, int(p), max(int(m), 1), int(v))
        except InputError as error:
            refused[(schedule, p, m, v)] = str(error)
    index = pd.MultiIndex.from_frame(frame[keys])
    return pd.Series([refused.get(key) for key in index], index=frame.index, dtype=object)


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
    frame = pd.DataFrame([{field: getattr(strategy, field) for field in (*_FIELDS, *_OPTIONAL)}
                          | {MICRO_BATCHES: m}])
    frame[RULE], frame[REASON] = None, ""
    model = RuledModel.of(models)
    apply_rules(frame, model, devices_per_node or 1, global_batch, devices_per_node is None)
    if frame.at[0, RULE] is not None:
        raise InputError(f"strategy {strategy.label} breaks the {frame.at[0, RULE]!r} rule: {frame.at[0, REASON]}")
    return m
