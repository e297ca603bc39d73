"""Plans a trainer can run: each trainer's recompute grammar, and the balancer restricted to it.

A trainer places layers freely where its config lists them per stage
(Megatron-LM's ``--pipeline-model-parallel-layout``, torchtitan's
``module_fqns_per_model_part``, MindFormers' ``offset``), but states
recompute in its own words, each a *policy* that gives every body layer its
option from the cells' layer counts:

- ``uniform``: one option on every layer (Megatron ``--recompute-granularity
  full --recompute-method uniform --recompute-num-layers 1`` or
  ``selective``; torchtitan ``mode = "full"``, ``"selective"`` with ``"op"``,
  or ``"none"``);
- ``block N`` (Megatron ``--recompute-method block --recompute-num-layers
  N``): the first ``N`` layers of every model chunk on every stage run
  ``full``, the rest ``none`` (Megatron-LM ``megatron/core/recompute.py``,
  ``recompute_method == "block"``, commit ``d98e8a64ddf3``);
- ``every N`` (torchtitan ``selective_ac_option = "N"``): a rank counts the
  blocks it wraps across its model parts, in the order it builds them (chunk
  0 first), and fully checkpoints every ``N``-th (torchtitan v0.2.2
  ``torchtitan/distributed/activation_checkpoint.py``, ``_apply_layer_sac``:
  one process-wide counter; commit ``73a0e6979dd1``);
- ``lists`` (MindFormers ``recompute`` / ``select_recompute`` /
  ``select_comm_recompute``): per-cell counts per option, applied to a
  cell's first layers; what a plan's :meth:`~sappkit.Plan.offsets` writes
  and reads back.

:func:`within_grammar` is ``balance(..., trainer=...)``: the fastest plan
the trainer can run, and what the restriction costs against the
unconstrained plan (:class:`~sappkit.balancer.plan.ConstraintCost`). Uniform
policies are balanced exactly (the layer table restricted to the option);
``block N`` and ``every N`` by a local search over the cells' layer counts
from the unconstrained and the uniform plans' placements, one per ``N``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from .._check import check_choice
from ..errors import InputError
from ..layers.op_sac import OP_SAC
from ..pipeline.schedules import model_order
from .evaluate import ceiling, counts_from_assignment, placement_memory
from .plan import ConstraintCost, Plan, make_plan
from .setup import BalanceSetup
from .step.steptime import step_timer

__all__ = ["Policy", "TRAINER_POLICIES", "TRAINER_SCHEDULES", "UNIFORM_OPTIONS", "matching_policy", "policy_options",
           "within_grammar"]

#: The policy families each trainer's recompute settings express.
TRAINER_POLICIES = {"megatron": ("uniform", "block"), "torchtitan": ("uniform", "every"),
                    "mindformers": ("lists",), "hyperparallel": ("uniform",)}
#: The options a uniform policy may run, per trainer (sappkit's names).
UNIFORM_OPTIONS = {"megatron": ("none", "selective", "full"),
                   "torchtitan": ("none", "selective", "full", OP_SAC),
                   "mindformers": ("none", "selective", "comm", "both", "full"),
                   "hyperparallel": ("none", "selective", "full")}
#: The sappkit schedules each trainer runs.
TRAINER_SCHEDULES = {
    "megatron": ("1f1b", "interleaved"),
    "torchtitan": ("1f1b", "interleaved", "gpipe", "looped_bfs", "zb_interleaved", "zbv", "dualpipev",
                   "dualpipev_split"),
    "mindformers": ("1f1b", "interleaved", "seqpipe", "zbv"),
    "hyperparallel": ("1f1b",),
}
#: Local-search rounds per start (each round moves one layer; a plan holds at most a few hundred).
_ROUNDS = 400


@dataclass(frozen=True)
class Policy:
    """One recompute policy of a trainer's grammar (see the module docstring)."""

    family: str
    option: str | None = None
    """The option of a ``uniform`` policy."""
    n: int | None = None
    """``N`` of ``block N`` and ``every N``."""

    @property
    def label(self) -> str:
        """How the policy reads: ``uniform full``, ``block 3``, ``every 2``, ``lists``."""
        if self.family == "uniform":
            return f"uniform {self.option}"
        return self.family if self.n is None else f"{self.family} {self.n}"


