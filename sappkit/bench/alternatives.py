"""Bench: the one-more-recomputed-layer analysis on the bundled DeepSeek-V3-class model at 16 stages.

The README's target: alternatives in < 100 ms. Measured from the chooser's
per-layer choice near the memory limit: the search with its frames (what the
dashboard calls per step), every plan built too, and the pricing the
analysis does once.
"""

from __future__ import annotations

from ..demo import bundled
from ..layers import read_layers_json
from ..one_more.analysis import RecomputeAnalysis, alternatives
from ..pipeline.costs import even_assignment
from ..recompute.chooser import choose_recompute
from ..recompute.partition import Partition
from . import median_seconds, row

__all__ = ["measure"]

_MODES = ("off", "selective", "full")
_TARGET_MS = 100.0


def measure(quick: bool) -> list[dict]:
    """Median times of the analysis on DeepSeek-V3 (61 layers), 16 stages, 32 micro-batches, 70 000 MB."""
    layers = read_layers_json(bundled("deepseek_v3.json"))
    partition = Partition.from_assignment(even_assignment(layers, stages=16), stages=16, micro_batches=32,
                                          kind_order=layers.body_kinds)
    settings = dict(memory_mb=70_000, modes=_MODES)
    choice = choose_recompute(layers, partition, per_layer=True, **settings)
    analysis = RecomputeAnalysis.from_pricing(choice.pricing)
    found = alternatives(choice, analysis=analysis)
    repeats = 3 if quick else 9
    where = f"deepseek_v3, p=16, m=32, {len(found.frame)} plans"
    return [
        row("alternatives", "search + frames", median_seconds(lambda: alternatives(choice, analysis=analysis),
                                                              repeats=repeats), _TARGET_MS, where),
        row("alternatives", "every plan built", median_seconds(lambda: analysis.alternatives(choice),
                                                               repeats=repeats), _TARGET_MS, where),
        row("alternatives", "pricing (once per strategy)",
            median_seconds(lambda: RecomputeAnalysis(layers, partition, **settings), repeats=repeats), None,
            f"{where}; RecomputeAnalysis(...) prices as choose_recompute does"),
    ]
