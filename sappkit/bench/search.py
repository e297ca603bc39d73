"""The strategy search, whole: every strategy a trainer accepts, pruned, priced, the best balanced.

The targets (README, "Performance"), on 2 cores with the default executor (a
process pool): a Llama-3-70B-class model on 1,024 H100s (global batch 1,024
sequences of 8,192 tokens) under 30 s; 405B-class on 16,384 H100s (Llama 3's
16M-token batch: 2,048 sequences of 8,192) under 60 s; DeepSeek-V3-class on
2,048 H800-class GPUs (an H100 preset; its final batch, 15,360 sequences of
4,096) under 120 s; and a 2-worker Dask ``LocalCluster`` at least 1.6 times
as fast as one worker on the 405B case. Every row's detail gives the
search's counts, the CPU time it spent (the main process and the workers)
and the machine's load average while it ran, since a shared machine's wall
times say little on their own. ``--quick`` runs a Llama-3-8B-class model on
64 devices instead.
"""

from __future__ import annotations

import os
import time

from ..strategy.search import search_strategies
from . import cpu_seconds, row

#: (case, model, devices, global batch, target s).
CASES = (("llama3-70b on 1,024 x h100", "llama3-70b", 1024, 1024, 30.0),
         ("llama3-405b on 16,384 x h100", "llama3-405b", 16384, 2048, 60.0),
         ("deepseek-v3 on 2,048 x h100", "deepseek-v3", 2048, 15360, 120.0))
QUICK = (("llama3-8b on 64 x h100", "llama3-8b", 64, 256, 30.0),)
#: The Dask speed-up the README asks of 2 workers over 1 (405B case).
SPEEDUP = 1.6


def _timed(model: str, devices: int, batch: int, **options):
    load, cpu, start = os.getloadavg()[0], cpu_seconds(), time.perf_counter()
    found = search_strategies(model, devices=devices, global_batch=batch, cluster="dgx-h100", progress=False,
                              **options)
    seconds = time.perf_counter() - start
    counts = found.counts()
    detail = (f"{len(found.frame):,} strategies: {counts['evaluated'] + counts['balanced']:,} priced, "
              f"{counts['balanced']} balanced, {counts['pruned_time']:,} pruned by time, "
              f"{counts['pruned_memory']:,} by memory; CPU {cpu_seconds() - cpu:.1f} s; load {load:.1f}")
    return seconds, detail


def _dask_rows() -> list[dict]:
    """The 405B case on a Dask LocalCluster of 1 and of 2 worker processes (one thread each)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        return [row("search on dask", "405B, 2 workers against 1", float("nan"), None,
                    "needs the [cluster] extra (pip install 'sappkit[cluster]')")]
    _, model, devices, batch, _ = CASES[1]
    seconds = {}
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            seconds[workers], detail = _timed(model, devices, batch, executor=client.get_executor())
    speedup = seconds[1] / seconds[2]
    return [row("search on dask", "405B, 1 worker", seconds[1], None, detail),
            row("search on dask", "405B, 2 workers", seconds[2], 1000 * seconds[1] / SPEEDUP,
                f"{speedup:.2f}x one worker (target {SPEEDUP}x)")]


def measure(quick: bool) -> list[dict]:
    rows = []
    for case, model, devices, batch, target in QUICK if quick else CASES:
        seconds, detail = _timed(model, devices, batch)
        rows.append(row("search_strategies", case, seconds, 1000 * target, detail))
    return rows if quick else rows + _dask_rows()