def policy_options(policy: Policy, schedule: str, layer_counts) -> list[str]:
    """Each body layer's option under ``policy``, in model order, for cells holding ``layer_counts[c][s]``."""
    counts = np.asarray(layer_counts, dtype=int)
    if policy.family == "uniform":
        return [policy.option] * int(counts.sum())
    return ["full" if f else "none" for f in _full_mask(policy, model_order(schedule, *counts.shape[::-1]), counts)]


def _full_mask(policy: Policy, cells, counts: np.ndarray) -> np.ndarray:
    """Per body layer in model order: whether a ``block`` or ``every`` policy recomputes it fully."""
    per_cell = np.array([counts[c, s] for c, s in cells])
    starts = np.cumsum(per_cell) - per_cell
    position = np.arange(int(per_cell.sum())) - np.repeat(starts, per_cell)
    if policy.family == "block":
        return position < policy.n
    if policy.family == "every":
        before = np.cumsum(counts, axis=0) - counts  # layers a rank built in its earlier chunks
        rank_position = position + np.repeat([before[c, s] for c, s in cells], per_cell) + 1
        return rank_position % policy.n == 0
    raise InputError(f"policy family {policy.family!r} gives no per-layer options")


def matching_policy(trainer: str, schedule: str, layer_counts, options) -> Policy | None:
    """The policy of ``trainer``'s grammar that runs ``options`` on these cells, or None.

    Cells are compared by how many layers run each option: a plan states
    counts per cell, not which position of a cell recomputes.
    """
    options = [str(o) for o in options]
    kinds = set(options)
    if len(kinds) <= 1:
        option = options[0] if options else "none"
        return Policy("uniform", option) if option in UNIFORM_OPTIONS.get(trainer, ()) else None
    if kinds != {"none", "full"}:
        return None
    wanted = _per_cell(schedule, layer_counts, options)
    longest = int(np.max(layer_counts)) if np.size(layer_counts) else 0
    for family in ("block", "every"):
        if family in TRAINER_POLICIES.get(trainer, ()):
            for n in range(1, longest * len(layer_counts) + 1):
                policy = Policy(family, n=n)
                if _per_cell(schedule, layer_counts, policy_options(policy, schedule, layer_counts)) == wanted:
                    return policy
    return None


def _per_cell(schedule: str, layer_counts, options: list[str]) -> list[int]:
    """Fully recomputed layers per cell, cells in model order."""
    counts = np.asarray(layer_counts, dtype=int)
    sizes = [counts[c, s] for c, s in model_order(schedule, counts.shape[1], counts.shape[0])]
    edges = np.cumsum([0, *sizes])
    return [options[a:b].count("full") for a, b in zip(edges[:-1], edges[1:])]


def check_trainer(trainer, schedule: str, less_memory: bool) -> str:
    """``trainer`` validated against the schedule it must run (the name, lower case)."""
    name = check_choice("trainer", trainer, tuple(TRAINER_POLICIES))
    if schedule not in TRAINER_SCHEDULES[name]:
        raise InputError(f"{name} runs no {schedule!r} schedule; plan for one of "
                         f"{', '.join(map(repr, TRAINER_SCHEDULES[name]))}")
    if less_memory and name != "mindformers":
        raise InputError(f"{name}'s interleaved schedule has no less-memory variant; give less_memory=False")
    return name


