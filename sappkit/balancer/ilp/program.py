r"""The balancer's integer program (SAPP's pipeline balancer's model, with tight bounds).

Index sets: body items :math:`i = (k, o)` (kind, option), cells
:math:`(c, s)`, chunks :math:`c < v`, stages :math:`s < p`.
Variables: :math:`x_{ics} \in \mathbb{Z}_{\ge 0}`, body layers of item
:math:`i` on cell :math:`(c, s)`. With :math:`F_{cs} = \sum_i f_i x_{ics} +
F^{ht}_{cs}`, :math:`B_{cs} = \sum_i b_i x_{ics} + B^{ht}_{cs}` (head and
tail on their cells) and :math:`A_{cs} = \sum_i a_i x_{ics} + A^{ht}_{cs}`:

.. math::

   \sum_{o} \sum_{c, s} x_{(k,o)cs} &= n_k  && \text{every layer placed (layer\_total\_k)} \\
   \sum_i x_{ics} &\ge 1 \quad (c, s) \notin R && \text{no empty cell (cell\_min\_c\_s)} \\
   P_s + \sum_{i,c} u_i x_{ics} + K + \sum_c k_{ec} A_{cs} + W_{c_e s} &\le M
       \quad e \in E_s && \text{memory (memory\_cap\_s\_e)} \\
   P_s + \sum_{i,c} u_i x_{ics} + K + \sum_c \mathit{if}_{cs} A_{cs} + O_s &\le M
       && \text{SAPP's memory (memory\_cap\_s)} \\
   O_s \in \mathbb{Z}_{\ge 0},\ O_s &\ge \sum_t \phi_t (A_{a_t s} - A_{b_t s})
       && \text{interleaved overhead, when } v > 1, m \ne p

with :math:`P_s` body and head/tail parameters, :math:`u` memory kept once,
:math:`K` the constant. By default (``working_set=True``) the first family:
:math:`E_s` the stage's undominated memory events
(:mod:`sappkit.balancer.peaks`), event :math:`e` holding :math:`k_{ec}`
units of chunk :math:`c` while the backward of cell :math:`(c_e, s)` runs
(no :math:`W` between backwards), and :math:`W_{cs}` that cell's working
set: with :math:`y_{ics}` binary, exactly "item :math:`i` is on the cell"
(:math:`n_k y_{ics} \ge x_{ics}`, :math:`y_{ics} \le x_{ics}`) and items in
the order a cell's layers run, :math:`W_{cs} \ge w_i (y_{ics} - \sum_{j
\succ i} y_{jcs})`: the working set of the last item present, exactly as
``evaluate`` charges it (the tail's constant on the tail's cell). With
``working_set=False`` the second, SAPP's, with :math:`\mathit{if}` the
in-flight counts.
Multimodal frontier, for adjacent body kinds :math:`k-1, k` and every cell:
:math:`n_k \phi_{kcs} \ge` (layers of :math:`k` on cells before
:math:`(c, s)` in model order; DualPipeV's chunk 1 includes the cell) and
:math:`\sum_o x_{(k-1,o)cs} \le n_{k-1} (1 - \phi_{kcs})`, :math:`\phi`
binary. Recompute consistency (two options, least :math:`\ell`, most
:math:`h`): :math:`N_{>k} \psi_{kcs} \ge \sum_{k' > k} x_{(k',h)cs}`,
:math:`x_{(k,\ell)cs} \le n_k (1 - \psi_{kcs})`. Every big-M is the layer
count bound of :func:`layer_bound`, the tightest that holds.

Objectives, exactly as ``evaluate`` evaluates them: ``sapp``
minimises :math:`T \ge \max_c F_{cs} + \max_c B_{cs}` (with
:math:`\bar F_s \ge F_{cs}`, :math:`\bar B_s \ge B_{cs}`), or for
``bottleneck_split`` :math:`S + L` (level 1) with :math:`S \ge B_{cs}`,
:math:`c < v-1`, :math:`L \ge B_{v-1,s} + F^{ht}_{v-1,s} + \phi_s/m\,
F^{body}_{v-1,s}`, :math:`L \ge S`; level >= 2 adds SAPP's approach A
bubble variables. (Objective ``step``, the simulated step time, is no
linear objective: its search starts from this model's ``sapp`` optimum,
:mod:`sappkit.balancer.step.local_search`.) ``memory="minimise"`` drops the limit and minimises :math:`M` instead (how
much memory would fit).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pulp

from ...pipeline.schedules import V_SHAPED
from .. import peaks
from ..setup import BalanceSetup

__all__ = ["BalanceModel", "layer_bound", "overhead_bound"]


def layer_bound(setup: BalanceSetup, kinds) -> int:
    """Most layers of ``kinds`` (kind indices) any cell can hold: their count in the model."""
    return int(sum(setup.counts[k] for k in kinds))


def overhead_bound(setup: BalanceSetup, stage: int) -> float:
    """Largest overhead a stage can carry: the factors' sum times the most activation one chunk can hold.

    A chunk holds at most every body layer under its most memory-hungry option,
    and each term is a factor times a difference of two chunks' activations.
    """
    heaviest = sum(setup.counts[k] * setup.activation[setup.kind_index == k].max() for k in range(len(setup.kinds)))
    return float(sum(f for f, _, _ in setup.overhead_terms(stage))) * float(heaviest)


class BalanceModel:
    """Build the PuLP problem of one instance; :meth:`counts` reads a solution back.

    Parameters
    ----------
    setup : BalanceSetup
    memory : {"limit", "minimise"}
        Cap every stage at ``setup.memory_mb``, or minimise the largest stage memory.

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit.balancer.setup import make_setup
    >>> from sappkit.balancer.ilp.solver import SolverOptions, solve
    >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1,
    ...              backward_time=bt, activation_mb=a) for o, bt, a in (("none", 2, 50), ("full", 3, 5))]
    >>> model = BalanceModel(make_setup(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=300))
    >>> solve(model.problem, SolverOptions()).objective, model.counts().sum(axis=(0, 1)).tolist()
    (8.0, [2, 2])
    """

    def __init__(self, setup: BalanceSetup, *, memory: Literal["limit", "minimise"] = "limit"):
        self.setup = setup
        self.problem = pulp.LpProblem("sappkit_balance", pulp.LpMinimize)
        p, v = setup.stages, setup.chunks
        self.x = {(i, c, s): self._var(f"x_{i}_{c}_{s}", 0, layer_bound(setup, [setup.kind_index[i]]), "Integer")
                  for i in range(len(setup.items)) for c in range(v) for s in range(p)}
        self._add_layer_totals()
        self._add_cell_minimum()
        self._add_frontier()
        self._add_consistency()
        self.limit = setup.memory_mb if memory == "limit" else self._var("memory_needed", 0, None)
        self._add_memory_cap()
        if memory == "minimise":
            self.problem.setObjective(self.limit + 0)
        else:
            self.problem.setObjective(self._sapp_objective())

    # ------------------------------------------------------------ helpers

    def _var(self, name, low, high, cat="Continuous"):
        return self.problem.add_variable(name, low, high, cat=cat)

    def _add(self, constraint, name: str) -> None:
        self.problem.addConstraint(constraint, name=name)

    def _cell(self, values, c: int, s: int, items=None):
        items = range(len(self.setup.items)) if items is None else items
        return pulp.lpSum(values[i] * self.x[i, c, s] for i in items if values[i] != 0)

    def forward(self, c: int, s: int):
        """``F(c, s)``, head and tail included."""
        return self._cell(self.setup.forward, c, s) + float(self.setup.fixed_forward[c, s])

    def backward(self, c: int, s: int):
        """``B(c, s)``, head and tail included."""
        return self._cell(self.setup.backward, c, s) + float(self.setup.fixed_backward[c, s])

    def counts(self) -> np.ndarray:
        """The solution as ``counts[item, chunk, stage]``."""
        setup = self.setup
        counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
        for (i, c, s), var in self.x.items():
            counts[i, c, s] = int(round(var.value() or 0))
        return counts

    def add_objective_bounds(self, lower: float, upper: float | None) -> None:
        """Cut the objective to ``[lower, upper]``: a proven bound and an incumbent's value (exact search)."""
        slack = 1e-7 * max(1.0, abs(lower))
        if np.isfinite(lower):
            self._add(self.problem.objective >= lower - slack, "objective_lower")
        if upper is not None and np.isfinite(upper):
            self._add(self.problem.objective <= upper + slack, "objective_upper")

    # ------------------------------------------------------------ placement

    def _add_layer_totals(self) -> None:
        # Every body layer of every kind is placed somewhere.
        setup = self.setup
        for k, kind in enumerate(setup.kinds):
            items = setup.item_indices(kind)
            self._add(pulp.lpSum(self.x[i, c, s] for i in items for c in range(setup.chunks)
                                 for s in range(setup.stages)) == int(setup.counts[k]), f"layer_total_{k}")

    def _add_cell_minimum(self) -> None:
        # Every cell but the head's and the tail's holds at least one body layer.
        for c, s in self.setup.cells:
            if (c, s) not in self.setup.reserved:
                self._add(self._cell(np.ones(len(self.setup.items)), c, s) >= 1, f"cell_min_{c}_{s}")

    def _add_frontier(self) -> None:
        # A body kind's layers never follow, in model order, the first cell of the next kind.
        setup = self.setup
        ones = np.ones(len(setup.items))
        for k in range(1, len(setup.kinds)):
            later, earlier = setup.item_indices(setup.kinds[k]), setup.item_indices(setup.kinds[k - 1])
            for c, s in setup.cells:
                before = setup.earlier_cells(c, s)
                if not before and not (setup.schedule in V_SHAPED and c == 1):
                    continue
                started = self._var(f"frontier_{k}_{c}_{s}", 0, 1, "Binary")
                self._add(layer_bound(setup, [k]) * started
                          >= pulp.lpSum(self.x[i, d, t] for i in later for d, t in before),
                          f"frontier_start_{k}_{c}_{s}")
                self._add(self._cell(ones, c, s, earlier) <= layer_bound(setup, [k - 1]) * (1 - started),
                          f"frontier_block_{k}_{c}_{s}")

    def _add_consistency(self) -> None:
        # MindFormers' rule: where a later kind runs the most-recomputed option on a cell,
        # earlier kinds on that cell may not run the least-recomputed one.
        setup = self.setup
        if setup.consistency is None:
            return
        least, most = setup.consistency
        index = {item: i for i, item in enumerate(setup.items)}
        for k in range(len(setup.kinds) - 1):
            plain = index.get((setup.kinds[k], least))
            later_most = [index[(kind, most)] for kind in setup.kinds[k + 1:] if (kind, most) in index]
            if plain is None or not later_most:
                continue
            later_kinds = range(k + 1, len(setup.kinds))
            for c, s in setup.cells:
                uses_most = self._var(f"consistent_{k}_{c}_{s}", 0, 1, "Binary")
                self._add(layer_bound(setup, later_kinds) * uses_most
                          >= pulp.lpSum(self.x[i, c, s] for i in later_most), f"consistent_most_{k}_{c}_{s}")
                self._add(self.x[plain, c, s] <= layer_bound(setup, [k]) * (1 - uses_most),
                          f"consistent_least_{k}_{c}_{s}")

    # ------------------------------------------------------------ memory

    def _add_memory_cap(self) -> None:
        # Parameters + activations x in-flight + overhead + working set + constant fit the device;
        # with the working set, at every undominated memory event of the stage's order.
        setup = self.setup
        for s in range(setup.stages):
            kept = pulp.lpSum(self._cell(setup.param + setup.once, c, s) for c in range(setup.chunks))
            kept += float(setup.const_mb + sum(f.param_mb + f.memory_once_mb for f in setup.fixed if f.stage == s))
            if setup.working_set:
                self._add_event_caps(s, kept)
                continue
            memory = kept + pulp.lpSum(float(setup.in_flight[c, s]) * self._activation(c, s)
                                       for c in range(setup.chunks))
            self._add(memory + self._overhead(s) <= self.limit, f"memory_cap_{s}")

    def _activation(self, c: int, s: int):
        """``A_{cs}`` with the head's or tail's activation on its cell."""
        return self._cell(self.setup.activation, c, s) + float(peaks.fixed_activation(self.setup)[c, s])

    def _add_event_caps(self, s: int, kept) -> None:
        # One cap per event e: kept + Σ_c k_{e,c} A_{cs} + W_{c_e s} (the running backward's cell).
        setup = self.setup
        events = peaks.stage_events(setup, s)
        working = {c: self._working(c, s) for c in sorted(set(events.running.tolist())) if c >= 0}
        for e, (held, running) in enumerate(zip(events.held, events.running)):
            memory = kept + pulp.lpSum(float(n) * self._activation(c, s) for c, n in enumerate(held) if n)
            if running >= 0:
                memory += working[int(running)]
            self._add(memory <= self.limit, f"memory_cap_{s}_{e}")

    def _overhead(self, s: int):
        # An integer at least the signed imbalance of the chunks' activations (as SAPP's overhead).
        setup = self.setup
        terms = setup.overhead_terms(s)
        if not setup.overhead_active or not terms:
            return 0
        overhead = self._var(f"overhead_{s}", 0, np.ceil(overhead_bound(setup, s)), "Integer")
        self._add(overhead >= pulp.lpSum(f * (self._cell(setup.activation, a, s) - self._cell(setup.activation, b, s))
                                         for f, a, b in terms), f"overhead_min_{s}")
        return overhead

    def _working(self, c: int, s: int):
        # The working set cell (c, s)'s backward holds: its last item present, in the order a cell's
        # layers run (the tail's, a constant, where the cell ends with it).
        setup = self.setup
        tail = setup.tail
        if tail is not None and (tail.chunk, tail.stage) == (c, s):
            return tail.working_mb
        order = setup.cell_order
        present = {}
        for i in order:
            present[i] = self._var(f"present_{i}_{c}_{s}", 0, 1, "Binary")
            self._add(layer_bound(setup, [setup.kind_index[i]]) * present[i] >= self.x[i, c, s],
                      f"present_if_placed_{i}_{c}_{s}")
            self._add(present[i] <= self.x[i, c, s], f"present_only_if_placed_{i}_{c}_{s}")
        working = self._var(f"working_{c}_{s}", 0, float(setup.working.max(initial=0.0)))
        for position, i in enumerate(order):
            if setup.working[i] > 0:
                later = pulp.lpSum(present[j] for j in order[position + 1:])
                self._add(working >= float(setup.working[i]) * (present[i] - later), f"working_{i}_{c}_{s}")
        return working

    # ------------------------------------------------------------ time

    def _stage_time(self):
        # T >= max_c F(c, s) + max_c B(c, s) for every stage.
        setup = self.setup
        time = self._var("stage_time", 0, None)
        for s in range(setup.stages):
            if setup.chunks == 1:
                self._add(time >= self.forward(0, s) + self.backward(0, s), f"stage_time_{s}")
                continue
            most_forward = self._var(f"max_forward_{s}", 0, None)
            most_backward = self._var(f"max_backward_{s}", 0, None)
            for c in range(setup.chunks):
                self._add(most_forward >= self.forward(c, s), f"max_forward_{c}_{s}")
                self._add(most_backward >= self.backward(c, s), f"max_backward_{c}_{s}")
            self._add(time >= most_forward + most_backward, f"stage_time_{s}")
        return time

    def _split_stage_term(self):
        # v > 1 and m = p at level >= 1: SAPP's MAX_STAGE and MAX_LAST chunk bounds.
        setup = self.setup
        v, last = setup.chunks, setup.chunks - 1
        first = self._var("max_stage", 0, None)
        final = self._var("max_last_chunk", 0, None)
        factors = setup.last_chunk_factors
        for s in range(setup.stages):
            for c in range(v - 1):
                self._add(first >= self.backward(c, s), f"max_stage_{c}_{s}")
            body_forward = self._cell(setup.forward, last, s)
            self._add(final >= self.backward(last, s) + float(setup.fixed_forward[last, s])
                      + float(factors[s]) / setup.slices * body_forward, f"max_last_{s}")
        if setup.level >= 2:
            self._add(first >= final, "max_stage_covers_last")
            return first
        self._add(final >= first, "max_last_covers_stage")
        return first + final

    def _sapp_objective(self):
        setup = self.setup
        term = self._split_stage_term() if setup.bottleneck_split else self._stage_time()
        if setup.level < 2:
            return term
        return self._approach_a() / max(1, setup.chunks - 2) + term * (setup.slices - 2)

    def _approach_a(self):
        # SAPP's bubble model: body work, chunk sums, and the first and last diagonals' waits.
        setup = self.setup
        p, v, m = setup.stages, setup.chunks, setup.slices
        total = pulp.lpSum(self._cell(setup.forward + setup.backward, c, s) for c in range(v) for s in range(p))
        head_forward = setup.head.forward_time if setup.head is not None else 0.0
        bubble = 0
        for c in range(v - 1):
            bubble += (v - c) / v * pulp.lpSum(self.forward(c, s) + self.backward(c, s) for s in range(p)) / p
            running = [self._var(f"max_prev_{c}_{s}", 0, None) for s in range(p)]
            waits = [self._var(f"prev_wait_{c}_{s}", 0, None) for s in range(p)]
            self._add(running[0] >= self.forward(c, 0) - head_forward, f"max_prev_{c}_0")
            for s in range(1, p):
                self._add(running[s] >= running[s - 1], f"max_prev_chain_{c}_{s}")
                self._add(running[s] >= self.forward(c, s), f"max_prev_{c}_{s}")
                self._add(waits[s] >= running[s - 1] - self.forward(c, s), f"prev_wait_{c}_{s}")
            bubble += m * pulp.lpSum(waits[1:])
        last = v - 1
        running = [self._var(f"max_next_{s}", 0, None) for s in range(p)]
        waits = [self._var(f"next_wait_{s}", 0, None) for s in range(p)]
        self._add(running[p - 1] >= self.forward(last, p - 1), f"max_next_{p - 1}")
        for s in range(p - 2, -1, -1):
            self._add(running[s] >= running[s + 1], f"max_next_chain_{s}")
            self._add(running[s] >= self.forward(last, s), f"max_next_{s}")
            self._add(waits[s] >= running[s + 1] - self.forward(last, s), f"next_wait_{s}")
        bubble += m * pulp.lpSum(waits[: p - 1])
        return total + bubble
