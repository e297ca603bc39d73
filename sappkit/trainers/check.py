"""Check a trainer config for the traps users hit: each a named finding, one line, with the fix.

:func:`check_config` prices a config read by :func:`sappkit.read_trainer_config`
(per-stage memory, the simulated step) and reports what its trainer's own
rules say (:attr:`TrainerConfig.findings`: layers dropped or added by
integer division, a layout the trainer refuses, an unsupported micro-batch
count, a stage holding only the MTP layer) with what the plan shows:

- ``stage_over_memory``: a stage above the device memory;
- ``stage_average_hides_peak``: the stages fit on average but not each one,
  the mistake of estimators that average over stages;
- ``head_tail_stage_slowest``: the stage holding the embedding or the loss
  holds as many layers as the others and is the slowest by at least half a
  layer (uneven first and last stages);
- ``uneven_stage``: otherwise, the slowest stage is slower than the median
  stage by at least half a layer, and the balancer (``objective="step"``, the
  config's trainer) places the layers with the same recompute for a faster
  simulated step: both stage times, the balanced layer counts and both steps
  (a warning from a 1% gain, a note below it);
- ``uneven_v_stage``: a V-schedule stage (ZB-V, DualPipeV) whose two chunks
  differ in layer count or whose layers are odd;
- ``block_recompute_uniform``: Megatron's ``block`` recompute runs ``N``
  layers per chunk on every stage, and later stages, holding fewer
  micro-batches, would fit with fewer.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..balancer.evaluate import ceiling
from ..balancer.grammar import Policy, policy_options
from ..balancer.optimise import balance
from ..balancer.plan import Plan
from ..columns import BODY, KIND, LAYERS, LIMIT_MB, MEMORY_MB, OPTION, ROLE, STAGE, TIME
from ..errors import InputError
from ..layers.units import format_mb, format_time
from ..pipeline.schedules import V_SHAPED, model_order
from .config import Finding, TrainerConfig

__all__ = ["ConfigCheck", "check_plan_findings", "FINDING_COLUMNS"]

#: Columns of :attr:`ConfigCheck.findings`.
FINDING_COLUMNS = ("finding", "severity", "message", "fix")


@dataclass(frozen=True, eq=False)
class ConfigCheck:
    """A config checked: its findings, its plan and the simulated step.

    Attributes
    ----------
    config : TrainerConfig
    plan : Plan
        The config priced on the layer table (status ``"evaluated"``).
    findings : DataFrame
        ``finding``, ``severity``, ``message``, ``fix``: one row per trap.
    step_time : float
        The simulated step time, in the plan's time unit.
    """

    config: TrainerConfig
    plan: Plan
    findings: pd.DataFrame
    step_time: float

    @property
    def ok(self) -> bool:
        """No finding of severity ``error``."""
        return not (self.findings["severity"] == "error").any()

    def describe(self) -> str:
        """A header, each stage's memory and time, then each finding and its fix (lines within 100 columns)."""
        s, plan = self.config.strategy, self.plan
        unit = plan.time_unit
        lines = [f"{self.config.trainer} config: {s.label}, m={self.config.micro_batches}",
                 f"simulated step {format_time(self.step_time, unit)}, peak "
                 f"{format_mb(plan.stages[MEMORY_MB].max())} of {format_mb(plan.setup.memory_mb)}"]
        for row in plan.stages.itertuples(index=False):
            lines.append(f"stage {getattr(row, STAGE):>2}: {getattr(row, LAYERS):>3} layers, "
                         f"{format_mb(getattr(row, MEMORY_MB)):>9}, time {format_time(getattr(row, TIME), unit)}")
        if self.findings.empty:
            lines.append("no findings")
        for row in self.findings.itertuples(index=False):
            lines += textwrap.wrap(f"{row.severity}: {row.finding}: {row.message}", 100, subsequent_indent="  ")
            lines += textwrap.wrap(f"fix: {row.fix}", 100, initial_indent="  ", subsequent_indent="    ")
        return "\n".join(lines)


def check_plan_findings(config: TrainerConfig, plan: Plan) -> list[Finding]:
    """The findings the priced plan shows (module docstring)."""
    found = _memory_findings(plan, config.trainer)
    found += _head_tail_findings(plan) or _uneven_stage_findings(config, plan)
    found += _v_findings(config)
    if config.trainer == "megatron":
        found += _block_findings(config, plan)
    return found + _lighter_uniform_findings(config, plan)


#: Uniform recompute options lighter than full, tried in order (the first that fits and is faster is named).
_LIGHTER = ("none", "selective")


