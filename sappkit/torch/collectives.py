"""``benchmark_collectives``: all-reduce, all-gather, reduce-scatter and all-to-all over sizes with
``torch.distributed`` (gloo on CPUs, NCCL on GPUs) in ``world_size`` local processes, and the link they imply.

Rank 0 times each collective (median of ``repeats`` after a warm-up, a barrier before each: on GPUs the wall
clock around the synchronised call, on a CPU the process's CPU time, gloo's threads included, so that other
processes on a shared machine add little; one torch thread per rank there); the link's
bandwidth and ring-step latency are the least-squares fit of :func:`sappkit.hardware.collective_ms`'s form
``factor(n) · B / bandwidth + steps(n) · latency`` to those times, both kept positive. gloo on one machine
measures shared-memory copies and its own overheads, not a network.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..hardware import Cluster, DeviceConfig, Link, collective_ms, write

__all__ = ["CollectiveBenchmark", "benchmark_collectives"]

#: The collectives timed.
TIMED = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclass(frozen=True, eq=False)
class CollectiveBenchmark:
    """What :func:`benchmark_collectives` measured: ``cluster`` (one node of ``world_size`` devices on the fitted
    link) and ``frame`` (``collective``, ``nbytes``, ``ranks``, ``duration_ms``, ``predicted_ms``)."""

    cluster: Cluster
    frame: pd.DataFrame = field(repr=False)

    def write(self, path):
        """Write the cluster as a hardware file, the measurement beside the link's numbers."""
        notes = {"intra_node_gbs": "fitted to sappkit.torch.benchmark_collectives",
                 "latency_us": "fitted to sappkit.torch.benchmark_collectives"}
        return write(self.cluster, path, notes=notes, source="sappkit.torch.benchmark_collectives")


def benchmark_collectives(world_size: int = 2, *, backend: str | None = None, sizes_mb=(0.0625, 0.5, 4.0),
                          repeats: int = 5, device: DeviceConfig | None = None) -> CollectiveBenchmark:
    """Time the collectives over ``sizes_mb`` (MiB of fp32 per rank's buffer) and fit the link (module docstring)."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "times.npy"
        mp.spawn(_worker, args=(world_size, backend, tuple(sizes_mb), repeats, str(Path(folder) / "store"), str(out)),
                 nprocs=world_size, join=True)
        times = np.load(out)
    rows = [{"collective": kind, "nbytes": float(size * 2**20), "ranks": world_size, "duration_ms": float(ms)}
            for (kind, size), ms in zip([(k, s) for k in TIMED for s in sizes_mb], times)]
    frame = pd.DataFrame(rows)
    link = _fitted_link(frame)
    frame["predicted_ms"] = [collective_ms(r.collective, r.nbytes, r.ranks, link) for r in frame.itertuples()]
    cluster = Cluster(device=device or DeviceConfig(name="measured-cpu"), devices_per_node=world_size,
                      intra_node_gbs=link.gbs, inter_node_gbs=link.gbs, latency_us=link.latency_us,
                      inter_latency_us=link.latency_us, name=f"measured-{backend}")
    return CollectiveBenchmark(cluster, frame)


def _fitted_link(frame: pd.DataFrame) -> Link:
    """The bandwidth (GB/s) and latency (µs) whose collective_ms best fits the times (least squares, positive)."""
    # each time's part per ms/byte of the bandwidth term and per ms of latency (collective_ms at unit links)
    rows = list(frame.itertuples())
    unit_bytes = np.array([collective_ms(r.collective, r.nbytes, r.ranks, Link(1e-3, 0.0)) for r in rows])
    unit_steps = np.array([collective_ms(r.collective, 1e-300, r.ranks, Link(1e300, 1e3)) for r in rows])
    from scipy.optimize import nnls

    (per_byte, latency), _ = nnls(np.column_stack([unit_bytes, unit_steps]), frame["duration_ms"].to_numpy())
    return Link(gbs=float(1e-3 / per_byte) if per_byte > 0 else 1e6, latency_us=float(latency) * 1e3)


def _worker(rank, world_size, backend, sizes_mb, repeats, store, out):
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world_size)
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)
    times = []
    for kind in TIMED:
        for size in sizes_mb:
            elements = max(world_size, int(size * 2**20 / 4) // world_size * world_size)
            times.append(_timed(kind, elements, world_size, device, repeats))
    if rank == 0:
        np.save(out, np.array(times))
    dist.destroy_process_group()


def _timed(kind, elements, world_size, device, repeats) -> float:
    buffer = torch.ones(elements, device=device)
    shard = torch.empty(elements // world_size, device=device)
    whole = torch.empty(elements, device=device)
    call = {"all_reduce": lambda: dist.all_reduce(buffer),
            "all_gather": lambda: dist.all_gather_into_tensor(whole, shard),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(shard, buffer),
            "all_to_all": lambda: dist.all_to_all_single(whole, buffer)}[kind]
    call()
    clock = time.process_time if device == "cpu" else time.perf_counter
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = clock()
        call()
        if device != "cpu":
            torch.cuda.synchronize()
        times.append((clock() - start) * 1e3)
    return statistics.median(times)
