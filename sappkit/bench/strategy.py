"""Pricing one strategy end to end: the layer table, the even placement, the simulated step.

The target (README, "Performance") is under 20 ms per strategy, so that the strategy search
prices thousands. The rows price a Llama-3-70B-class model on 1,024 H100s
(t8 p4 v5 dp32, interleaved, global batch 1,024 x 8,192 tokens): ``cold``
compiles its layer table first (a new shape), ``warm`` reuses the compiled
shape (what the search does for every strategy of a shape after its first);
``sappkit validate`` times every published run once.
"""

from __future__ import annotations

import statistics
import time

from ..models import get
from ..strategy import Strategy, compiled, evaluate_strategy
from ..strategy.validation import validate
from . import median_seconds, row

#: Target per strategy, ms.
TARGET_MS = 20.0
_STRATEGY = Strategy(tensor_parallel=8, pipeline_parallel=4, virtual_stages=5, data_parallel=32,
                     schedule="interleaved")


def _price():
    return evaluate_strategy(get("llama3-70b"), _STRATEGY, cluster="dgx-h100", global_batch=1024,
                             recompute="selective")


def _cold():
    compiled.clear_cache()
    return _price()


def _cpu_ms(function, repeats: int) -> float:
    """Median CPU time of ``function()``, ms: what the call costs when other work shares the machine."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return 1000 * statistics.median(times)


def measure(quick: bool) -> list[dict]:
    repeats = 3 if quick else 15
    case = f"llama3-70b {_STRATEGY.label} on 1024 x h100"
    rows = []
    for label, function, detail in (("warm", _price, "compiled shape reused"), ("cold", _cold, "layer table compiled")):
        seconds = median_seconds(function, repeats=repeats)
        rows.append(row("evaluate_strategy", f"{label}: {case}", seconds, TARGET_MS,
                        f"{detail}; CPU {_cpu_ms(function, repeats):.1f} ms"))
    if not quick:
        runs = validate().frame
        seconds = median_seconds(validate, repeats=3)
        rows.append(row("validate", f"{len(runs)} published runs", seconds, None, "sappkit validate, all rows"))
    return rows
