"""The balancer's instance: a layer table and a pipeline, resolved into arrays every model shares.

:func:`make_setup` validates ``balance``'s arguments once and returns a
:class:`BalanceSetup`: the body *items* (one per (kind, option) the plan may
use, in model order), their per-layer costs as arrays, head and tail with
their cells, the in-flight counts, and SAPP's schedule factors. The ILP
(``ilp``), the exact search (``exact``) and the plan
evaluation (``evaluate``) all read it, so they cannot disagree on the
instance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from .._check import check_bool, check_choice, check_int, check_number
from ..columns import ACTIVATION_MB, BACKWARD_TIME, FORWARD_TIME, KIND, MEMORY_ONCE_MB, OPTION, PARAM_MB, SAPP_OPTIONS
from ..errors import InputError
from ..limits import MAX_MEMORY_MB
from ..layers.table import LayerTable, as_layer_table
from ..pipeline.costs import positional_rank
from ..pipeline.schedules import (
    SAPP_SCHEDULES, TWO_DIRECTIONS, V_SHAPED, check_pipeline, check_simulated, forward_in_backward, in_flight_counts,
    model_order, tail_cell,
)
from ..pipeline.seqpipe import rescale_for_seqpipe
from .sapp_compat import check_sapp_compat, sapp_in_flight, sapp_tail_time_cell

__all__ = ["BalanceSetup", "Fixed", "OBJECTIVES", "make_setup"]

OBJECTIVES = ("sapp", "step")


@dataclass(frozen=True)
class Fixed:
    """The head or the tail: one layer on a fixed cell."""

    kind: str
    chunk: int
    stage: int
    forward_time: float
    backward_time: float
    param_mb: float
    activation_mb: float
    memory_once_mb: float
    working_mb: float
    """Its end-of-warm-up working set (:meth:`~sappkit.LayerTable.working_set_mb`)."""
    time_cell: tuple[int, int] | None = None
    """The cell its time is charged to where it is not (chunk, stage): SAPP's DualPipeV tail (see
    :func:`sapp_tail_time_cell`)."""

    @property
    def timed_at(self) -> tuple[int, int]:
        """The cell (chunk, stage) its forward and backward time count on."""
        return self.time_cell if self.time_cell is not None else (self.chunk, self.stage)


@dataclass(frozen=True, kw_only=True, eq=False)
class BalanceSetup:
    """One balancer instance (see the module docstring); built by :func:`make_setup`."""

    layers: LayerTable
    schedule: str
    stages: int
    micro_batches: int
    chunks: int
    less_memory: bool
    seq_split: int
    memory_mb: float
    const_mb: float
    objective: str
    level: int
    consistent_recompute: bool
    working_set: bool
    sapp_compat: bool
    """SAPP's pipeline balancer's own counts (:func:`sapp_in_flight`, :func:`sapp_tail_time_cell`)."""
    kinds: tuple[str, ...]
    items: tuple[tuple[str, str], ...]
    """Body (kind, option) pairs in model order, each kind's options in table order."""
    kind_index: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    recompute: np.ndarray
    """Backward beyond the kind's fastest option: the part that is recompute."""
    activation: np.ndarray
    once: np.ndarray
    param: np.ndarray
    working: np.ndarray
    """End-of-warm-up working set of a layer of the item (:meth:`~sappkit.LayerTable.working_set_mb`)."""
    counts: np.ndarray
    """Layers of each body kind."""
    head: Fixed | None
    tail: Fixed | None
    in_flight: np.ndarray
    mirrored: tuple[Fixed, ...] = ()
    """DualPipe's second copy of head and tail: the first copy's tail on (0, p - 1), the second copy's head
    on (1, p - 1) (:attr:`head` and :attr:`tail` are the first copy's head and the second copy's tail)."""
    notes: tuple[str, ...] = ()
    fixed_forward: np.ndarray = field(init=False)
    fixed_backward: np.ndarray = field(init=False)

    def __post_init__(self):
        forward, backward = np.zeros((2, self.chunks, self.stages))
        for fixed in self.fixed:
            forward[fixed.timed_at] += fixed.forward_time
            backward[fixed.timed_at] += fixed.backward_time
        object.__setattr__(self, "fixed_forward", forward)
        object.__setattr__(self, "fixed_backward", backward)

    @cached_property
    def fixed_stage_memory(self) -> tuple[np.ndarray, np.ndarray]:
        """Per stage: head and tail parameters, their activation × in-flight + memory kept once (read-only)."""
        param, activation = np.zeros(self.stages), np.zeros(self.stages)
        for f in self.fixed:
            param[f.stage] += f.param_mb
            activation[f.stage] += f.activation_mb * self.in_flight[f.chunk, f.stage] + f.memory_once_mb
        return _read_only(param), _read_only(activation)

    @cached_property
    def fixed_cell_activation(self) -> np.ndarray:
        """``[chunk, stage]``: head and tail activation per micro-batch on their cells (read-only, computed once)."""
        activation = np.zeros((self.chunks, self.stages))
        for f in self.fixed:
            activation[f.chunk, f.stage] += f.activation_mb
        return _read_only(activation)

    @cached_property
    def overhead_weight_table(self) -> np.ndarray:
        """``[chunk, stage]``: every stage's :meth:`overhead_weights` (read-only, computed once)."""
        return _read_only(np.stack([self.overhead_weights(s) for s in range(self.stages)], axis=1))

    @cached_property
    def body_cells(self) -> np.ndarray:
        """``[chunk, stage]``: whether the cell must hold a body layer, not being :attr:`reserved` (read-only)."""
        return _read_only(np.array([[(c, s) not in self.reserved for s in range(self.stages)]
                                    for c in range(self.chunks)]))

    @property
    def fixed(self) -> tuple[Fixed, ...]:
        """Head and tail, those present (both copies' under DualPipe)."""
        return tuple(f for f in (self.head, self.tail, *self.mirrored) if f is not None)

    @property
    def slices(self) -> int:
        """Micro-batches every formula counts: ``m k`` (SeqPipe slices), else ``m``."""
        return self.micro_batches * self.seq_split

    @property
    def cells(self) -> list[tuple[int, int]]:
        """Cells (chunk, stage) in model order."""
        return model_order(self.schedule, self.stages, self.chunks)

    @property
    def reserved(self) -> set[tuple[int, int]]:
        """Cells that may stay empty of body layers: the head's and the tail's (as SAPP has them)."""
        if self.schedule in V_SHAPED:
            return {(0, 0), (1, 0)}
        return {(0, 0), (self.chunks - 1, self.stages - 1)}

    @property
    def overhead_active(self) -> bool:
        """The interleaved overhead term applies: ``v > 1`` and ``m != p`` on SAPP's schedules."""
        return self.chunks > 1 and self.slices != self.stages and self.schedule in SAPP_SCHEDULES

    def overhead_terms(self, stage: int) -> list[tuple[int, int, int]]:
        """``(factor, chunk_a, chunk_b)``: stage overhead = Σ factor (A(chunk_a) - A(chunk_b)).

        ``A`` is a chunk's body activation per micro-batch on the stage; the
        chunk pairs walk as SAPP's pipeline balancer's ``init_overhead_variables`` does.
        """
        p, v, s = self.stages, self.chunks, stage
        terms = []
        front, back, advance_front = v - 1, v - 1, True
        for _ in range(v - 1):
            if advance_front:
                front = (front + 1) % v
                factor = p - s if self.less_memory else p - abs(p - 2 * s - 1)
                terms.append((factor, front, back))
            else:
                back -= 1
                if self.less_memory:
                    terms.append((s, front, back))
                else:
                    terms.append((max(p - 2 * s - 1, 0), front + 1, back + 1))
                    terms.append((max(2 * s + 1 - p, 0), front, back))
            advance_front = not advance_front
        return [t for t in terms if t[0] != 0 and t[1] != t[2]]

    def overhead_weights(self, stage: int) -> np.ndarray:
        """``d_c``: the overhead expression of ``stage`` is ``Σ_c d_c A_c`` (:meth:`overhead_terms` per chunk)."""
        weights = np.zeros(self.chunks)
        for factor, a, b in self.overhead_terms(stage):
            weights[a] += factor
            weights[b] -= factor
        return weights

    def earlier_cells(self, chunk: int, stage: int) -> list[tuple[int, int]]:
        """Cells whose layers precede cell (chunk, stage) for the multimodal frontier (DualPipeV's chunk 1
        includes the cell itself, as SAPP's pipeline balancer has it)."""
        c, s = chunk, stage
        if self.schedule in V_SHAPED:
            if c == 0:
                return [(0, t) for t in range(s)]
            return [(0, t) for t in range(self.stages)] + [(1, t) for t in range(s, self.stages)]
        return [(d, t) for d in range(c) for t in range(self.stages)] + [(c, t) for t in range(s)]

    @property
    def last_chunk_factors(self) -> np.ndarray:
        """Forwards of the last chunk after a backward, per stage (SAPP's level-1 time factors)."""
        return forward_in_backward(self.stages, self.slices, self.less_memory)

    @property
    def bottleneck_split(self) -> bool:
        """The level >= 1 objective with ``v > 1`` and ``m = p`` (``MAX_STAGE`` and ``MAX_LAST``), SAPP's schedules."""
        return self.chunks > 1 and self.slices == self.stages and self.level >= 1 and self.schedule in SAPP_SCHEDULES

    @property
    def consistency(self) -> tuple[str, str] | None:
        """(least, most) recomputed option when the recompute-consistency rule applies, else None."""
        if not self.consistent_recompute or len(self.kinds) < 2:
            return None
        options = _considered(self.items)
        return (options[0], options[-1]) if len(options) == 2 else None

    @property
    def cell_order(self) -> list[int]:
        """Item indices in the order a cell's layers run: kinds in model order, a kind's options by
        :func:`positional_rank` (table order among other names), as the plan's assignment lists them."""
        return sorted(range(len(self.items)), key=lambda i: (self.kind_index[i], positional_rank(self.items[i][1])))

    @property
    def tail_ends_warm_up(self) -> int | None:
        """The stage whose last-chunk cell ends with the tail (the tail ends its warm-up), or None."""
        tail = self.tail
        return tail.stage if tail is not None and tail.chunk == self.chunks - 1 else None

    def item_indices(self, kind: str) -> list[int]:
        """Indices of ``kind``'s items."""
        return [i for i, (k, _) in enumerate(self.items) if k == kind]


