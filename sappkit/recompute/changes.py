"""What a recompute choice changes against its baseline, stage by stage: the memory under each, and which layers
moved or changed option.

The chooser minimises time, so among layouts of one time it may hold less (or
more) memory than the baseline: a ``selective`` layer moved to the end of its
stage's warm-up, say, shrinks the working set that layer's backward holds.
Such a choice is no faster, yet the same placement then reads at another
memory; :func:`layout_changes` says where and why.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ..columns import MEMORY_MB, OPTION, STAGE
from ..layers.units import format_mb, layer_ranges
from .pricing import BASELINE_MEMORY_MB, TIME_SAVED, Pricing

__all__ = ["layout_changes", "change_lines", "CHANGE_COLUMNS", "MEMORY_CHANGE_MB", "LAYERS_CHANGED", "CHANGE"]

MEMORY_CHANGE_MB = "memory_change_mb"
LAYERS_CHANGED = "layers_changed"
CHANGE = "change"
#: Columns of :func:`layout_changes`' frame.
CHANGE_COLUMNS = (STAGE, BASELINE_MEMORY_MB, MEMORY_MB, MEMORY_CHANGE_MB, TIME_SAVED, LAYERS_CHANGED, CHANGE)


def layout_changes(pricing: Pricing, layer_options: pd.DataFrame, stages: pd.DataFrame) -> pd.DataFrame:
    """One row per stage where some layer runs otherwise than under the baseline (or offloads).

    ``layer_options`` and ``stages`` are a choice's frames. Columns
    (:data:`CHANGE_COLUMNS`): ``stage``, ``baseline_memory_mb`` and
    ``memory_mb`` (the stage's memory under the baseline and under the
    choice), ``memory_change_mb`` (the choice's less the baseline's),
    ``time_saved``, ``layers_changed`` (the layers' indices as ranges, e.g.
    ``"1, 4"``) and ``change`` in words: ``selective moved from layer 1 to
    layer 4`` when the stage runs the same options on other layers, else
    ``layers 20-24 selective -> none``.

    Examples
    --------
    The bundled Llama-2-70B-class model as ``sappkit balance`` places it at
    58,000 MB, its first stages' first layers selective (MindFormers
    recomputes a stage's first layers): the chooser, as fast either way, runs
    the layer ending the stage's warm-up selective instead, whose backward
    then holds less at the peak.

    >>> from sappkit import Partition, choose_recompute, read_layers_json
    >>> llama = read_layers_json("data/llama2_70b.json")
    >>> part = Partition.from_offsets(llama, stages=16, micro_batches=32, select_recompute=[2, 1, 1, 1] + [0] * 12)
    >>> choice = choose_recompute(llama, part, memory_mb=58000)
    >>> choice.layout_changes()[["stage", "memory_change_mb", "time_saved", "change"]].head(2).round(1)
       stage  memory_change_mb  time_saved                                   change
    0      0            -640.0         0.0  selective moved from layer 1 to layer 4
    1      1            -640.0         0.0  selective moved from layer 5 to layer 9
    """
    baseline = np.asarray(pricing.baseline.options, dtype=object)
    chosen = layer_options[OPTION].to_numpy(object)
    offloaded = layer_options["offloaded_mb"].to_numpy(float) > 0
    changed = (baseline != chosen) | offloaded
    layer, stage_of = layer_options["layer"].to_numpy(), layer_options[STAGE].to_numpy()
    plain = set(pricing.plain.values())
    rows = []
    for row in stages.itertuples(index=False):
        on = changed & (stage_of == row.stage)
        if not on.any():
            continue
        memory, before = getattr(row, MEMORY_MB), getattr(row, BASELINE_MEMORY_MB)
        words = _change_words(layer[on], baseline[on], chosen[on], offloaded[on], plain)
        rows.append((row.stage, before, memory, memory - before, getattr(row, TIME_SAVED), layer_ranges(layer[on]),
                     words))
    return pd.DataFrame(rows, columns=list(CHANGE_COLUMNS))


def change_lines(changes: pd.DataFrame) -> list[str]:
    """:func:`layout_changes` in words: a line saying how many stages change, then one per stage (none without
    changes).

    Examples
    --------
    >>> frame = pd.DataFrame([(1, 56657.1, 56017.1, -640.0, 0.0, "5, 9", "selective moved from layer 5 to layer 9")],
    ...                      columns=CHANGE_COLUMNS)
    >>> print("\\n".join(change_lines(frame)))
    against the baseline, 1 stage changes:
      stage 1: 56,657 MB -> 56,017 MB (-640 MB): selective moved from layer 5 to layer 9
    """
    if changes.empty:
        return []
    count = len(changes)
    lines = [f"against the baseline, {count} stage{' changes' if count == 1 else 's change'}:"]
    for row in changes.itertuples(index=False):
        delta = getattr(row, MEMORY_CHANGE_MB)
        lines.append(f"  stage {row.stage}: {format_mb(getattr(row, BASELINE_MEMORY_MB))} -> "
                     f"{format_mb(getattr(row, MEMORY_MB))} ({'+' if delta >= 0 else '-'}{format_mb(abs(delta))}): "
                     f"{row.change}")
    return lines


def _change_words(layers: np.ndarray, before: np.ndarray, after: np.ndarray, offloaded: np.ndarray,
                  plain: set[str]) -> str:
    """One stage's changed layers in words: options moved between layers, else each option's change."""
    differs = before != after
    parts = []
    if differs.any():
        moved = Counter(before[differs]) == Counter(after[differs])
        if moved and set(before[differs]) - plain:
            for option in dict.fromkeys(before[differs]):
                if option not in plain:
                    parts.append(f"{option} moved from {_layers(layers[differs & (before == option)])} to "
                                 f"{_layers(layers[differs & (after == option)])}")
        else:
            pairs = dict.fromkeys(zip(before[differs], after[differs]))
            parts.extend(f"{_layers(layers[differs & (before == a) & (after == b)])} {a} -> {b}" for a, b in pairs)
    if offloaded.any():
        parts.append(f"{_layers(layers[offloaded])} offload to the host")
    return "; ".join(parts)


def _layers(indices: np.ndarray) -> str:
    """``layer 5`` or ``layers 5-6, 9``."""
    return f"layer{'s' if len(indices) > 1 else ''} {layer_ranges(indices)}"
