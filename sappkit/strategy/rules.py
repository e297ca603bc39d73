"""The rules a trainer holds a strategy to: one check, shared by the strategy search and :func:`sappkit.evaluate_strategy`.

A strategy that breaks a rule keeps the first it breaks, in this order (its
name in ``rule``, the numbers in ``reason``):

- ``heads``: ``t`` divides the attention heads and the key/value heads of
  every stack (Megatron-LM splits whole heads and whole query groups over
  the tensor-parallel ranks).
- ``node``: ``t`` divides the devices of a node, so a tensor-parallel group
  (two collectives per layer, forward and backward) stays on the node's
  links; ``tensor_across_nodes=True`` lifts it (:func:`sappkit.evaluate_strategy` prices a group across
  nodes on the network's links, so it does not hold strategies to this rule).
- ``sequence``: with ``cp > 1`` the sequence splits into ``2 cp`` chunks
  (Megatron-LM's load-balanced causal ring attention), and with sequence
  parallelism a rank's share splits again over ``t``.
- ``experts``: a dense model runs ``ep = 1``; a MoE model's ``ep`` divides
  its routed experts, and ``ep · etp`` divides ``t · cp · dp`` (Megatron-Core's
  expert grid is carved out of those ranks).
- ``batch``: ``dp · b`` divides the global batch (whole micro-batches).
- ``cells``: every (chunk, stage) cell holds at least one body layer
  (``p · v`` cells).
- ``schedule``: the schedule's own rules (:func:`sappkit.pipeline.schedules.check_pipeline`: an interleaved
  schedule with ``v > 1`` needs ``m >= p``, DualPipeV ``m >= 2p``, PyTorch's zero-bubble interleaved equal
  rounds; the V schedules run ``v = 2``).
- ``size``: the step stays within what sappkit simulates
  (:data:`~sappkit.limits.MAX_SIMULATED_PASSES` forward passes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError
from ..layers import TransformerConfig
from ..limits import MAX_SIMULATED_PASSES
from ..pipeline.schedules import check_pipeline
from .config import Strategy

__all__ = ["RULES", "RULE", "REASON", "MICRO_BATCHES", "RuleModel", "apply_rules", "strategy_refusal",
           "check_strategy"]

#: The rules, in the order they are checked (module docstring).
RULES = ("heads", "node", "sequence", "experts", "batch", "cells", "schedule", "size")
RULE, REASON, MICRO_BATCHES = "rule", "reason", "micro_batches"
#: A strategy's fields the rules read, as the search's frame names them.
_FIELDS = ("tensor_parallel", "context_parallel", "pipeline_parallel", "virtual_stages", "data_parallel",
           "expert_parallel", "expert_tensor_parallel", "micro_batch_size", "sequence_parallel", "schedule")


@dataclass(frozen=True)
class RuleModel:
    """What the rules read of a model: its stacks' heads, its body layers, its experts, its sequence."""

    heads: tuple[tuple[int, int], ...]
    layers: int
    experts: int
    seq_length: int

    @classmethod
    def of(cls, models: Sequence[TransformerConfig]) -> RuleModel:
        return cls(heads=tuple((m.num_heads, m.num_kv_heads) for m in models),
                   layers=sum(m.layers for m in models), experts=max(m.experts for m in models),
                   seq_length=models[-1].seq_length)




def apply_rules(frame: pd.DataFrame, model: RuleModel, devices_per_node: int, global_batch: int,
                 tensor_across_nodes: bool) -> None:
    """Write into ``rule`` and ``reason`` the first rule each row breaks (rows already rejected are left)."""
    t, cp, p, v, dp = (frame[key].to_numpy() for key in ("tensor_parallel", "context_parallel",
                                                         "pipeline_parallel", "virtual_stages", "data_parallel"))
    ep, etp, b, m = (frame[key].to_numpy() for key in ("expert_parallel", "expert_tensor_parallel",
                                                       "micro_batch_size", MICRO_BATCHES))
    seq = model.seq_length

    def reject(rule: str, broken: np.ndarray, reason) -> None:
        rows = np.flatnonzero(broken & frame[RULE].isna().to_numpy())
        frame.loc[frame.index[rows], RULE] = rule
        frame.loc[frame.index[rows], REASON] = [reason(i) for i in rows]

    for heads, kv in model.heads:
        reject("heads", heads % t != 0, lambda i: f"tensor_parallel={t[i]} does not divide num_heads={heads}")
        reject("heads", kv % t != 0, lambda i: f"tensor_parallel={t[i]} does not divide num_kv_heads={kv} "
                                               "(whole key/value heads per rank)")
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
    _expert_rules(reject, model, t * cp * dp, ep, etp)
    reject("batch", global_batch % (dp * b) != 0,
           lambda i: f"data_parallel * micro_batch_size = {dp[i]} * {b[i]} = {dp[i] * b[i]} does not divide "
                     f"global_batch={global_batch}")
    reject("cells", p * v > model.layers,
           lambda i: f"pipeline_parallel * virtual_stages = {p[i]} * {v[i]} = {p[i] * v[i]} cells exceed the "
                     f"{model.layers} body layers (each cell holds at least one)")
    refusals = _schedule_refusals(frame)
    reject("schedule", refusals.notna().to_numpy(), lambda i: refusals.iloc[i])
    reject("size", p * v * m > MAX_SIMULATED_PASSES,
           lambda i: f"p * v * m = {p[i]} * {v[i]} * {m[i]} = {p[i] * v[i] * m[i]:,} forward passes; sappkit "
                     f"simulates at most {MAX_SIMULATED_PASSES.cited}")


def _expert_rules(reject, model: RuleModel, ranks: np.ndarray, ep: np.ndarray, etp: np.ndarray) -> None:
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


def strategy_refusal(models: Sequence[TransformerConfig], strategy: Strategy, *, global_batch: int,
                     devices_per_node: int = 1, tensor_across_nodes: bool = True) -> tuple[str, str] | None:
    """The first rule ``strategy`` breaks on ``models`` at ``global_batch``, as ``(rule, reason)``; None if none.

    Examples
    --------
    >>> from sappkit import Strategy, TransformerConfig
    >>> gpt = TransformerConfig(layers=94, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048,
    ...                         vocab_size=32000)
    >>> rule, reason = strategy_refusal([gpt], Strategy(pipeline_parallel=8, virtual_stages=12, data_parallel=4,
    ...                                                 schedule="interleaved"), global_batch=64)
    >>> rule, reason[:61]
    ('cells', 'pipeline_parallel * virtual_stages = 8 * 12 = 96 cells exceed')
    """
    row = {name: [getattr(strategy, name)] for name in _FIELDS}
    frame = pd.DataFrame(row)
    frame[MICRO_BATCHES] = global_batch // (strategy.data_parallel * strategy.micro_batch_size)
    frame[RULE], frame[REASON] = None, ""
    apply_rules(frame, RuleModel.of(models), devices_per_node, global_batch, tensor_across_nodes)
    rule = frame[RULE].iloc[0]
    return None if rule is None else (str(rule), str(frame[REASON].iloc[0]))


def check_strategy(models: Sequence[TransformerConfig], strategy: Strategy, *, global_batch: int) -> None:
    """Raise :class:`~sappkit.InputError` naming the first rule ``strategy`` breaks (tensor parallelism across
    nodes allowed: it is priced on the network)."""
    refused = strategy_refusal(models, strategy, global_batch=global_batch)
    if refused is not None:
        raise InputError(f"strategy {strategy.label!r} breaks the {refused[0]!r} rule: {refused[1]}")