@lru_cache(maxsize=256)
def _item_columns(table: LayerTable) -> tuple[tuple, dict, np.ndarray]:
    """A table's items ``(kind, option)`` in table order, their per-layer columns (:class:`BalanceSetup`'s
    ``kind_index``, ``forward``, ... ``working``) and the layers per body kind: read once per table (a strategy
    search prices many strategies on one compiled table), shared read-only."""
    items, columns = [], {name: [] for name in ("kind_index", "forward", "backward", "recompute", "activation",
                                                 "once", "param", "working")}
    for index, kind in enumerate(table.body_kinds):
        rows = table.rows(kind)
        fastest = float(rows[BACKWARD_TIME].min())
        for option, row in rows.iterrows():
            items.append((kind, str(option)))
            columns["kind_index"].append(index)
            columns["forward"].append(float(row[FORWARD_TIME]))
            columns["backward"].append(float(row[BACKWARD_TIME]))
            columns["recompute"].append(float(row[BACKWARD_TIME]) - fastest)
            columns["activation"].append(float(row[ACTIVATION_MB]))
            columns["once"].append(float(row[MEMORY_ONCE_MB]))
            columns["param"].append(table.param_mb(kind))
            columns["working"].append(table.working_set_mb(kind, str(option)))
    arrays = {name: _read_only(np.array(values, dtype=int if name == "kind_index" else float))
              for name, values in columns.items()}
    return tuple(items), arrays, _read_only(np.array([table.count(kind) for kind in table.body_kinds]))


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False  # a cached constant every caller shares
    return array


