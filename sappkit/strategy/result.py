"""What :func:`sappkit.evaluate_strategy` returns: a priced strategy, its headline and its frames."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import pandas as pd

from ..columns import LIMIT_MB, MEMORY_MB, STAGE
from ..hardware import Cluster
from ..layers import LayerTable
from ..layers.units import format_mb
from .config import Strategy
from .step import IDLE_MS, STEP_COLUMNS

__all__ = ["StrategyEvaluation"]


@dataclass(frozen=True, eq=False)
class StrategyEvaluation:
    """One strategy priced end to end (:func:`sappkit.evaluate_strategy`).

    Attributes
    ----------
    step_time : float
        One training step, ms.
    tokens_per_second : float
        Tokens the whole run trains per second.
    tflops_per_device : float
        Model FLOPs per second per device, TFLOP/s (:func:`sappkit.model_flops`: Megatron-LM's count, causal
        attention halved, recompute not counted).
    mfu : float
        ``tflops_per_device`` over the device's dense peak in the strategy's dtype.
    model_flops : float
        The step's model FLOPs.
    stages : DataFrame
        Per-stage peak memory in the shared schema (``param_mb`` ... ``memory_mb``, ``limit_mb``).
    breakdown : DataFrame
        Per stage, where the step goes (:data:`sappkit.strategy.step.STEP_COLUMNS`); each row adds up to the
        step time.
    plan : Plan or None
        The even or balanced placement (None without a pipeline).
    layers : LayerTable
        The layer table it was priced from, with its per-layer :attr:`~sappkit.LayerTable.breakdown`.
    """

    strategy: Strategy
    cluster: Cluster = field(repr=False)
    global_batch: int
    placement: str
    recompute: tuple[str, ...]
    step_time: float
    tokens_per_second: float
    tflops_per_device: float
    mfu: float
    model_flops: float = field(repr=False)
    stages: pd.DataFrame = field(repr=False)
    breakdown: pd.DataFrame = field(repr=False)
    plan: object = field(repr=False)
    layers: LayerTable = field(repr=False)
    memory_mb: float = field(repr=False)

    @property
    def peak_memory_mb(self) -> float:
        """The highest stage peak, MB."""
        return float(self.stages[MEMORY_MB].max())

    @property
    def fits(self) -> bool:
        """Every stage's peak within the device memory."""
        return bool((self.stages[MEMORY_MB] <= self.stages[LIMIT_MB]).all())

    def step_breakdown(self) -> pd.Series:
        """The step of the stage that finishes last, by column (ms; adds up to ``step_time``)."""
        row = self.breakdown.loc[self.breakdown[IDLE_MS].idxmin()]
        return row[list(STEP_COLUMNS[:-2])]

    def describe(self) -> str:
        """A few lines, each under 100 columns: the strategy, the step and its throughput, memory, the split."""
        parts = self.step_breakdown()
        split = ", ".join(f"{name.removesuffix('_ms').replace('_', ' ')} {value / self.step_time:.1%}"
                          for name, value in parts.items() if value > 0.0005 * self.step_time)
        peak = self.stages.loc[self.stages[MEMORY_MB].idxmax()]
        return "\n".join([
            f"{self.strategy.label} on {self.strategy.devices} x {self.cluster.device.name}, global batch "
            f"{self.global_batch}, {self.strategy.sharding}",
            f"step {self.step_time / 1e3:.3f} s, {self.tokens_per_second:,.0f} tokens/s, "
            f"{self.tflops_per_device:.1f} TFLOP/s per device, MFU {self.mfu:.1%}",
            f"peak memory {format_mb(peak[MEMORY_MB])} on stage {int(peak[STAGE])} of {format_mb(self.memory_mb)}"
            + ("" if self.fits else ", over the limit"),
            f"slowest stage: {split}",
        ])

    def __repr__(self) -> str:
        return (f"StrategyEvaluation({self.strategy.label}: step {self.step_time:.1f} ms, "
                f"{self.tflops_per_device:.1f} TFLOP/s/device, MFU {self.mfu:.1%}, "
                f"peak {self.peak_memory_mb:,.0f} MB{'' if self.fits else ' (over the limit)'})")

    def _repr_html_(self) -> str:
        lines = "".join(f"<li>{html.escape(line)}</li>" for line in self.describe().splitlines())
        table = self.breakdown.round(1).to_html(index=False)
        return f"<div><b>StrategyEvaluation</b><ul>{lines}</ul>{table}</div>"