def _lighter_uniform_findings(config: TrainerConfig, plan: Plan) -> list[Finding]:
    """One recompute option on every layer, where a lighter one on every layer fits too and steps faster."""
    current = set(config.options)
    if len(current) != 1 or not plan.fits:
        return []
    (option,) = current
    step, unit = plan.simulate().step_time, plan.time_unit
    for lighter in (name for name in _LIGHTER if name != option):
        try:
            trial = replace(config, options=(lighter,) * len(config.options)).plan_for(
                plan.setup.layers, memory_mb=plan.setup.memory_mb)
        except InputError:  # the layer table has no such option
            continue
        faster = trial.simulate().step_time
        if trial.fits and faster < step:
            peak, limit = plan.stages[MEMORY_MB].max(), plan.setup.memory_mb
            return [Finding("recompute_more_than_needed", "warning",
                            f"every layer recomputes {option!r}, peaking at {format_mb(peak)} of "
                            f"{format_mb(limit)}; {lighter!r} on every layer fits too (peak "
                            f"{format_mb(trial.stages[MEMORY_MB].max())}) and the simulated step is "
                            f"{1 - faster / step:.0%} faster ({format_time(faster, unit)} against "
                            f"{format_time(step, unit)})",
                            f"set {lighter!r} recompute (sappkit choose finds the fastest per-layer options)")]
    return []


def _memory_findings(plan: Plan, trainer: str) -> list[Finding]:
    memory = plan.stages[MEMORY_MB].to_numpy()
    limit = float(plan.setup.memory_mb)
    over = np.flatnonzero(memory > ceiling(limit))
    if not over.size:
        return []
    worst = int(over[np.argmax(memory[over])])
    found = [Finding("stage_over_memory", "error",
                     f"stage {worst} needs {format_mb(memory[worst])} of {format_mb(limit)} "
                     f"({len(over)} stage(s) over: {', '.join(map(str, over))})",
                     "recompute more on those stages or move layers off them: sappkit balance --trainer "
                     f"{trainer} finds a plan {trainer} can run")]
    if memory.mean() <= limit:
        found.append(Finding("stage_average_hides_peak", "warning",
                             f"the stages average {format_mb(memory.mean())}, within {format_mb(limit)}, but stage "
                             f"{worst} needs {format_mb(memory[worst])}: an estimate averaged over stages says it fits",
                             "judge each stage's peak (sappkit prices every stage), not the average"))
    return found


def _head_tail_findings(plan: Plan) -> list[Finding]:
    setup, stages = plan.setup, plan.stages
    times = stages[TIME].to_numpy()
    layers = stages[LAYERS].to_numpy()
    slowest = int(times.argmax())
    ends = {fixed.stage: fixed.kind for fixed in setup.fixed}
    body = setup.forward + setup.backward
    half_layer = 0.5 * float(body.min()) if body.size else 0.0
    others = np.delete(times, slowest)
    if (slowest not in ends or not others.size or layers[slowest] < np.median(layers)
            or times[slowest] - np.max(others) < half_layer):
        return []
    return [Finding("head_tail_stage_slowest", "warning",
                    f"stage {slowest} holds the {ends[slowest]} and {layers[slowest]} layers, as many as the "
                    f"others: it is the slowest, {format_time(times[slowest] - np.median(times), plan.time_unit)} "
                    "above the median stage",
                    "give it fewer layers (Megatron --decoder-first/last-pipeline-num-layers or the layout; "
                    "torchtitan module_fqns_per_model_part; MindFormers offset): sappkit balance places them")]


def _uneven_stage_findings(config: TrainerConfig, plan: Plan) -> list[Finding]:
    """The slowest stage half a layer above the median, against the balancer's layout with the same recompute."""
    times, unit = plan.stages[TIME].to_numpy(), plan.time_unit
    slowest, median = int(times.argmax()), float(np.median(times))
    body = plan.setup.forward + plan.setup.backward
    if not plan.fits or not body.size or times[slowest] - median < 0.5 * float(body.min()):
        return []
    balanced = _same_recompute_balanced(config, plan)
    if balanced is None:
        return []
    step, faster = plan.simulate().step_time, balanced.simulate().step_time
    said = (f"stage {slowest} holds {plan.stages[LAYERS].iloc[slowest]} layers at {format_time(times[slowest], unit)}"
            f" against {format_time(median, unit)} on the median stage; balanced with the same recompute "
            f"(layers per stage {_counts(balanced.stages[LAYERS].tolist())}), the slowest stage takes "
            f"{format_time(balanced.stages[TIME].max(), unit)} and the simulated step ")
    if faster >= step:  # the config's layout is as good as the balancer's: nothing to move
        return []
    gain = 1 - faster / step
    return [Finding("uneven_stage", "warning" if gain >= UNEVEN_WARNING else "note",
                    said + f"is {gain:.1%} faster ({format_time(faster, unit)} against {format_time(step, unit)})",
                    f"move layers off that stage (Megatron --pipeline-model-parallel-layout; torchtitan "
                    f"module_fqns_per_model_part; MindFormers offset): sappkit balance --objective step --trainer "
                    f"{config.trainer} places them")]


