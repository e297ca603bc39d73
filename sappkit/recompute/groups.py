"""A stage's body layers in groups of interchangeable layers, each option priced, for the chooser's knapsack;
and which layers end a stage's warm-up (their memory includes the working set).

Layers are interchangeable when they share a stage, kind, chunk and
in-flight count; the layer that ends warm-up, and with a second peak the
stage's first layer, each stand apart (:func:`layer_groups`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..columns import (
    ACTIVATION_MB, CHUNK, FIRST_WORKING_MB, GRAD_MB, IN_FLIGHT, KIND, MEMORY_ONCE_MB, STAGE, TIME, WORKING_MB,
)
from .events import charged_chunks
from .knapsack import to_buckets
from .partition import LAYER, Partition

__all__ = ["LayerGroup", "layer_groups", "ends_warm_up", "first_layers", "ENDS_WARM_UP", "FIRST", "GROUP"]

ENDS_WARM_UP = "ends_warm_up"
FIRST = "first"
GROUP = "group"


@dataclass(frozen=True, eq=False)
class LayerGroup:
    """Interchangeable body layers of one stage and what each of their options costs one layer.

    Attributes
    ----------
    stage, kind, in_flight : the layers' stage, kind and micro-batches in flight.
    ends_warm_up : bool
        The group is the layer that ends the stage's warm-up (its memory
        includes its working set); with more than one chunk, the last body
        layer of a cell whose working set a memory event charges
        (:mod:`sappkit.recompute.events`).
    first : bool
        The group is the stage's first layer, standing apart because the
        stage has a second peak (its backward memory includes ``W1``).
    layers : tuple of int
        Body layer indices, model order.
    options : tuple of str
        Options on offer, as :attr:`~sappkit.recompute.pricing.Pricing.offered` lists them.
    memory_mb, backward_mb, time : ndarray
        Per option: what one layer adds to the warm-up peak, to the second
        peak (0 without one), and its forward + backward time.
    weight : ndarray
        ``memory_mb`` in whole buckets, rounded up.
    """

    stage: int
    kind: str
    in_flight: int
    ends_warm_up: bool
    first: bool
    layers: tuple[int, ...]
    options: tuple[str, ...]
    memory_mb: np.ndarray
    backward_mb: np.ndarray
    time: np.ndarray
    weight: np.ndarray
    chunk: int = 0
    """The layers' chunk (they share a cell's in-flight count and memory events)."""

    @property
    def count(self) -> int:
        """Layers in the group (what the knapsack calls a group's items)."""
        return len(self.layers)

    @property
    def share(self) -> float:
        """The share ``(n - 1)/n`` of what a layer keeps that stays as a later micro-batch's backward ends."""
        return (self.in_flight - 1) / self.in_flight



def first_layers(body: pd.DataFrame, layers) -> np.ndarray:
    """Per body layer, whether it is the one whose backward ends a stage's micro-batch, for the second peak: the
    stage's first layer of the main module (the tail's, else the last in model order), else its first layer.

    Where a vision tower shares a stage with the language model, the tower's
    layers come first and run their backward last, but as the language
    model's first layer runs its backward every tower activation is still
    held: that is the moment the stage must fit (SAPP's estimator takes it).
    """
    tail = layers.tail
    main = layers.module(str(tail[KIND])) if tail is not None else layers.modules[-1]
    of_main = np.array([layers.module(kind) == main for kind in body[KIND]], dtype=bool)
    stages = body[STAGE].to_numpy()
    flags = np.zeros(len(body), dtype=bool)
    for stage in dict.fromkeys(stages):
        on_stage = stages == stage
        flags[np.flatnonzero(on_stage & of_main if (on_stage & of_main).any() else on_stage)[0]] = True
    return flags


def ends_warm_up(partition: Partition, *, ends_with_tail: bool) -> np.ndarray:
    """Per body layer, whether it ends warm-up: the last body layer of each stage's last-chunk cell, unless that
    cell ends with the tail; with more chunks, of each cell whose working set a memory event charges
    (:func:`~sappkit.recompute.events.charged_chunks`)."""
    body = partition.body
    flags = np.zeros(len(body), dtype=bool)
    if partition.chunks > 1:
        ending = body.drop_duplicates([CHUNK, STAGE], keep="last")
        charged = {(c, s) for s in range(partition.stages)
                   for c in charged_chunks(partition, s, ends_with_tail=ends_with_tail)}
        flags[ending[LAYER].to_numpy()[[cell in charged for cell in zip(ending[CHUNK], ending[STAGE])]]] = True
        return flags
    last = body[body[CHUNK] == partition.chunks - 1]
    ending = last.drop_duplicates(STAGE, keep="last")
    if ends_with_tail:
        ending = ending[ending[STAGE] != partition.stages - 1]
    flags[ending[LAYER].to_numpy()] = True
    return flags


def layer_groups(body: pd.DataFrame, offered: dict[str, tuple[str, ...]], cost: Callable[[str, str], dict], *,
                 stages: int, fsdp_holds_grads: bool, bucket_mb: float) -> tuple[np.ndarray, tuple]:
    """Each body layer's group (an index into its stage's groups) and, per stage, its groups with every offered
    option priced at both peaks; ``cost(kind, option)`` gives one layer's costs."""
    keys = list(zip(body[STAGE], body[KIND], body[IN_FLIGHT], body[ENDS_WARM_UP], body[FIRST], body[CHUNK]))
    members: dict[tuple, list[int]] = {}
    for layer, key in zip(body[LAYER], keys):
        members.setdefault(key, []).append(int(layer))
    per_stage: list[list[LayerGroup]] = [[] for _ in range(stages)]
    group_of = np.zeros(len(body), dtype=int)
    for (stage, kind, n, ends, first, chunk), layers in members.items():
        options = offered[kind]
        costs = [cost(kind, option) for option in options]
        kept = np.array([c[ACTIVATION_MB] * n + c[MEMORY_ONCE_MB] for c in costs])
        memory = kept + (np.array([c[WORKING_MB] for c in costs]) if ends else 0.0)
        backward = np.zeros(len(options))
        if fsdp_holds_grads:
            backward = kept * (n - 1) / n + np.array([c[GRAD_MB] for c in costs])
            backward += np.array([c[FIRST_WORKING_MB] for c in costs]) if first else 0.0
        group_of[layers] = len(per_stage[stage])
        per_stage[stage].append(LayerGroup(int(stage), str(kind), int(n), bool(ends), bool(first), tuple(layers),
                                           options, memory, backward, np.array([c[TIME] for c in costs]),
                                           to_buckets(memory, bucket_mb), int(chunk)))
    return group_of, tuple(tuple(groups) for groups in per_stage)
