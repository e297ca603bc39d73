"""What :func:`sappkit.search_strategies` returns: every strategy with its status, the best, its plan, the front.

The frame (:data:`COLUMNS`), one row per strategy laid out:

- the searched fields (:data:`~.space.DIMENSIONS`, :class:`~sappkit.Strategy`'s field names: the degrees,
  ``zero``, ``sequence_parallel``, ``reshard_after_forward`` (True below ZeRO 3, where
  :class:`~sappkit.Strategy` ignores it), ``tp_comm_overlap`` and ``cp_kind``), ``schedule``,
  ``micro_batches`` and ``label``;
- ``status``: ``balanced`` (the cheap pass and the balanced pass priced it),
  ``evaluated`` (the cheap pass priced it), ``infeasible`` (its even
  placement fits under no recompute option), ``pruned_time`` (its bound
  shows it cannot be among the fastest even placements), ``pruned_memory``
  (no placement and recompute fits the device, or no even placement does),
  ``rejected`` (it breaks a trainer's rule); ``reason`` says why in numbers
  and ``rule`` names the rule a rejected one breaks;
- where priced: ``placement`` (``even`` or ``balanced``), ``recompute`` (the
  option, or layers per option), ``step_ms``, ``tokens_per_s_per_device``,
  ``tflops_per_device`` (model TFLOP/s per device, as the Megatron-LM and
  Llama 3 reports count them), ``mfu``, ``peak_memory_mb``,
  ``headroom_mb`` (the device's memory left), ``bubble_fraction`` (the step's
  idle share, averaged over the stages), ``even_step_ms`` (the cheap pass);
- for every accepted strategy its bounds: ``memory_bound_mb`` and
  ``time_bound_ms`` (no placement or recompute does better) and
  ``even_bound_ms`` (the even placement's, under its fastest option that may
  fit).
"""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..._check import check_int
from ...errors import InputError
from ...layers import LayerTable
from ...layers.units import format_mb
from ..bands import BAND_COLUMNS, robust_index
from ..config import Strategy
from .explain import Comparison, PricedStrategy, ordinal, price_at, price_cheapest, price_placed, why_ranked
from .labels import parse_strategy
from .space import DIMENSIONS, MICRO_BATCHES, REASON, RULE
from .tasks import BALANCED_CHUNKS, STRATEGY_FIELDS, Setting, balanced_plan, strategy_of

__all__ = ["StrategySearch", "COLUMNS", "STATUSES", "LIMITS", "SHOWN"]

#: The statuses of a row, best first (module docstring).
STATUSES = ("balanced", "evaluated", "infeasible", "pruned_time", "pruned_memory", "rejected")
STEP_MS, TOKENS, TFLOPS, MFU, PEAK_MB = "step_ms", "tokens_per_s_per_device", "tflops_per_device", "mfu", \
    "peak_memory_mb"
#: The frame's columns, in order (module docstring).
COLUMNS = (*DIMENSIONS, "schedule", MICRO_BATCHES, "label", "status", REASON, RULE, "placement", "recompute",
           STEP_MS, TOKENS, TFLOPS, MFU, PEAK_MB, "headroom_mb", "bubble_fraction", "even_step_ms",
           "memory_bound_mb", "time_bound_ms", "even_bound_ms", *BAND_COLUMNS)
#: The columns a table of strategies shows (fits 100 columns with the label).
SHOWN = ("rank", "label", "status", STEP_MS, TOKENS, TFLOPS, MFU, PEAK_MB, "recompute")
#: What the model behind every number leaves out.
LIMITS = ("stragglers and failures (every device runs at its preset's speed)",
          "network contention between collectives that run at once (each gets its link to itself)",
          "kernels the performance model does not know (fused or custom ops are priced as their parts)")