def _considered(items) -> list[str]:
    """Options any body kind may use, least recomputed first (SAPP order, then first appearance)."""
    seen = list(dict.fromkeys(option for _, option in items))
    rank = {o: SAPP_OPTIONS.index(o) if o in SAPP_OPTIONS else len(SAPP_OPTIONS) + seen.index(o) for o in seen}
    return sorted(seen, key=rank.get)


def _mirrored(table: LayerTable, schedule: str, p: int) -> tuple[Fixed, ...]:
    """DualPipe's other head and tail (:attr:`BalanceSetup.mirrored`); none for one-copy schedules."""
    if schedule not in TWO_DIRECTIONS:
        return ()
    return tuple(f for f in (_fixed(table, table.tail, 0, p - 1), _fixed(table, table.head, 1, p - 1))
                 if f is not None)


def _fixed(layers: LayerTable, role_row, chunk: int, stage: int, time_cell=None) -> Fixed | None:
    if role_row is None:
        return None
    return Fixed(kind=str(role_row[KIND]), chunk=chunk, stage=stage, time_cell=time_cell,
                 forward_time=float(role_row[FORWARD_TIME]), backward_time=float(role_row[BACKWARD_TIME]),
                 param_mb=float(role_row[PARAM_MB]), activation_mb=float(role_row[ACTIVATION_MB]),
                 memory_once_mb=float(role_row[MEMORY_ONCE_MB]),
                 working_mb=layers.working_set_mb(str(role_row[KIND]), str(role_row[OPTION])))


