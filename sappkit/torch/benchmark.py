"""Microbenchmarks that write a hardware file: GEMM sweeps, attention, memory copies and collectives.

:func:`benchmark_device` times square GEMMs and the skinny ones of
transformer layers (bf16 on a GPU, and fp8 where ``torch._scaled_mm`` runs;
fp32 on a CPU), the attention kernel forward and backward
(``scaled_dot_product_attention``), a copy larger than the caches and the
smallest op eager PyTorch runs, then fits the device's matmul curve
(``mfu``, ``matmul_half_gflop``: the presets' curve family) to the GEMMs with
:func:`sappkit.calibrate`. ``tflops`` is the fastest GEMM's rate,
``hbm_gbs`` the copy's and ``kernel_us`` the smallest op's time (eager
PyTorch's dispatch; a GPU's launch). :func:`benchmark_collectives` times
all-reduce, all-gather, reduce-scatter and all-to-all over sizes with
``torch.distributed`` (NCCL on GPUs, gloo on CPUs) in ``world_size``
processes and fits the link's bandwidth and latency by least squares on
:func:`sappkit.hardware.collective_ms`'s form.

**Clocks.** Each time is the median of ``repeats`` after one warm-up. On a
GPU it is the wall clock around the synchronised call. On a CPU it is the
calling thread's CPU time (``time.thread_time``) with one torch thread, the
device priced being one core: other processes on a shared machine then add
little (they still share its caches and memory bus). The CPU sweep takes
seconds.
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from ..calibration import calibrate
from ..hardware import Cluster, DeviceConfig, write

__all__ = ["DeviceBenchmark", "benchmark_device", "time_ms"]

#: GEMM shapes (m, n, k) swept: square ones over sizes, the (tokens, width, hidden) ones of transformer layers, and
#: skinny ones (few rows) that are memory-bound.
GEMM_SHAPES = {"cpu": [(n, n, n) for n in (64, 128, 256, 512, 1024)]
               + [(128, 512, 512), (512, 1536, 512), (256, 512, 1376), (512, 8192, 512), (512, 512, 8192),
                  (8192, 512, 512), (16, 1024, 1024)],
               "cuda": [(n, n, n) for n in (512, 1024, 2048, 4096, 8192)]
               + [(4096, 12288, 4096), (8192, 4096, 14336), (64, 8192, 8192), (8192, 8192, 256)]}


@dataclass(frozen=True, eq=False)
class DeviceBenchmark:
    """What :func:`benchmark_device` measured: ``device`` (the fitted :class:`~sappkit.hardware.DeviceConfig`)
    and ``frame`` (``kind``: ``gemm``, ``attention_fwd``, ``attention_bwd``, ``copy``; ``m``, ``n``, ``k``,
    ``flops``, ``nbytes``, ``dtype``, ``duration_ms``, ``tflops``, ``gbs``)."""

    device: DeviceConfig
    frame: pd.DataFrame = field(repr=False)

    def write(self, path):
        """Write the device as a hardware file, the measurements beside the numbers."""
        notes = {"tflops": "fastest GEMM of sappkit.torch.benchmark_device", "hbm_gbs": "measured copy",
                 "mfu": "fitted to the GEMM sweep", "matmul_half_gflop": "fitted to the GEMM sweep",
                 "kernel_us": "the smallest op of sappkit.torch.benchmark_device"}
        return write(self.device, path, notes=notes, source="sappkit.torch.benchmark_device")


def time_ms(function, *, repeats: int = 5, device: str = "cpu") -> float:
    """The median time of ``function()`` over ``repeats`` calls after one warm-up, ms: on a GPU the wall clock
    around the synchronised call, on a CPU the calling thread's CPU time (``time.thread_time``; the process's,
    ``time.process_time``, when torch runs more than one thread)."""
    clock = time.perf_counter if device == "cuda" else \
        time.thread_time if torch.get_num_threads() == 1 else time.process_time

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    function()
    sync()
    times = []
    for _ in range(repeats):
        start = clock()
        function()
        sync()
        times.append((clock() - start) * 1e3)
    return statistics.median(times)


@contextmanager
def torch_threads(count: int | None):
    """Run the block with ``torch.set_num_threads(count)`` (None: as it is), the count restored after."""
    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def benchmark_device(device: str = "cpu", *, repeats: int = 5, name: str | None = None,
                     threads: int | None = 1) -> DeviceBenchmark:
    """Benchmark ``device`` (``"cpu"`` or ``"cuda"``) and fit its matmul curve (module docstring); a CPU runs
    ``threads`` torch threads (default one: thread CPU time then counts all the work)."""
    with torch_threads(threads if device == "cpu" else None):
        frame = _measurements(device, repeats)
    return DeviceBenchmark(_fitted_device(frame, device, name), frame)


def _measurements(device, repeats) -> pd.DataFrame:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    label = "bf16" if device == "cuda" else "fp32"
    rows = [_gemm(m, n, k, dtype, label, device, repeats) for m, n, k in GEMM_SHAPES[device]]
    if device == "cuda" and hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability() >= (8, 9):
        rows += [_fp8_gemm(n, device, repeats) for n in (2048, 4096, 8192)]
    rows += _attention(dtype, device, repeats)
    rows += [_copy(device, repeats), _smallest_op(device, repeats)]
    return pd.DataFrame(rows)


def _fitted_device(frame: pd.DataFrame, device: str, name: str | None) -> DeviceConfig:
    label = "bf16" if device == "cuda" else "fp32"
    gemms = frame[(frame["kind"] == "gemm") & (frame["dtype"] == label)]
    peak = float(gemms["tflops"].max())
    fp8 = frame.loc[frame["dtype"] == "fp8", "tflops"]
    copy = float(frame.loc[frame["kind"] == "copy", "gbs"].iloc[0])
    smallest = float(frame.loc[frame["kind"] == "smallest_op", "duration_ms"].iloc[0])
    # start the fit where such curves lie: large GEMMs near the fastest, half of it at a MFLOP (CPU)
    # or a GFLOP (GPU)
    base = DeviceConfig(name=name or f"measured-{device}", tflops=peak, mfu=0.9, hbm_gbs=copy,
                        matmul_half_gflop=0.001 if device == "cpu" else 1.0,
                        fp32_tflops=peak if label == "fp32" else None,
                        fp8_tflops=float(fp8.max()) if len(fp8) else None,
                        hbm_gb=_memory_gb(device), kernel_us=smallest * 1e3)
    kernels = gemms.assign(batch=1, collective=None, ranks=1, op="aten::mm",
                           dtype="float" if label == "fp32" else "c10::BFloat16")
    return calibrate(kernels=kernels, base=Cluster.of(base), fit=["mfu", "matmul_half_gflop"],
                     name=base.name).cluster.device


def _gemm(m, n, k, dtype, label, device, repeats) -> dict:
    a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
    ms = time_ms(lambda: torch.mm(a, b), repeats=repeats, device=device)
    flops, nbytes = 2.0 * m * n * k, float(a.element_size() * (m * k + k * n + m * n))
    return {"kind": "gemm", "m": m, "n": n, "k": k, "flops": flops, "nbytes": nbytes, "dtype": label,
            "duration_ms": ms, "tflops": flops / ms / 1e9, "gbs": nbytes / ms / 1e6}


def _fp8_gemm(n, device, repeats) -> dict:
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)
    ms = time_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                 repeats=repeats, device=device)
    flops = 2.0 * n**3
    return {"kind": "gemm", "m": n, "n": n, "k": n, "flops": flops, "nbytes": 4.0 * n * n, "dtype": "fp8",
            "duration_ms": ms, "tflops": flops / ms / 1e9, "gbs": 4.0 * n * n / ms / 1e6}


def _attention(dtype, device, repeats) -> list[dict]:
    batch, heads, seq, dim = (1, 8, 512, 64) if device == "cpu" else (4, 32, 4096, 128)
    q = torch.randn(batch, heads, seq, dim, dtype=dtype, device=device, requires_grad=True)
    flops = 4.0 * batch * heads * seq * seq * dim
    forward = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True),
                      repeats=repeats, device=device)
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    grad = torch.ones_like(out)
    backward = time_ms(lambda: torch.autograd.grad(out, q, grad, retain_graph=True), repeats=repeats,
                       device=device)
    return [{"kind": kind, "m": seq, "n": seq, "k": dim, "flops": work, "nbytes": np.nan, "dtype": str(dtype),
             "duration_ms": ms, "tflops": work / ms / 1e9, "gbs": np.nan}
            for kind, work, ms in (("attention_fwd", flops / 2, forward), ("attention_bwd", flops, backward))]


def _copy(device, repeats) -> dict:
    # 128 MiB each way: beyond a server CPU's last-level cache (tens of MiB), as an optimizer step's state is
    source = torch.empty(2**27 if device == "cpu" else 2**30, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    ms = time_ms(lambda: target.copy_(source), repeats=repeats, device=device)
    nbytes = 2.0 * source.numel()  # read and written
    return _memory_row("copy", nbytes, "u8", ms)


def _smallest_op(device, repeats) -> dict:
    """One add of two one-element tensors: what eager PyTorch costs per op beyond its bytes (a GPU's launch)."""
    x = torch.ones(1, device=device)
    calls = 100
    ms = time_ms(lambda: [torch.add(x, x) for _ in range(calls)], repeats=repeats, device=device) / calls
    return _memory_row("smallest_op", 12.0, "fp32", ms)


def _memory_row(kind, nbytes, dtype, ms) -> dict:
    return {"kind": kind, "m": np.nan, "n": np.nan, "k": np.nan, "flops": 0.0, "nbytes": nbytes, "dtype": dtype,
            "duration_ms": ms, "tflops": 0.0, "gbs": nbytes / ms / 1e6}


def _memory_gb(device) -> float:
    if device == "cuda":
        return torch.cuda.get_device_properties(0).total_memory / 1e9
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