def within_grammar(trainer: str, setup: BalanceSetup, solve: Callable[[BalanceSetup], Plan]) -> Plan:
    """The fastest plan ``trainer`` can run, with its :class:`ConstraintCost` (``balance(..., trainer=...)``).

    ``solve`` balances a setup without constraint (``balance``'s objective).
    """
    trainer = check_trainer(trainer, setup.schedule, setup.less_memory)
    free = solve(setup)
    if not free.has_plan:
        return free
    if trainer == "mindformers":  # its lists state any uniform option too, and the nearest lists of the free plan
        candidates = [(Policy("lists"), _mindformers_plan(free))] + _uniform_plans(trainer, setup, solve)
    else:
        candidates = _uniform_plans(trainer, setup, solve)
        families = [f for f in TRAINER_POLICIES[trainer] if f != "uniform"]
        starts = [free] + [plan for _, plan in candidates]
        candidates += [(policy, plan) for family in families
                       for policy, plan in _count_policies(family, setup, starts)]
    fitting = [(p, plan) for p, plan in candidates if plan is not None and plan.fits]
    if not fitting:
        return replace(free, status="infeasible", message=f"no plan {trainer} can express fits the memory limit; "
                                                          "the unconstrained plan is shown", constraint_cost=None)
    policy, plan = min(fitting, key=lambda pair: _value(pair[1]))
    reference = min(_value(free), _value(plan))  # the grammar's plan is an unconstrained plan too
    cost = ConstraintCost(trainer=trainer, policy=policy.label, unconstrained=reference, constrained=_value(plan),
                          time_unit=plan.time_unit, objective=plan.objective_name)
    same = plan is free
    return replace(plan, constraint_cost=cost,
                   status=free.status if same else ("feasible" if plan.status != "infeasible" else plan.status),
                   method=free.method if same else f"{trainer} grammar: {policy.label} ({plan.method})")


def _value(plan: Plan) -> float:
    """The plan's objective (simulated step time for ``step`` plans)."""
    return float(plan.objective)


def _mindformers_plan(free: Plan) -> Plan:
    """The unconstrained plan if MindFormers' lists express it, else the nearest config they write."""
    from .plan import plan_from_lists

    try:
        free.offsets(strict=True)
        return free
    except InputError:
        return plan_from_lists(free.setup, free.offsets(strict=False))


def _uniform_plans(trainer: str, setup: BalanceSetup, solve) -> list[tuple[Policy, Plan]]:
    """One exact plan per uniform option every body kind prices."""
    found = []
    for option in UNIFORM_OPTIONS[trainer]:
        keep = [i for i, (_, o) in enumerate(setup.items) if o == option]
        if len({setup.items[i][0] for i in keep}) != len(setup.kinds):
            continue
        plan = solve(_restricted(setup, keep))
        if plan.has_plan:
            found.append((Policy("uniform", option), _rehome(setup, plan)))
    return found


def _restricted(setup: BalanceSetup, keep: list[int]) -> BalanceSetup:
    """``setup`` with only the items ``keep``: same layer table, so every item keeps its memory model."""
    arrays = {name: getattr(setup, name)[keep] for name in ("kind_index", "forward", "backward", "recompute",
                                                          "activation", "once", "param", "working")}
    return replace(setup, items=tuple(setup.items[i] for i in keep), **arrays)


def _rehome(setup: BalanceSetup, plan: Plan) -> Plan:
    """A plan of a restricted setup as a plan of ``setup`` (same placement, the full option set)."""
    counts = counts_from_assignment(setup, plan.assignment)
    return make_plan(setup, counts, status=plan.status, gap=plan.gap, solve_seconds=plan.solve_seconds,
                     method=plan.method, notes=setup.notes)


def _count_policies(family: str, setup: BalanceSetup, starts: list[Plan]):
    """``(policy, plan)`` for ``block N`` / ``every N``, N from 1 to the largest cell, by local search."""
    search = _CountSearch(setup)
    layouts = {tuple(map(tuple, search.layout(plan.counts))) for plan in starts}
    largest = max(max(map(max, layout)) for layout in layouts)
    first = 2 if family == "every" else 1  # every 1st block is uniform full
    for n in range(first, largest * (setup.chunks if family == "every" else 1) + 1):
        policy = Policy(family, n=n)
        best = min((search.run(policy, np.array(layout)) for layout in layouts), key=lambda found: found[0])
        if best[1] is not None:
            yield policy, search.plan(best[1], policy)