def make_setup(layers, *, stages, micro_batches, memory_mb, chunks=1, schedule=None, less_memory=False,
               seq_split=1, seq_params=None, const_mb=None, objective="sapp", optimization_level=1,
               consistent_recompute=True, working_set=True, sapp_compat=False) -> BalanceSetup:
    """Validate ``balance``'s arguments and resolve the instance (see :func:`sappkit.balance`).

    Examples
    --------
    >>> import pandas as pd
    >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1,
    ...              backward_time=bt, activation_mb=a) for o, bt, a in (("none", 2, 50), ("full", 3, 5))]
    >>> setup = make_setup(pd.DataFrame(rows), stages=2, micro_batches=4, chunks=2, memory_mb=300)
    >>> setup.schedule, setup.items, setup.in_flight.tolist(), setup.overhead_terms(0)
    ('interleaved', (('b', 'none'), ('b', 'full')), [[3.0, 2.0], [2.0, 1.0]], [(1, 0, 1)])
    """
    table = as_layer_table(layers)
    if schedule is None:
        schedule = "1f1b" if chunks == 1 else "interleaved"
    schedule, p, m, v, k = check_pipeline(schedule, stages, micro_batches, chunks, less_memory, seq_split)
    memory_mb = check_number("memory_mb", memory_mb, minimum=0, strict=True, maximum=MAX_MEMORY_MB)
    objective = check_choice("objective", objective, OBJECTIVES)
    if objective == "step":  # its plan is the faster of two simulated ones
        check_simulated(p, m, v, k)
    level = check_int("optimization_level", optimization_level, minimum=0)
    check_bool("consistent_recompute", consistent_recompute)
    check_bool("working_set", working_set)
    check_sapp_compat(sapp_compat, schedule, working_set, objective)
    if level >= 2 and m * k < 2:
        raise InputError(f"optimization_level >= 2 needs micro_batches >= 2 (its bubble model weighs the "
                         f"stage time by m - 2); got micro_batches={m}")
    const = table.const_mb if const_mb is None else check_number("const_mb", const_mb, minimum=0, maximum=MAX_MEMORY_MB)
    notes = []
    if less_memory and v == 1:
        notes.append("less_memory has no effect with one chunk: a stage holds the 1F1B counts either way")
    if schedule == "seqpipe" and k > 1:
        table, seq_notes = rescale_for_seqpipe(table, k, seq_params)
        notes.extend(seq_notes)
    elif seq_params is not None:
        raise InputError(f"seq_params applies to schedule 'seqpipe' with seq_split > 1; got schedule "
                         f"{schedule!r}, seq_split={k}")
    kinds = table.body_kinds
    items, columns, counts = _item_columns(table)
    setup = BalanceSetup(
        layers=table, schedule=schedule, stages=p, micro_batches=m, chunks=v, less_memory=bool(less_memory),
        seq_split=k, memory_mb=memory_mb, const_mb=const, objective=objective, level=level,
        consistent_recompute=consistent_recompute, working_set=working_set, sapp_compat=sapp_compat, kinds=kinds,
        items=items, **columns, counts=counts,
        head=_fixed(table, table.head, 0, 0),
        tail=_fixed(table, table.tail, *tail_cell(schedule, p, v),
                    time_cell=sapp_tail_time_cell(schedule, p, v) if sapp_compat else None),
        mirrored=_mirrored(table, schedule, p),
        in_flight=(sapp_in_flight(schedule, p, m, v, less_memory, k) if sapp_compat else
                   in_flight_counts(schedule, p, m, v, less_memory, k)).astype(float),
    )
    if schedule not in SAPP_SCHEDULES:
        memory = ("the peak over the step order's memory events, as simulated" if working_set else
                  "Σ activation × in-flight (each cell's peak, a bound on the stage's)")
        notes.append(f"{schedule}: memory = {memory}; time: the sapp objective's closed form stands in for the "
                     "schedule, the step objective is its simulated step")
    if sapp_compat:
        notes.append("sapp_compat: SAPP's pipeline balancer's counts (1F1B and one-chunk SeqPipe in flight uncapped "
                     "at m, DualPipeV's tail time on its last stage); the simulator runs the schedule as it runs")
    if consistent_recompute and len(kinds) >= 2 and len(_considered(items)) > 2:
        notes.append(f"recompute consistency not applied: MindFormers' rule is defined for two options and "
                     f"the body kinds use {len(_considered(items))} ({', '.join(_considered(items))}), "
                     "as SAPP's pipeline balancer does")
    object.__setattr__(setup, "notes", tuple(notes))
    return setup
