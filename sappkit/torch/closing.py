"""Closing the loop on a machine at hand: benchmark its device, calibrate, predict a small Llama's step, measure it.

:func:`close_loop` runs, on ``"cpu"`` (one core) or ``"cuda"``:

1. :func:`~sappkit.torch.benchmark_device`: the GEMM sweep fits the matmul
   curve, the copy gives the memory bandwidth, the smallest op eager
   PyTorch's cost per op;
2. :func:`~sappkit.torch.benchmark_collectives` over two local processes
   (gloo on a CPU, NCCL on GPUs): the link data parallelism all-reduces over;
3. :func:`sappkit.calibrate` of ``kernel_us`` alone on the measured steps of
   :data:`TINY`, a Llama so small that its step is the framework's fixed
   cost per op (the *benchmarked* cluster), then of ``kernel_us`` and
   ``mfu`` on those and the :data:`HELD_OUT` steps of the Llama checked, at
   a sequence length none of the configurations runs (the *calibrated*
   cluster: the matmuls' efficiency inside a real step, where the
   benchmark's GEMMs ran alone on warm caches);
4. for each :class:`~sappkit.torch.steps.StepConfig`,
   :func:`sappkit.evaluate_strategy`'s step on both clusters (plain data
   parallelism, the gradients all-reduced after the backward, flash
   attention) against the step :func:`~sappkit.torch.steps.measure_steps`
   measures.

:data:`CONFIGS` are the checked configurations: recompute ``none``,
``selective`` and ``full``, two sequence lengths, two micro-batch sizes,
data parallelism 1 and 2.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..calibration import Calibration, Run, calibrate
from ..hardware import Cluster
from ..layers import KernelConfig, TransformerConfig
from ..layers.units import text_table
from ..models import read_model_config
from ..strategy import Strategy, evaluate_strategy
from .benchmark import DeviceBenchmark, benchmark_device
from .collectives import CollectiveBenchmark, benchmark_collectives
from .steps import LLAMA, StepConfig, llama_keys, measure_steps

__all__ = ["Closing", "close_loop", "predict_step", "llama_model", "CONFIGS", "TINY", "TINY_CONFIGS", "HELD_OUT"]

#: The checked configurations (module docstring).
CONFIGS = tuple(StepConfig(seq, batch, option, dp) for seq, batch, option, dp in (
    (128, 1, "none", 1), (128, 1, "selective", 1), (128, 1, "full", 1), (256, 1, "none", 1),
    (128, 2, "none", 1), (256, 2, "full", 1), (128, 1, "none", 2), (256, 1, "selective", 2),
    (128, 2, "full", 2)))
#: The overhead-bound Llama ``kernel_us`` is calibrated on: 2 layers of hidden 32, a vocabulary of 256.
TINY = {**LLAMA, "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 64,
        "vocab_size": 256, "max_position_embeddings": 32}
#: Its steps: two sequence lengths, one micro-batch.
TINY_CONFIGS = (StepConfig(16), StepConfig(32))
#: The held-out step ``mfu`` is calibrated on (with ``kernel_us``): a sequence length no checked configuration runs.
HELD_OUT = (StepConfig(192),)
#: The kernels transformers' Llama runs: SDPA (flash on a CPU and on GPUs), its RMSNorm, unfused SwiGLU.
LLAMA_KERNELS = KernelConfig(attention="flash", norm="hf", fused_mlp=False)


@dataclass(frozen=True, eq=False)
class Closing:
    """What :func:`close_loop` found: the ``device`` and ``collectives`` benchmarks (None without data
    parallelism), the ``overhead`` calibration (``kernel_us`` on the tiny steps) and the final ``calibration``
    (``kernel_us`` and ``mfu``, the held-out steps too), and ``frame``: one row per configuration (``config``,
    ``seq_length``, ``micro_batch_size``, ``recompute``, ``data_parallel``, ``benchmarked_ms`` and
    ``predicted_ms`` on the two clusters, ``measured_ms``, ``benchmarked_error`` and ``error`` =
    ``predicted / measured - 1``, ``load_1min``: the highest one-minute load average while it ran)."""

    device: DeviceBenchmark
    collectives: CollectiveBenchmark | None
    overhead: Calibration
    calibration: Calibration
    frame: pd.DataFrame = field(repr=False)

    @property
    def cluster(self) -> Cluster:
        """The calibrated cluster the predictions priced on."""
        return self.calibration.cluster

    def describe(self) -> str:
        """The device's fitted values, then predicted against measured per configuration."""
        device, bench = self.cluster.device, self.device.device
        errors = ("benchmarked_error", "error")
        shown = self.frame.assign(**{name: [f"{e:+.1%}" for e in self.frame[name]] for name in errors}).round(
            {"benchmarked_ms": 1, "predicted_ms": 1, "measured_ms": 1, "load_1min": 1})
        link = "" if self.collectives is None else \
            f"; link {self.cluster.intra_node_gbs:.3g} GB/s, {self.cluster.latency_us:.3g} us per ring step"
        return "\n".join([
            f"{device.name}: {device.tflops * 1e3:.1f} GFLOP/s fastest GEMM, mfu "
            f"{bench.mfu:.3f} benchmarked, {device.mfu:.3f} calibrated, matmul_half_gflop "
            f"{device.matmul_half_gflop:.3g}, {device.hbm_gbs:.1f} GB/s copy, kernel_us "
            f"{self.overhead.cluster.device.kernel_us:.1f} on the tiny steps, {device.kernel_us:.1f} calibrated "
            f"(the smallest op took {bench.kernel_us:.1f}){link}",
            text_table(shown.drop(columns=["seq_length", "micro_batch_size", "recompute", "data_parallel"])),
            *(f"{name}: max |error| {self.frame[name].abs().max():.1%}, mean {self.frame[name].abs().mean():.1%}"
              for name in errors)])

    def write(self, path):
        """Write the calibrated cluster as a hardware file."""
        return self.calibration.write(path)