@dataclass(frozen=True, eq=False)
class StrategySearch:
    """Every strategy of a search (:attr:`frame`), the best one, its balanced plan and the Pareto front.

    Attributes
    ----------
    frame : DataFrame
        One row per strategy (:data:`COLUMNS`, module docstring), the fastest first.
    devices, global_batch, memory_mb, top, seconds
        The search's device count, global batch, memory limit (MB), how many of the fastest cheap passes it
        balanced, and its wall time (s).
    threshold_ms : float
        The ``top``-th fastest cheap pass: every strategy not priced has an even-placement bound at or above it.
    """

    frame: pd.DataFrame
    devices: int
    global_batch: int
    memory_mb: float
    top: int
    seconds: float
    threshold_ms: float
    setting: Setting = field(repr=False)
    shapes: dict = field(repr=False)
    """Shape index -> its compiled layer table (:class:`~.shapes.PricedShape`)."""
    shape_of: pd.Series = field(repr=False)
    """Row index label -> its shape index (accepted rows)."""
    baseline: PricedStrategy | None = None
    """The user's own config priced first (``search_strategies(..., baseline=)``), else None."""
    _plans: dict = field(default_factory=dict, repr=False)
    _priced: dict = field(default_factory=dict, repr=False)

    @property
    def best(self) -> pd.Series | None:
        """The fastest priced strategy's row (None when nothing fits)."""
        priced = self.frame[np.isfinite(self.frame[STEP_MS].to_numpy(dtype=float))]
        return None if priced.empty else priced.iloc[0]

    def strategy(self, row=None) -> Strategy:
        """The :class:`~sappkit.Strategy` of a row (its index label in :attr:`frame`; default the best)."""
        row = self._row(row)
        return strategy_of((row.name, *(row[key] for key in STRATEGY_FIELDS)), self.setting.dtype,
                           self.setting.fp8_recipe)

    def plan(self, row=None, *, trainer: str | None = None):
        """The balanced :class:`~sappkit.Plan` of a row (default the best): the balancer's step objective with the
        per-layer recompute choice, as the balanced pass priced it; a row without a pipeline has none (raises).
        With ``trainer`` (megatron, torchtitan, mindformers, hyperparallel), the fastest plan that trainer's config
        states, with its ``constraint_cost`` against the balanced pass's (``balance(..., trainer=...)``)."""
        row = self._row(row)
        if row["pipeline_parallel"] == 1:
            raise InputError(f"row {row.name} runs no pipeline (pipeline_parallel=1): there is no plan to balance")
        if (row.name, trainer) not in self._plans:
            self._plans[row.name, trainer] = balanced_plan(self.setting, self.strategy(row.name),
                                                           self.layers(row.name), trainer)
        return self._plans[row.name, trainer]

    def layers(self, row=None) -> LayerTable:
        """The layer table a row's strategy is priced on (default the best's): what
        :func:`~sappkit.check_config` or :func:`~sappkit.read_trainer_config` price its exported config on."""
        row = self._row(row)
        if row.name not in self.shape_of:
            raise InputError(f"row {row.name} was rejected ({row['reason']}): it has no layer table")
        return self.shapes[self.shape_of[row.name]].compiled.table(self.strategy(row.name).parallel,
                                                                   self.setting.cluster)

    def priced(self, row=None) -> PricedStrategy:
        """A row priced again as the search priced it (default the best), with its step's terms and stage memory
        (:class:`~.explain.PricedStrategy`); a row the search did not price raises (:meth:`why` says why)."""
        row = self._row(row)
        if not np.isfinite(float(row[STEP_MS])):
            raise InputError(f"row {row.name} ({row['label']}) is {row['status']}, not priced: {self.why(row.name)}")
        if row.name not in self._priced:
            balanced = row["placement"] == "balanced"
            self._priced[row.name] = price_placed(
                self.setting, self.strategy(row.name), self.layers(row.name), label=row["label"],
                placement=row["placement"], recompute=row["recompute"],
                plan=self.plan(row.name) if balanced else None)
        return self._priced[row.name]

    def step_terms(self, row=None) -> pd.Series:
        """Where a row's step goes (default the best's), ms (:data:`~.explain.TERMS`): they add up to its step."""
        return self.priced(row).terms

    def compare(self, a, b=None, *, recompute: str | None = None) -> Comparison:
        """Two strategies side by side, term by term (:class:`~.explain.Comparison`). Each is a row's index
        label, a strategy label (``"t8 p16 v2"``, :func:`~.labels.parse_strategy`) or a
        :class:`~sappkit.Strategy`; ``b`` defaults to the best. A strategy the search did not price is priced
        as its cheap pass would be. With ``recompute`` (an option :func:`~sappkit.strategy.evaluate_strategy`
        takes, ``selective_op`` among them), each one given as a label or a Strategy is priced on its even
        placement with every layer on that option instead, whether or not it fits (the comparison says): a
        published run at its own recompute. Rows given by index keep the search's pricing."""
        return Comparison(self._priced_of(a, "a", recompute), self._priced_of(b, "b", recompute))

    def against_baseline(self) -> Comparison:
        """The baseline (``a``) against the best (``b``); raises without a baseline."""
        if self.baseline is None:
            raise InputError("the search has no baseline: pass search_strategies(..., baseline=config)")
        return Comparison(self.baseline, self.priced())

    def why(self, row) -> str:
        """Why a row stands where it does: the rule that rejected it, the bound and the threshold that pruned
        it, or its rank and what separates it from the best."""
        row = self._row(row)
        status = row["status"]
        if status == "rejected":
            return f"{row['label']}: rejected by the {row[RULE]!r} rule: {row[REASON]}"
        if status == "pruned_time":
            return (f"{row['label']}: pruned on time: its even placement needs at least {row['even_bound_ms']:,.1f} "
                    f"ms (any placement {row['time_bound_ms']:,.1f} ms), not below the threshold "
                    f"{self.threshold_ms:,.1f} ms, the {ordinal(self.top)} fastest cheap pass")
        if status in ("pruned_memory", "infeasible"):
            return f"{row['label']}: {status.replace('_', ' ')}: {row[REASON]}"
        priced = int(np.isfinite(self.frame[STEP_MS].to_numpy(dtype=float)).sum())
        tied = int((self.frame["rank"] == row["rank"]).sum()) - 1
        return why_ranked(row, self.best, self.compare(self.best.name, row.name), priced, tied)

    def robust(self) -> pd.Series | None:
        """The priced row whose worst case over its error band (``step_high_ms``) is best (None when nothing
        fits)."""
        index = robust_index(self.frame)
        return None if index is None else self.frame.loc[index]

    def pareto(self) -> pd.DataFrame:
        """The priced strategies no other beats on both throughput and memory headroom, the fastest first."""
        priced = self.frame[np.isfinite(self.frame[STEP_MS].to_numpy(dtype=float))]
        ranked = priced.sort_values([TOKENS, "headroom_mb"], ascending=False, kind="stable")
        headroom = ranked["headroom_mb"].to_numpy()
        # a row stays when every faster row leaves less headroom than it does
        faster = np.r_[-np.inf, np.maximum.accumulate(headroom)[:-1]]
        return ranked[headroom > faster]

    def table(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` fastest priced strategies with the columns worth reading (:data:`SHOWN`); a rank that
        strategies share (equal steps to the microsecond) reads ``3=``."""
        n = check_int("n", n, minimum=1)
        priced = self.frame[np.isfinite(self.frame[STEP_MS].to_numpy(dtype=float))]
        shown = priced.head(n)[list(SHOWN)].copy()
        shared = priced["rank"].duplicated(keep=False).reindex(shown.index)
        shown["rank"] = [f"{rank}=" if tie else f"{rank}" for rank, tie in zip(shown["rank"], shared)]
        return shown

    def counts(self) -> pd.Series:
        """Strategies per status, in :data:`STATUSES` order."""
        return self.frame["status"].value_counts().reindex(list(STATUSES), fill_value=0)

    def limits(self) -> list[str]:
        """What the answer leaves out: the model's blind spots and the search's own reach, in numbers."""
        lines = [f"the model ignores {limit}" for limit in LIMITS]
        best = self.best
        if best is not None:
            balanced = int((self.frame["status"] == "balanced").sum())
            unbalanced = self.frame[self.frame["status"].isin(("evaluated", "infeasible", "pruned_time"))]
            could = int((unbalanced["time_bound_ms"] < best[STEP_MS]).sum())
            which = (f"the {balanced} with a pipeline among the {self.top} fastest even placements were balanced"
                     if balanced else f"none of the {self.top} fastest even placements runs a pipeline to balance")
            lines.append(f"{which}; {could:,} strategies not balanced have a bound below the best step, so "
                         f"balancing them (a larger balance_top) might beat it")
            many = int(((self.frame["status"] == "evaluated") & (self.frame["virtual_stages"] > BALANCED_CHUNKS)).sum())
            if many:
                lines.append(f"{many:,} evaluated strategies of more than {BALANCED_CHUNKS} chunks keep their even "
                             f"placement: the balanced pass balances up to {BALANCED_CHUNKS} (the balancer's exact "
                             f"search grows steeply with chunks)")
        return lines

    def why_nothing_ranks(self) -> str:
        """Why no strategy is ranked, one line: each trainer rule that rejected strategies, with how many
        and its first reason, when none passed the rules; else what the memory pruning and pricing left."""
        frame = self.frame
        accepted = frame[RULE].isna()
        if accepted.any():
            return (f"no strategy fits the device: all {int(accepted.sum()):,} the trainers accept need more "
                    f"than {format_mb(self.memory_mb)}")
        rules = frame.groupby(RULE, sort=False)[REASON].agg(["size", "first"]).sort_values("size", ascending=False)
        said = "; ".join(f"{rule} {row['size']:,} (e.g. {row['first']})" for rule, row in rules.iterrows())
        return f"no strategy is accepted: the trainers' rules rejected all {len(frame):,}: {said}"

    def describe(self) -> str:
        """A few lines, each under 100 columns: what was searched, how it was pruned, the best, the limits (the
        wall time is :attr:`seconds`, left out so that the text is the same on every run)."""
        limits = [textwrap.fill(line, 100, initial_indent="- ", subsequent_indent="  ") for line in self.limits()]
        return "\n".join(self._summary() + limits)

    def _summary(self) -> list[str]:
        counts = self.counts()
        lines = [f"{len(self.frame):,} strategies on {self.devices:,} devices, global batch {self.global_batch:,}, "
                 f"memory {format_mb(self.memory_mb)}",
                 ", ".join(f"{counts[s]:,} {s.replace('_', ' ')}" for s in STATUSES)]
        best = self.best
        if best is None:
            return lines + [textwrap.fill(self.why_nothing_ranks(), 100, subsequent_indent="  ")]
        return lines + [f"best: {best['label']}",
                        f"  step {best[STEP_MS]:,.0f} ms, {best[TOKENS]:,.0f} tokens/s/device, "
                        f"{best[TFLOPS]:.0f} TFLOP/s/device, MFU {best[MFU]:.1%}, peak {format_mb(best[PEAK_MB])}"]

    def __repr__(self) -> str:
        best = self.best
        head = "no strategy fits" if best is None else f"best {best['label']}: {best[STEP_MS]:,.0f} ms"
        return f"StrategySearch({len(self.frame):,} strategies, {head})"

    def _repr_html_(self) -> str:
        head, *rest = self._summary()
        items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in rest + self.limits())
        table = self.table().round(3).to_html()
        return f"<div><b>StrategySearch</b>: {html.escape(head)}<ul>{items}</ul>{table}</div>"

    def _priced_of(self, which, name: str, recompute: str | None) -> PricedStrategy:
        if which is None:
            return self.priced()
        if isinstance(which, str):
            which = parse_strategy(which, devices=self.devices, dtype=self.setting.dtype,
                                   fp8_recipe=self.setting.fp8_recipe)
        if not isinstance(which, Strategy):
            return self.priced(which)
        rows = self.frame.index[self.frame["label"] == which.label]
        if recompute is None and len(rows) and np.isfinite(float(self.frame.at[rows[0], STEP_MS])):
            return self.priced(rows[0])
        if which.devices != self.devices:
            raise InputError(f"{name} runs on {which.devices} devices ({which.label}); the search ran on "
                             f"{self.devices}")
        return price_cheapest(self.setting, which) if recompute is None else price_at(self.setting, which,
                                                                                       recompute)

    def _row(self, row) -> pd.Series:
        if row is None:
            best = self.best
            if best is None:
                raise InputError("no strategy fits the device: there is no best row")
            return best
        if row not in self.frame.index:
            raise InputError(f"row must be an index label of the search's frame; got {row!r}")
        return self.frame.loc[row]
