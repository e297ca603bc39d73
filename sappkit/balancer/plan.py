"""A balancer plan: where the body layers go, under which recompute, and what that costs.

:class:`Plan` is what :func:`sappkit.balance` returns and what :func:`plan_from_offsets` builds from a
hand-written MindFormers config. Its frames are computed from the placement alone (``evaluate``), so a solved
plan and an evaluated config are judged the same way.

MindFormers offsets (:meth:`Plan.offsets`): cell ``(c, s)`` holds ``L // (p v) + offset[c][s]`` body layers;
``recompute`` counts its ``full`` layers, ``select_recompute`` its ``selective + both + full`` layers and
``select_comm_recompute`` its ``comm + both + full`` layers, applied to the cell's *first* layers (so a cell
cannot hold ``selective`` and ``comm`` layers without the overlap running ``both``). Lists per stage, per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from .._files import output_path, write_file, write_text
from ..columns import CHUNK, KIND, LAYERS, LIMIT_MB, MEMORY_MB, OPTION, SAPP_OPTIONS, STAGE, TIME
from ..errors import InputError
from ..pipeline.schedules import check_one_copy, one_stage_allowed
from ..layers.units import chunks_text, format_mb, format_time, html_summary, with_time_unit, wrap_text
from ..recompute.partition import Partition
from .evaluate import assignment_frame, ceiling, counts_from_assignment, evaluate
from .mindformers_yaml import check_scheduler, pipeline_sections, sections_yaml
from .setup import BalanceSetup, make_setup
from .ilp.solver import Status
from .step.steptime import step_timer

__all__ = ["Plan", "ConstraintCost", "plan_from_offsets", "plan_from_lists", "OFFSET_KEYS"]

#: The keys of :meth:`Plan.offsets`, MindFormers' names.
OFFSET_KEYS = ("offset", "recompute", "select_recompute", "select_comm_recompute")


@dataclass(frozen=True)
class ConstraintCost:
    """What planning within a trainer's grammar costs against the unconstrained plan (``balance(trainer=...)``).

    ``unconstrained`` and ``constrained`` are the two plans' objectives in :attr:`time_unit`; :attr:`time` is
    their difference, never negative (the grammar's plans are plans the unconstrained balancer may choose).
    """

    trainer: str
    policy: str
    """The recompute policy the trainer runs (``uniform full``, ``block 3``, ``every 2``, ``lists``)."""
    unconstrained: float
    constrained: float
    time_unit: str
    objective: str = "step"
    """What the two are values of: ``step`` (the simulated step) or ``sapp`` (SAPP's per-micro-batch proxy)."""

    @property
    def time(self) -> float:
        """The constraint's cost in :attr:`time_unit` (``ms`` for the bundled tables)."""
        return max(0.0, self.constrained - self.unconstrained)

    @property
    def percent(self) -> float:  # the cost in percent of the unconstrained objective
        return 100.0 * self.time / self.unconstrained if self.unconstrained else 0.0

    def describe(self) -> str:
        """One line: ``megatron (block 2) costs 12.3 ms (1.1%) of the simulated step vs the unconstrained plan``
        (or of SAPP's proxy, the slowest stage's time per micro-batch, for ``objective="sapp"``)."""
        what = "of the simulated step" if self.objective == "step" else "of SAPP's proxy"
        return (f"{self.trainer} ({self.policy}) costs {format_time(self.time, self.time_unit)} "
                f"({self.percent:.1f}%) {what} vs the unconstrained plan")


@dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
    """A placement of the body layers with its per-stage costs and how it was found.

    Attributes
    ----------
    assignment : DataFrame
        ``kind``, ``chunk``, ``stage``, ``option``, ``layers`` (> 0); cells in
        model order, a cell's kinds in model order, most recomputed first.
    stages : DataFrame
        The shared memory schema (``param_mb``, ``activation_mb``,
        ``overhead_mb``, ``working_mb``, ``const_mb``, ``memory_mb``,
        ``limit_mb``) plus ``layers``, ``forward_time``, ``backward_time``,
        ``recompute_time`` (per micro-batch over the stage's chunks, head and
        tail included) and ``time``, the stage time: ``forward_time +
        backward_time`` (docs/design.md "Time and the objectives"; the
        ``sapp`` objective's stage term is SAPP's ``max_c F + max_c B``);
        times in :attr:`time_unit`, which the frame carries in
        ``attrs["time_unit"]``.
    objective : float or None
        The plan's value of ``objective_name`` (None without a plan):
        SAPP's pipeline balancer's objective for ``"sapp"``, the simulated step time for
        ``"step"``; a time in :attr:`time_unit`.
    objective_name : {"sapp", "step"}
    status : {"optimal", "feasible", "time_limit", "infeasible", "failed", "evaluated"}
        How the plan was found: ``"optimal"`` proven; ``"feasible"`` a plan
        that fits from a search that proves no optimum (``objective="step"``'s
        local search with several chunks, or its exact search past its budgets;
        ``gap`` to its ``lower_bound``); ``"time_limit"`` a solver's incumbent;
        ``"evaluated"`` for :func:`plan_from_offsets`.
    gap : float or None
        Relative gap to the proven bound (0 when optimal, None when unknown).
    lower_bound : float or None
        For ``objective="step"``: a proven lower bound on the simulated step
        time of any placement that fits (:mod:`sappkit.balancer.step.proof`
        with one chunk, :mod:`sappkit.balancer.step.bound` with more).
    solve_seconds : float
    method : str
        What found the plan (``"exact search"``, ``"ilp (highs)"``; for
        ``objective="step"`` the start and the changes, e.g. ``"even plan
        (selective), then 12 moves and 3 swaps by local search; 2 random kicks
        helped"``, or with one chunk the descent and the proof).
    step_time : float or None
        The simulated step time of the placement the frames show
        (:meth:`simulate`'s, without transfer time; for an infeasible solve
        its least-memory placement), None without one. For ``objective="step"``
        the balancer's own value; otherwise simulated the first time it is
        read (here, by a sweep or a comparison, or by the notebook display)
        and kept, never during :func:`sappkit.balance`, whose ``sapp``
        objective is SAPP's formula: a solve costs no simulation.
    memory_needed_mb, binding_stage
        For an infeasible plan: the smallest ``memory_mb`` at which a plan
        exists, and the stage whose memory sets it (``assignment`` and
        ``stages`` then show that least-memory placement).
    notes : tuple of str
        What the balancer changed or did not apply (SeqPipe, recompute consistency).
    message : str
        Why a solve is not optimal, in words.
    constraint_cost : ConstraintCost or None
        For ``balance(..., trainer=...)``: what the trainer's grammar costs
        against the unconstrained plan.
    """

    assignment: pd.DataFrame
    stages: pd.DataFrame
    objective: float | None
    objective_name: str
    status: Status | str
    gap: float | None
    solve_seconds: float
    method: str
    lower_bound: float | None = None
    memory_needed_mb: float | None = None
    binding_stage: int | None = None
    notes: tuple[str, ...] = ()
    message: str = ""
    constraint_cost: ConstraintCost | None = None
    setup: BalanceSetup = field(repr=False)
    counts: np.ndarray | None = field(default=None, repr=False)
    _step_time: float | None = field(default=None, repr=False)  # the balancer's, where it simulated the plan

    @cached_property
    def step_time(self) -> float | None:
        """The simulated step time of the placement (class docstring), simulated on first read and kept."""
        if self.counts is None:
            return None
        return self._step_time if self._step_time is not None else step_timer(self.setup).time(self.counts)

    @property
    def has_plan(self) -> bool:
        """True when the plan places the layers within the limit (not infeasible or failed)."""
        return self.status in ("optimal", "feasible", "time_limit") or (self.status == "evaluated" and self.fits)

    @property
    def time_unit(self) -> str:
        """The unit of every time of the plan: its layer table's (:attr:`sappkit.LayerTable.time_unit`)."""
        return self.setup.layers.time_unit

    @property
    def fits(self) -> bool:
        """Every stage's memory within ``limit_mb``."""
        if self.stages.empty:
            return False
        return bool((self.stages[MEMORY_MB] <= ceiling(self.stages[LIMIT_MB])).all())

    def __repr__(self) -> str:
        return f"<Plan {self.headline()}>"

    def _repr_html_(self) -> str:
        stages = self.stages[[c for c in (STAGE, LAYERS, MEMORY_MB, LIMIT_MB, TIME) if c in self.stages]]
        simulated = [] if self.step_time is None else [
            f"simulated step time {format_time(self.step_time, self.time_unit)}"]
        return html_summary([self.headline(), *simulated, *(f"note: {note}" for note in self.notes)], stages,
                            self.time_unit)

    def headline(self) -> str:
        """One line: the pipeline, the limit, the status and the objective (and what an infeasible plan needs)."""
        return self.describe(stages=False)

    def describe(self, *, stages: bool = True) -> str:
        """A header line (for ``objective="step"`` with the gap to the proven lower bound), then (``stages``) how a
        solved plan was found (the route; for ``step`` the start and the changes), one line per stage: layers
        per chunk and option, memory and time, and the notes; wrapped at 100 columns."""
        setup = self.setup
        shape = (f"{setup.schedule}: p={setup.stages}, v={setup.chunks}, m={setup.micro_batches}"
                 + (f" x {setup.seq_split} slices" if setup.seq_split > 1 else ""))
        unit = self.time_unit
        value = ("no plan" if self.objective is None else
                 f"{self.objective_name} objective {format_time(self.objective, unit)}")
        head = f"{shape}, limit {format_mb(setup.memory_mb)}: {self.status}, {value}"
        if self.memory_needed_mb is not None:
            head += f"; needs {format_mb(self.memory_needed_mb)} (stage {self.binding_stage} binds)"
        if self.lower_bound is not None and self.gap is not None:
            head += (f" (simulated step time; proven lower bound {format_time(self.lower_bound, unit)}, "
                     f"gap {self.gap:.1%})")
        if not stages:
            return head
        lines = [head]
        if self.method and self.status in ("optimal", "feasible", "time_limit"):
            lines.append(f"found by: {self.method}")
        several = len(setup.kinds) > 1
        for stage in self.stages.itertuples(index=False):
            rows = self.assignment[self.assignment[STAGE] == stage.stage]
            parts = chunks_text([", ".join(f"{f'{r.kind} ' if several else ''}{r.option} x{r.layers}"
                                           for r in cell.itertuples(index=False)) for _, cell in rows.groupby(CHUNK)])
            lines.append(f"stage {stage.stage:>2}: {format_mb(getattr(stage, MEMORY_MB)):>9}, "
                         f"time {format_time(getattr(stage, TIME), unit)}  {parts}")
        if self.constraint_cost is not None:
            lines.append(f"trainer: {self.constraint_cost.describe()}")
        lines.extend(f"note: {note}" for note in self.notes)
        return wrap_text("\n".join(lines))

    # ------------------------------------------------------------ exports

    def offsets(self, *, strict: bool = True) -> dict[str, list]:
        """MindFormers ``offset`` and cumulative recompute counts (module docstring).

        Raises an :class:`InputError` when the counts would configure other
        options than the plan runs (``strict=False`` returns them anyway).
        """
        counts = self._require_counts()
        setup = self.setup
        unknown = sorted(set(self.assignment[OPTION]) - set(SAPP_OPTIONS))
        if unknown:
            raise InputError(f"the plan runs option(s) {', '.join(map(repr, unknown))}, which MindFormers' "
                             f"recompute lists cannot express (they know {', '.join(SAPP_OPTIONS)})")
        per_option = {o: np.zeros((setup.chunks, setup.stages), dtype=int) for o in SAPP_OPTIONS}
        for i, (_, option) in enumerate(setup.items):
            if option in per_option:
                per_option[option] += counts[i]
        cells = counts.sum(axis=0)
        base = setup.layers.body_layers // (setup.stages * setup.chunks)
        lists = {
            "offset": cells - base,
            "recompute": per_option["full"],
            "select_recompute": per_option["selective"] + per_option["both"] + per_option["full"],
            "select_comm_recompute": per_option["comm"] + per_option["both"] + per_option["full"],
        }
        result = {key: _as_lists(value) for key, value in lists.items()}
        if strict:
            self._check_round_trip(result)
        return result

    def _check_round_trip(self, lists: dict[str, list]) -> None:
        setup = self.setup
        try:
            decoded = Partition.from_offsets(setup.layers, stages=setup.stages, micro_batches=setup.micro_batches,
                                             chunks=setup.chunks, schedule=setup.schedule,
                                             less_memory=setup.less_memory, seq_split=setup.seq_split, **lists)
        except InputError as error:
            raise InputError(f"MindFormers' recompute lists cannot express this plan: read back, {error}; "
                             "use offsets(strict=False) for the nearest config") from None
        mine = counts_from_assignment(setup, self.assignment)
        theirs = counts_from_assignment(setup, decoded.assignment)
        differs = np.argwhere((mine != theirs).any(axis=0))
        if differs.size:
            c, s = differs[0]
            cell = self.assignment[(self.assignment[CHUNK] == c) & (self.assignment[STAGE] == s)]
            runs = ", ".join(f"{r.kind} {r.option} x{r.layers}" for r in cell.itertuples(index=False))
            raise InputError(f"MindFormers' recompute lists cannot express cell (chunk {c}, stage {s}) "
                             f"({runs}): they recompute a cell's first layers, so selective and comm layers "
                             "overlap into 'both' and earlier kinds recompute first; use offsets(strict=False) "
                             "for the nearest config")

    def to_yaml(self, *, strict: bool = True) -> str:
        """The plan as MindFormers' parallel, pipeline, model and recompute sections (YAML) from :meth:`offsets`
        (``strict`` as there); :func:`sappkit.export_config` adds a strategy's degrees."""
        setup = self.setup
        check_scheduler(setup.schedule)
        parallel = {"pipeline_stage": setup.stages, "micro_batch_num": setup.micro_batches}
        parallel |= {"seq_split_num": setup.seq_split} if setup.seq_split > 1 else {}
        return sections_yaml(pipeline_sections(schedule=setup.schedule, chunks=setup.chunks, parallel=parallel,
                                               num_layers=setup.layers.body_layers, lists=self.offsets(strict=strict)))

    def write_yaml(self, path, *, strict: bool = True) -> None:
        """Write :meth:`to_yaml` to ``path`` (whole or not at all; a bad path is an :class:`InputError`)."""
        write_text(path, self.to_yaml(strict=strict))

    def write_lp(self, path) -> None:
        """Write the plan's integer program (objective ``sapp``; for a ``step`` plan the model whose optimum its
        search starts from) as an LP file at ``path``.

        The file is written whole or not at all; a bad path is an :class:`InputError`.
        """
        from .ilp.program import BalanceModel

        output_path("path", path)
        problem = BalanceModel(self.setup).problem
        write_file(path, lambda temporary: problem.writeLP(str(temporary)))

    def partition(self) -> Partition:
        """The plan as the recompute chooser's :class:`~sappkit.Partition` (options as configured)."""
        self._require_counts()
        setup = self.setup
        with one_stage_allowed(setup.stages == 1):  # a config without a pipeline (TrainerConfig.plan_for)
            return Partition.from_assignment(self.assignment, stages=setup.stages, micro_batches=setup.micro_batches,
                                             chunks=setup.chunks, schedule=setup.schedule,
                                             less_memory=setup.less_memory, seq_split=setup.seq_split,
                                             kind_order=setup.kinds)

    def costs(self) -> pd.DataFrame:
        """Per-cell costs (:func:`sappkit.cell_costs`) of the placement, the simulator's input."""
        from ..pipeline.costs import cell_costs

        setup, _ = self.setup, self._require_counts()
        with one_stage_allowed(setup.stages == 1):
            return cell_costs(setup.layers, self.assignment, stages=setup.stages, chunks=setup.chunks,
                              schedule=setup.schedule, const_mb=setup.const_mb)

    def simulate(self, **options):
        """Simulate one step of the plan (:func:`sappkit.simulate`; ``options`` such as ``p2p_time``)."""
        from ..pipeline.simulator import simulate

        setup = self.setup
        with one_stage_allowed(setup.stages == 1):
            return simulate(self.costs(), schedule=setup.schedule, micro_batches=setup.micro_batches,
                            less_memory=setup.less_memory, seq_split=setup.seq_split, limit_mb=setup.memory_mb,
                            **options)

    def _require_counts(self) -> np.ndarray:
        if self.counts is None:
            raise InputError(f"this plan has no placement (status {self.status!r}: {self.message or 'no solution'})")
        return self.counts


def _as_lists(grid: np.ndarray) -> list:
    """One chunk: a list per stage; more: a list of lists per chunk."""
    values = [[int(x) for x in row] for row in grid]
    return values[0] if len(values) == 1 else values


def make_plan(setup: BalanceSetup, counts: np.ndarray | None, **fields) -> Plan:
    """A :class:`Plan` whose frames and objective are evaluated from ``counts`` (None: no placement)."""
    if counts is None:
        empty = pd.DataFrame(columns=[KIND, CHUNK, STAGE, OPTION, LAYERS])
        return Plan(assignment=empty, stages=pd.DataFrame(), objective=None, setup=setup, counts=None,
                    objective_name=setup.objective, **fields)
    evaluation = evaluate(setup, counts)
    if "objective" in fields:
        objective = fields.pop("objective")
    elif setup.objective == "step":
        objective = fields.setdefault("_step_time", step_timer(setup).time(counts))
    else:
        objective = evaluation.sapp
    return Plan(assignment=assignment_frame(setup, counts),
                stages=with_time_unit(evaluation.stages, setup.layers.time_unit), objective=objective,
                objective_name=setup.objective, setup=setup, counts=np.asarray(counts, dtype=int), **fields)


def plan_from_offsets(layers, *, stages, micro_batches, memory_mb, offset=0, recompute=None,
                      select_recompute=None, select_comm_recompute=None, chunks=1, schedule=None,
                      less_memory=False, seq_split=1, seq_params=None, const_mb=None, objective="sapp",
                      optimization_level=1, working_set=True, sapp_compat=False) -> Plan:
    """Evaluate a hand-written MindFormers config as a :class:`Plan` (status ``"evaluated"``).

    ``offset`` and the recompute lists as :meth:`Plan.offsets` writes them (an
    int for every cell, a list per stage, or a list of lists per chunk;
    ``True`` for every layer of a cell). The other arguments are
    :func:`sappkit.balance`'s.

    Examples
    --------
    >>> rows = [dict(kind="block", role="body", count=8, param_mb=100, option=o,
    ...              forward_time=1, backward_time=b, activation_mb=a)
    ...         for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> plan = plan_from_offsets(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000,
    ...                          offset=[1, -1], recompute=[2, 0])
    >>> plan.stages["layers"].tolist(), plan.offsets()["recompute"], plan.fits
    ([5, 3], [2, 0], True)
    """
    check_one_copy(schedule, "offsets")  # offsets place each chunk on its own, unmirrored
    setup = make_setup(layers, stages=stages, micro_batches=micro_batches, memory_mb=memory_mb, chunks=chunks,
                       schedule=schedule, less_memory=less_memory, seq_split=seq_split, seq_params=seq_params,
                       const_mb=const_mb, objective=objective, optimization_level=optimization_level,
                       working_set=working_set, sapp_compat=sapp_compat)
    return plan_from_lists(setup, {"offset": offset, "recompute": recompute, "select_recompute": select_recompute,
                                   "select_comm_recompute": select_comm_recompute})


def plan_from_lists(setup: BalanceSetup, lists: dict) -> Plan:
    """MindFormers' ``offset`` and recompute lists (the keys of :data:`OFFSET_KEYS`) evaluated on ``setup``."""
    partition = Partition.from_offsets(setup.layers, stages=setup.stages, micro_batches=setup.micro_batches,
                                       chunks=setup.chunks, schedule=setup.schedule, less_memory=setup.less_memory,
                                       seq_split=setup.seq_split, offset=lists.get("offset", 0),
                                       **{key: lists.get(key) for key in OFFSET_KEYS[1:]})
    counts = counts_from_assignment(setup, partition.assignment)
    return make_plan(setup, counts, status="evaluated", gap=None, solve_seconds=0.0, method="offsets",
                     notes=setup.notes)