def llama_model(keys: dict, seq_length: int) -> TransformerConfig:
    """The stack a Llama's ``config.json`` keys describe at ``seq_length`` (:func:`sappkit.read_model_config`)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(llama_keys(keys, seq_length)))
        return read_model_config(path, seq_length=seq_length)


def _strategy(config: StepConfig, dtype: str) -> Strategy:
    # plain data parallelism, the flat gradient buffer all-reduced after the backward (measure_steps' step)
    return Strategy(data_parallel=config.data_parallel, micro_batch_size=config.micro_batch_size, zero=0,
                    dtype=dtype, overlap_grad_reduce=False)


def _run(keys: dict, config: StepConfig, dtype: str, step_ms: float) -> Run:
    return Run(config.label, llama_model(keys, config.seq_length), _strategy(config, dtype), config.global_batch,
               step_ms, recompute=config.recompute, kernels=LLAMA_KERNELS)


def predict_step(config: StepConfig, cluster: Cluster, keys: dict = LLAMA, *, dtype: str = "fp32"):
    """:func:`sappkit.evaluate_strategy` of ``config``'s step (the StrategyEvaluation)."""
    run = _run(keys, config, dtype, 1.0)
    return evaluate_strategy(run.model, run.strategy, cluster=cluster, global_batch=run.global_batch,
                             recompute=run.recompute, kernels=run.kernels)


def close_loop(configs=CONFIGS, keys: dict = LLAMA, *, held_out=HELD_OUT, device: str = "cpu", repeats: int = 5,
               warmup: int = 2) -> Closing:
    """Benchmark, calibrate, predict and measure (module docstring)."""
    configs, held_out = _configs(configs), _configs(held_out)
    dtype = "bf16" if device == "cuda" else "fp32"
    bench = benchmark_device(device, repeats=repeats)
    ranks = max(config.data_parallel for config in configs)
    links = benchmark_collectives(ranks, repeats=repeats, device=bench.device) if ranks > 1 else None
    base = Cluster.of(bench.device) if links is None else \
        dataclasses.replace(links.cluster, name=f"measured-{device}-node")
    tiny = measure_steps(TINY_CONFIGS, TINY, device=device, repeats=repeats, warmup=warmup)
    tiny = [_run(TINY, config, dtype, row["step_ms"]) for config, row in zip(TINY_CONFIGS, tiny)]
    overhead = calibrate(tiny, base=base, fit=["kernel_us"], name=f"measured-{device}")
    measured = measure_steps([*held_out, *configs], keys, device=device, repeats=repeats, warmup=warmup)
    held = [_run(keys, config, dtype, row["step_ms"]) for config, row in zip(held_out, measured)]
    calibration = calibrate([*tiny, *held], base=base, fit=["kernel_us", "mfu"], name=f"measured-{device}") \
        if held else overhead
    rows = []
    for config, row in zip(configs, measured[len(held):]):
        benchmarked = predict_step(config, overhead.cluster, keys, dtype=dtype).step_time
        predicted = predict_step(config, calibration.cluster, keys, dtype=dtype).step_time
        rows.append({"config": config.label, **{name: getattr(config, name) for name in (
            "seq_length", "micro_batch_size", "recompute", "data_parallel")}, "benchmarked_ms": benchmarked,
            "predicted_ms": predicted, "measured_ms": row["step_ms"],
            "benchmarked_error": benchmarked / row["step_ms"] - 1, "error": predicted / row["step_ms"] - 1,
            "load_1min": max(row["load_1min"])})
    return Closing(bench, links, overhead, calibration, pd.DataFrame(rows))


def _configs(configs) -> list[StepConfig]:
    return [config if isinstance(config, StepConfig) else StepConfig(**config) for config in configs]