#: A balanced layout's gain from which an uneven stage is a warning rather than a note.
UNEVEN_WARNING = 0.01


def _same_recompute_balanced(config: TrainerConfig, plan: Plan) -> Plan | None:
    """The balancer's placement (``objective="step"``, the config's trainer) of the body layers with the recompute
    option the config runs on each kind; None where a kind runs more than one option or nothing fits."""
    setup, table = plan.setup, plan.setup.layers
    kinds = [kind for kind in table.body_kinds for _ in range(table.count(kind))]
    options, _ = config.options_on(table)
    chosen = {kind: {o for k, o in zip(kinds, options) if k == kind} for kind in table.body_kinds}
    if any(len(options) != 1 for options in chosen.values()):
        return None
    frame = table.frame
    keep = (frame[ROLE] != BODY) | (frame[OPTION] == frame[KIND].map(lambda kind: min(chosen.get(kind, {""}))))
    balanced = balance(table.with_frame(frame[keep].reset_index(drop=True)), stages=setup.stages,
                       micro_batches=setup.micro_batches, memory_mb=setup.memory_mb, chunks=setup.chunks,
                       schedule=setup.schedule, less_memory=setup.less_memory, seq_split=setup.seq_split,
                       seq_params=config.seq_params if setup.seq_split > 1 else None, objective="step",
                       trainer=config.trainer)
    return balanced if balanced.has_plan and balanced.fits else None


def _counts(counts: list[int]) -> str:
    """Layer counts per stage, runs of one count shortened: ``5 x 16`` or ``6, 5, 5, 4``."""
    return f"{counts[0]} x {len(counts)}" if len(set(counts)) == 1 else ", ".join(map(str, counts))


def _v_findings(config: TrainerConfig) -> list[Finding]:
    if config.strategy.schedule not in V_SHAPED:
        return []
    counts = np.array(config.layer_counts)
    uneven = [s for s in range(counts.shape[1]) if counts[0, s] != counts[1, s]]
    if not uneven:
        return []
    s = uneven[0]
    return [Finding("uneven_v_stage", "warning",
                    f"{len(uneven)} stage(s) split their layers unevenly over the V's two chunks, e.g. stage {s}: "
                    f"{counts[0, s]} down + {counts[1, s]} up; ZB-V implementations that halve a stage need an even "
                    "count split equally", "give each stage an even layer count, half per chunk, where the trainer "
                                           "halves stages (ZB-V); sappkit balance --trainer places them")]


def _block_findings(config: TrainerConfig, plan: Plan) -> list[Finding]:
    """Stages that would fit with fewer block-recomputed layers than Megatron's one count gives all."""
    settings = config.settings
    if settings.get("--recompute-method") != "block":
        return []
    n = int(settings.get("--recompute-num-layers", 0))
    counts = np.array(config.layer_counts)
    schedule = config.strategy.schedule
    needed = []
    for stage in range(counts.shape[1]):
        fits_with = n
        for fewer in range(n - 1, -1, -1):
            options = _stage_block(schedule, counts, stage, fewer, n)
            trial = replace(config, options=tuple(options)).plan_for(plan.setup.layers, memory_mb=plan.setup.memory_mb)
            if trial.stages[MEMORY_MB].iloc[stage] > ceiling(trial.stages[LIMIT_MB].iloc[stage]):
                break
            fits_with = fewer
        needed.append(fits_with)
    spare = [s for s, k in enumerate(needed) if k < n]
    if not spare:
        return []
    return [Finding("block_recompute_uniform", "warning",
                    f"--recompute-method block recomputes {n} layer(s) per chunk on every stage; stages "
                    f"{_span(spare)} would fit with {min(needed[s] for s in spare)} to {max(needed[s] for s in spare)}"
                    ": they recompute for nothing", "Megatron takes one count for all stages: lower "
                                                    "--recompute-num-layers and move layers off the first stages "
                                                    "(sappkit balance --trainer megatron)")]


def _stage_block(schedule: str, counts: np.ndarray, stage: int, fewer: int, n: int) -> list[str]:
    """Block-``n`` options with ``stage`` recomputing ``fewer`` layers per chunk instead."""
    everywhere = policy_options(Policy("block", n=n), schedule, counts)
    there = policy_options(Policy("block", n=fewer), schedule, counts)
    stage_of = [s for c, s in model_order(schedule, counts.shape[1], counts.shape[0]) for _ in range(counts[c, s])]
    return [b if s == stage else a for a, b, s in zip(everywhere, there, stage_of)]


def _span(stages: list[int]) -> str:
    return f"{stages[0]}-{stages[-1]}" if len(stages) > 2 and stages == list(range(stages[0], stages[-1] + 1)) else \
        ", ".join(map(str, stages))
