"""Pricing one strategy end to end: the layer table, the even placement, the simulated step.

The targets (docs/performance.md) are of CPU time, since a loaded machine's wall time measures its load:
under 20 ms per strategy with its shape's layer table compiled already (``warm``: every strategy of a shape
the search prices after its first), so that the search prices thousands, and under 50 ms with it compiled
(``cold``). The rows price a Llama-3-70B-class model on 1,024 H100s
(t8 p4 v5 dp32, interleaved, global batch 1,024 x 8,192 tokens): ``cold``
compiles its layer table first (a new shape), ``warm`` reuses the compiled
shape (what the search does for every strategy of a shape after its first);
``sappkit validate`` times every published run once.
"""

from __future__ import annotations

from ..models import get
from ..strategy import Strategy, compiled, evaluate_strategy
from ..strategy.validation import validate
from . import median_seconds, row

#: Target per strategy, ms of CPU: its shape's layer table compiled already (warm), and compiled first (cold).
TARGET_MS, TARGET_COLD_MS = 20.0, 50.0
_STRATEGY = Strategy(tensor_parallel=8, pipeline_parallel=4, virtual_stages=5, data_parallel=32,
                     schedule="interleaved")


def _price():
    return evaluate_strategy(get("llama3-70b"), _STRATEGY, cluster="dgx-h100", global_batch=1024,
                             recompute="selective")


def _cold():
    compiled.clear_cache()
    return _price()


def measure(quick: bool) -> list[dict]:
    repeats = 3 if quick else 15
    case = f"llama3-70b {_STRATEGY.label} on 1024 x h100"
    rows = []
    for label, function, target, detail in (("warm", _price, TARGET_MS, "compiled shape reused"),
                                            ("cold", _cold, TARGET_COLD_MS, "layer table compiled")):
        seconds = median_seconds(function, repeats=repeats)
        rows.append(row("evaluate_strategy", f"{label}: {case}", seconds, target, detail))
    if not quick:
        runs = validate().frame
        seconds = median_seconds(validate, repeats=3)
        rows.append(row("validate", f"{len(runs)} published runs", seconds, None, "sappkit validate, all rows"))
    return rows