class _CountSearch:
    """Local search over the cells' layer counts under a fixed count policy (one layer moved at a time)."""

    def __init__(self, setup: BalanceSetup):
        self.setup = setup
        self.cells = setup.cells
        self.kind_of_layer = np.repeat(np.arange(len(setup.kinds)), setup.counts)
        index = {(k, o): i for i, (k, o) in enumerate(setup.items)}
        # per kind, the item of its 'none' and its 'full' option (-1 where the table does not price it)
        self.items = np.array([[index.get((kind, o), -1) for o in ("none", "full")] for kind in setup.kinds])
        self.flat_cells = np.array([c * setup.stages + s for c, s in self.cells])
        self.timer = step_timer(setup) if setup.objective == "step" else None
        self.reserved = setup.reserved

    def layout(self, counts: np.ndarray) -> np.ndarray:
        """``[chunk, stage]`` body layers of a placement."""
        return np.asarray(counts).sum(axis=0)

    def placement(self, layout: np.ndarray, policy: Policy) -> np.ndarray | None:
        """``counts[item, chunk, stage]`` of a layout under the policy (None if an option is not priced)."""
        setup = self.setup
        full = _full_mask(policy, self.cells, layout)
        items = self.items[self.kind_of_layer, full.astype(int)]
        if (items < 0).any():
            return None
        cells = np.repeat(self.flat_cells, [layout[c, s] for c, s in self.cells])
        counts = np.zeros((len(setup.items), setup.chunks * setup.stages), dtype=int)
        np.add.at(counts, (items, cells), 1)
        return counts.reshape(len(setup.items), setup.chunks, setup.stages)

    def stage_scores(self, placements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``([n, stage] memory over the limit in MB, [n, stage] stage time)`` of placements."""
        excess = np.maximum(0.0, placement_memory(self.setup, placements) - ceiling(self.setup.memory_mb))
        forward = np.einsum("i,nics->ncs", self.setup.forward, placements) + self.setup.fixed_forward
        backward = np.einsum("i,nics->ncs", self.setup.backward, placements) + self.setup.fixed_backward
        return excess, forward.max(axis=1) + backward.max(axis=1)

    def scores(self, placements: np.ndarray) -> np.ndarray:
        """``[n, 3]``: memory over the limit (MB, summed over stages), the time to minimise (the simulated
        step for ``step`` plans, else the largest stage time) and, to break its ties, the stage times' sum of
        squares (lower when a layer leaves one of several slowest stages)."""
        excess, times = self.stage_scores(placements)
        time = self.timer.times(placements) if self.timer is not None else times.max(axis=1)
        return np.stack([excess.sum(axis=1), time, (times ** 2).sum(axis=1)], axis=1)

    def moves(self, layout: np.ndarray, placement: np.ndarray) -> list[np.ndarray]:
        """Layouts one layer away, the layer taken off the stage furthest over memory or else the slowest, that
        keep every non-reserved cell non-empty."""
        excess, times = (values[0] for values in self.stage_scores(placement[None]))
        source = int(excess.argmax()) if excess.any() else int(times.argmax())
        found = []
        for a in self.cells:
            if a[1] != source or layout[a] == 0 or (layout[a] == 1 and a not in self.reserved):
                continue
            for b in self.cells:
                if b != a:
                    moved = layout.copy()
                    moved[a] -= 1
                    moved[b] += 1
                    found.append(moved)
        return found

    def run(self, policy: Policy, layout: np.ndarray):
        """``(score, layout)``: the best layout the search reaches from ``layout`` (None: none priced)."""
        start = self.placement(layout, policy)
        if start is None:
            return (np.inf, np.inf, np.inf), None
        best, current = tuple(self.scores(start[None])[0]), start
        for _ in range(_ROUNDS):
            moved = [(m, self.placement(m, policy)) for m in self.moves(layout, current)]
            moved = [(m, p) for m, p in moved if p is not None]
            if not moved:
                break
            scores = self.scores(np.stack([p for _, p in moved]))
            pick = int(np.lexsort((scores[:, 2], scores[:, 1], scores[:, 0]))[0])
            if tuple(scores[pick]) >= best:
                break
            best, (layout, current) = tuple(scores[pick]), moved[pick]
        return best, layout

    def plan(self, layout: np.ndarray, policy: Policy) -> Plan:
        counts = self.placement(layout, policy)
        return make_plan(self.setup, counts, status="feasible", gap=None, solve_seconds=0.0,
                         method=f"local search over layer counts under {policy.label}", notes=self.setup.notes)

