"""The partition the recompute chooser works on: which body layers sit on which pipeline cell.

A :class:`Partition` fixes the pipeline (stages, chunks, micro-batches,
schedule) and, per cell ``(chunk, stage)``, the body kinds it holds and how
many layers of each, in model order. Body layers are numbered ``0..L-1`` in
model order, head and tail excluded: the trainers' block indices. Each layer may carry its *configured* option,
the recompute the runtime gives it today (the baseline ``time_saved`` is measured against where it fits).

Three ways to build one:

- explicitly, with a ``cells`` frame (``chunk``, ``stage``, ``kind``,
  ``layers``) and optionally ``configured`` (one option per body layer, or
  one option for all);
- from a balancer assignment frame (``kind``, ``chunk``, ``stage``,
  ``option``, ``layers``) with :meth:`Partition.from_assignment`, which is
  what ``Plan.partition()`` calls;
- from MindFormers offsets and recompute lists with
  :meth:`Partition.from_offsets`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from .._check import short
from .._frames import check_frame, name_column, whole_column
from ..columns import CHUNK, IN_FLIGHT, KIND, LAYERS, OPTION, STAGE
from ..errors import InputError
from ..layers.table import as_layer_table
from ..layers.units import chunks_text
from ..limits import MAX_CHUNKS, MAX_LAYERS, MAX_STAGES
from ..pipeline.schedules import Schedule, check_one_copy, check_pipeline, in_flight, in_flight_counts, model_order

__all__ = ["Partition"]

LAYER = "layer"
CONFIGURED = "configured"
#: Columns of :attr:`Partition.cells`.
CELL_COLUMNS = (CHUNK, STAGE, KIND, LAYERS)
#: MindFormers' cumulative recompute lists, in the order a cell's first layers take them.
_RECOMPUTE_KEYS = ("recompute", "select_recompute", "select_comm_recompute")
#: Which of those lists make a layer run each option.
_COUNTED_BY = {"full": "recompute", "both": "select_recompute and select_comm_recompute",
               "selective": "select_recompute", "comm": "select_comm_recompute", "none": "none of them"}


@dataclass(frozen=True, kw_only=True, eq=False)
class Partition:
    """Body layers placed on pipeline cells, with each layer's configured option.

    Build it explicitly, or with :meth:`from_assignment` (the balancer's
    ``assignment`` frame: ``Plan.partition()`` is
    ``Partition.from_assignment(plan.assignment, stages=..., micro_batches=...,
    chunks=..., schedule=..., less_memory=..., kind_order=layers.body_kinds)``),
    or with :meth:`from_offsets` (MindFormers ``offset`` and recompute lists).

    Parameters
    ----------
    stages, micro_batches : int
        ``p`` (>= 2) and ``m``.
    cells : DataFrame
        One row per (cell, kind): ``chunk``, ``stage``, ``kind``, ``layers``
        (>= 0). Rows of one cell are in model order; cells may come in any
        order and are sorted into model order. Rows with 0 layers place
        nothing; consecutive rows of one kind in a cell are merged.
    chunks : int
        ``v``, chunks per stage.
    schedule : {"1f1b", "interleaved", "dualpipev", "seqpipe"}, optional
        Default ``"1f1b"`` for one chunk, ``"interleaved"`` for more.
    less_memory : bool
        The less-memory interleaved variant.
    seq_split : int
        SeqPipe's slices per micro-batch.
    configured : str or sequence of str, optional
        Each body layer's configured option in model order, or one option for
        every layer. ``None``: every layer runs its kind's least-recompute
        option (``none`` where the kind has it), resolved against the layer
        table when the partition is priced.

    Examples
    --------
    >>> cells = pd.DataFrame({"chunk": [0, 0], "stage": [0, 1], "kind": ["block", "block"],
    ...                       "layers": [3, 5]})
    >>> part = Partition(stages=2, micro_batches=4, cells=cells, configured="full")
    >>> part.layer_count, part.schedule
    (8, '1f1b')
    >>> part.body.groupby("stage")["in_flight"].first().tolist()
    [2, 1]
    """

    stages: int
    micro_batches: int
    cells: pd.DataFrame
    chunks: int = 1
    schedule: Schedule | None = None
    less_memory: bool = False
    seq_split: int = 1
    configured: tuple[str, ...] | str | None = None
    _order: tuple[tuple[int, int], ...] = field(init=False, repr=False)

    def __post_init__(self):
        schedule = self.schedule if self.schedule is not None else "1f1b" if self.chunks == 1 else "interleaved"
        schedule, p, m, v, k = check_pipeline(schedule, self.stages, self.micro_batches, self.chunks,
                                              self.less_memory, self.seq_split)
        for name, value in (("stages", p), ("micro_batches", m), ("chunks", v), ("seq_split", k),
                            ("schedule", schedule), ("less_memory", bool(self.less_memory))):
            object.__setattr__(self, name, value)
        check_one_copy(schedule, "the recompute partition")
        object.__setattr__(self, "_order", tuple(model_order(schedule, p, v)))
        object.__setattr__(self, "cells", _clean_cells(self.cells, p, v, self._order))
        if self.layer_count > MAX_LAYERS:
            raise InputError(f"cells place {self.layer_count} body layers; expected at most {MAX_LAYERS.cited}")
        object.__setattr__(self, "configured", _clean_configured(self.configured, self.layer_count))

    @property
    def layer_count(self) -> int:
        """Body layers placed, all kinds together."""
        return int(self.cells[LAYERS].sum())

    @cached_property
    def in_flight_counts(self) -> np.ndarray:
        """Micro-batches in flight as an int array ``[chunk, stage]`` (see :func:`sappkit.in_flight`)."""
        return in_flight_counts(self.schedule, self.stages, self.micro_batches, self.chunks,
                                self.less_memory, self.seq_split)

    @property
    def in_flight(self) -> pd.DataFrame:
        """Micro-batches in flight per cell: ``stage``, ``chunk``, ``in_flight``."""
        return in_flight(self.schedule, self.stages, self.micro_batches, self.chunks,
                         self.less_memory, self.seq_split)

    @cached_property
    def body(self) -> pd.DataFrame:
        """One row per body layer in model order.

        Columns ``layer`` (index), ``chunk``, ``stage``, ``kind``,
        ``in_flight`` and ``configured`` (None where not configured).
        """
        repeat = self.cells[LAYERS].to_numpy()
        chunk = np.repeat(self.cells[CHUNK].to_numpy(), repeat)
        stage = np.repeat(self.cells[STAGE].to_numpy(), repeat)
        configured = [None] * self.layer_count if self.configured is None else list(self.configured)
        return pd.DataFrame({
            LAYER: np.arange(self.layer_count), CHUNK: chunk, STAGE: stage,
            KIND: np.repeat(self.cells[KIND].to_numpy(), repeat),
            IN_FLIGHT: self.in_flight_counts[chunk, stage], CONFIGURED: configured,
        })

    @property
    def assignment(self) -> pd.DataFrame:
        """Layers per cell, kind and configured option: ``kind``, ``chunk``, ``stage``, ``option``, ``layers``.

        The balancer's assignment form; ``option`` is None where the
        partition is not configured.
        """
        body = self.body.assign(**{OPTION: self.body[CONFIGURED], "run": _runs(self.body)})
        grouped = body.groupby("run", sort=True)
        first = grouped.first()
        return pd.DataFrame({KIND: first[KIND], CHUNK: first[CHUNK], STAGE: first[STAGE],
                             OPTION: first[OPTION], LAYERS: grouped.size()}).reset_index(drop=True)

    def describe(self) -> str:
        """One line per stage: its layers per chunk and kind."""
        lines = [f"{self.schedule}: {self.stages} stages x {self.chunks} chunk(s), {self.micro_batches} micro-batches, "
                 f"{self.layer_count} body layers"]
        for stage, rows in self.cells.groupby(STAGE, sort=True):
            texts = [", ".join(f"{k} x{n}" for k, n in zip(cell[KIND], cell[LAYERS])) for _, cell in rows.groupby(CHUNK)]
            lines.append(f"stage {stage}: {chunks_text(texts)}")
        return "\n".join(lines)

    @classmethod
    def from_assignment(cls, assignment: pd.DataFrame, *, stages: int, micro_batches: int, chunks: int = 1,
                        schedule: Schedule | None = None, less_memory: bool = False, seq_split: int = 1,
                        kind_order: Sequence[str] | None = None) -> Partition:
        """A partition from an assignment frame (``kind``, ``chunk``, ``stage``, ``layers``, optional ``option``).

        Within a cell, kinds follow ``kind_order`` (model order, e.g.
        ``layers.body_kinds``; default: the order kinds first appear), and a
        kind's options the order their rows appear (put the most recomputed
        first, as MindFormers recomputes a stage's first layers). Without an
        ``option`` column the partition is not configured.

        Examples
        --------
        >>> frame = pd.DataFrame({"kind": ["b", "b", "b"], "chunk": [0, 0, 0], "stage": [0, 1, 1],
        ...                       "option": ["none", "full", "none"], "layers": [2, 1, 2]})
        >>> Partition.from_assignment(frame, stages=2, micro_batches=4).configured
        ('none', 'none', 'full', 'none', 'none')
        """
        schedule, stages, _, chunks, _ = check_pipeline(schedule or ("1f1b" if chunks == 1 else "interleaved"),
                                                        stages, micro_batches, chunks, less_memory, seq_split)
        frame = _frame("assignment", assignment, (KIND, CHUNK, STAGE, LAYERS), "an assignment")
        if OPTION in frame.columns:  # None on every row: an unconfigured partition's (Partition.assignment)
            frame = frame.assign(**{OPTION: name_column(frame, OPTION, "assignment")}) \
                if frame[OPTION].notna().any() else frame.drop(columns=OPTION)
        order = list(dict.fromkeys(frame[KIND])) if kind_order is None else list(kind_order)
        unknown = sorted(set(frame[KIND]) - set(order))
        if unknown:
            raise InputError(f"assignment kind {unknown[0]!r} is not in kind_order {short(order)}; "
                             "list every kind of the assignment in model order")
        frame = frame.assign(_rank=frame[KIND].map(order.index), _row=np.arange(len(frame)))
        frame = frame.sort_values(["_rank", "_row"], kind="stable")
        cells = frame[[CHUNK, STAGE, KIND, LAYERS]]
        options = frame[OPTION].tolist() if OPTION in frame.columns else None
        configured = None
        if options is not None:
            sorted_cells = _clean_cells(cells, stages, chunks, tuple(model_order(schedule, stages, chunks)))
            configured = _options_in_model_order(frame, sorted_cells, options)
        return cls(stages=stages, micro_batches=micro_batches, cells=cells, chunks=chunks, schedule=schedule,
                   less_memory=less_memory, seq_split=seq_split, configured=configured)

    @classmethod
    def from_offsets(cls, layers, *, stages: int, micro_batches: int, offset=0, chunks: int = 1,
                     schedule: Schedule | None = None, less_memory: bool = False, seq_split: int = 1,
                     recompute=None, select_recompute=None, select_comm_recompute=None) -> Partition:
        """A partition from MindFormers ``offset`` and recompute lists.

        A cell holds ``L // (p v) + offset[c][s]`` body layers (``offset``: an
        int for every cell, a list per stage for one chunk, a list of lists
        per chunk otherwise); the layer table's body kinds fill the cells in
        model order. The recompute lists are MindFormers' cumulative counts
        (``True``: every layer of the cell; a bool or int per cell; same
        shapes as ``offset``): a cell's first ``recompute`` layers run
        ``full``; of the rest, those within both ``select_recompute`` and
        ``select_comm_recompute`` run ``both``, within one of them
        ``selective`` or ``comm``; the others ``none``.

        Examples
        --------
        >>> from sappkit.layers.table import LayerTable
        >>> rows = [dict(kind="b", role="body", count=8, param_mb=1, option=o, forward_time=1,
        ...              backward_time=2, activation_mb=a) for o, a in (("none", 9), ("full", 1))]
        >>> part = Partition.from_offsets(LayerTable(pd.DataFrame(rows)), stages=2, micro_batches=4,
        ...                               offset=[1, -1], recompute=[2, True])
        >>> part.cells["layers"].tolist(), part.configured.count("full")
        ([5, 3], 5)
        """
        table = as_layer_table(layers)
        schedule, p, _, v, _ = check_pipeline(schedule or ("1f1b" if chunks == 1 else "interleaved"),
                                              stages, micro_batches, chunks, less_memory, seq_split)
        total = table.body_layers
        counts = _per_cell("offset", offset, v, p, allow_bool=False) + total // (p * v)
        if (counts < 0).any():
            c, s = np.argwhere(counts < 0)[0]
            raise InputError(f"offset gives cell (chunk {c}, stage {s}) {counts[c, s]} layers "
                             f"({total // (p * v)} + offset); a cell holds >= 0 layers")
        if counts.sum() != total:
            raise InputError(f"offset places {int(counts.sum())} body layers; the layer table has {total} "
                             f"(so the offsets must sum to {total - (total // (p * v)) * p * v})")
        order = model_order(schedule, p, v)
        kinds = [str(kind) for kind in np.repeat(table.body_kinds, [table.count(kind) for kind in table.body_kinds])]
        per_layer_cell = np.repeat(np.arange(len(order)), [counts[c, s] for c, s in order])
        cells = pd.DataFrame({CHUNK: [order[i][0] for i in per_layer_cell],
                              STAGE: [order[i][1] for i in per_layer_cell], KIND: kinds, LAYERS: 1})
        lists = {key: value for key, value in zip(_RECOMPUTE_KEYS, (recompute, select_recompute,
                                                                   select_comm_recompute))}
        configured = _configured_from_lists(lists, counts, order, kinds, table)
        return cls(stages=p, micro_batches=micro_batches, cells=cells, chunks=v, schedule=schedule,
                   less_memory=less_memory, seq_split=seq_split, configured=configured)


def _frame(name: str, frame, columns: Sequence[str], what: str) -> pd.DataFrame:
    check_frame(frame, name, columns, what)
    frame = frame.reset_index(drop=True)
    numbers = {column: whole_column(frame, column, name, maximum=limit)
               for column, limit in ((CHUNK, MAX_CHUNKS), (STAGE, MAX_STAGES), (LAYERS, MAX_LAYERS))}
    return frame.assign(**numbers, **{KIND: name_column(frame, KIND, name)})


def _clean_cells(cells, p: int, v: int, order: tuple[tuple[int, int], ...]) -> pd.DataFrame:
    """Validate the cells frame; return it in model order, zero rows dropped, runs of a kind merged."""
    frame = _frame("cells", cells, CELL_COLUMNS, "a cells frame")
    for row in range(len(frame)):
        chunk, stage = frame.at[row, CHUNK], frame.at[row, STAGE]
        if chunk >= v or stage >= p:
            raise InputError(f"cells row {row} places layers on (chunk {chunk}, stage {stage}); the pipeline "
                             f"has chunks 0..{v - 1} and stages 0..{p - 1}")
    rank = {cell: i for i, cell in enumerate(order)}
    frame = pd.DataFrame({CHUNK: frame[CHUNK].astype(int), STAGE: frame[STAGE].astype(int),
                          KIND: frame[KIND].astype(str), LAYERS: frame[LAYERS].astype(int)})
    frame = frame[frame[LAYERS] > 0]
    frame = frame.assign(_rank=[rank[c, s] for c, s in zip(frame[CHUNK], frame[STAGE])],
                         _row=np.arange(len(frame)))
    frame = frame.sort_values(["_rank", "_row"], kind="stable").reset_index(drop=True)
    run = _runs(frame)
    merged = frame.groupby(run, sort=True).agg({CHUNK: "first", STAGE: "first", KIND: "first", LAYERS: "sum"})
    return merged.reset_index(drop=True)[list(CELL_COLUMNS)]


def _runs(frame: pd.DataFrame) -> np.ndarray:
    """A run number per row: consecutive rows of one cell and kind (and configured option) share it."""
    keys = [frame[CHUNK].to_numpy(), frame[STAGE].to_numpy(), frame[KIND].to_numpy()]
    if CONFIGURED in frame.columns:
        keys.append(np.array([str(value) for value in frame[CONFIGURED]]))
    changed = np.zeros(len(frame), dtype=bool)
    for key in keys:
        changed[1:] |= key[1:] != key[:-1]
    return np.cumsum(changed)


def _clean_configured(configured, count: int) -> tuple[str, ...] | None:
    if configured is None:
        return None
    if isinstance(configured, str):
        return (configured,) * count
    if not isinstance(configured, Sequence | np.ndarray | pd.Series):
        raise InputError(f"configured must be an option name or a sequence of {count} option names; "
                         f"got {type(configured).__name__}")
    configured = tuple(configured)
    if len(configured) != count:
        raise InputError(f"configured has {len(configured)} options; the partition places {count} body layers "
                         "(give one option per body layer in model order, or one option for all)")
    for index, option in enumerate(configured):
        if not isinstance(option, str) or not option.strip():
            raise InputError(f"configured[{index}] is {short(option)}; expected an option name (str)")
    return configured


def _options_in_model_order(frame: pd.DataFrame, cells: pd.DataFrame, options: list[str]) -> tuple[str, ...]:
    """Each layer's option: per (cell, kind) the assignment's rows in their order, cells in model order."""
    by_key: dict[tuple[int, int, str], list[str]] = {}
    for (chunk, stage, kind, layers), option in zip(frame[[CHUNK, STAGE, KIND, LAYERS]].itertuples(index=False),
                                                     options):
        by_key.setdefault((int(chunk), int(stage), str(kind)), []).extend([option] * int(layers))
    configured: list[str] = []
    for chunk, stage, kind, layers in cells.itertuples(index=False):
        queue = by_key[chunk, stage, kind]
        configured.extend(queue[:layers])
        del queue[:layers]
    return tuple(configured)


def _per_cell(name: str, value, v: int, p: int, *, allow_bool: bool, layers: np.ndarray | None = None) -> np.ndarray:
    """A MindFormers per-stage value as an int array ``[chunk, stage]`` (``True`` = every layer of the cell)."""
    def number(item, where: str) -> int | None:
        """The item as an int, or None for ``True`` (every layer of its cell)."""
        if isinstance(item, bool | np.bool_) and allow_bool:
            return None if item else 0
        whole = isinstance(item, int | np.integer) and not isinstance(item, bool | np.bool_)
        if whole and abs(item) <= MAX_LAYERS:
            return int(item)
        bounds = f" from -{MAX_LAYERS} to {MAX_LAYERS.cited}" if whole else ""
        raise InputError(f"{name}{where} is {short(item)}; expected {'a bool or ' if allow_bool else ''}an int{bounds}")

    if value is None:
        return np.zeros((v, p), dtype=int)
    if not isinstance(value, list | tuple):
        items = [[number(value, "")] * p] * v
    else:
        rows = list(value)
        nested = any(isinstance(item, list | tuple) for item in rows)
        if not nested and v == 1:
            rows = [rows]
        if not nested and v > 1:
            raise InputError(f"{name} must be a list of {v} lists (one per chunk) for {v} chunks; got {short(value)}")
        if len(rows) != v or any(not isinstance(row, list | tuple) or len(row) != p for row in rows):
            raise InputError(f"{name} must hold {v} list(s) of {p} values (chunk x stage); got {short(value)}")
        items = [[number(item, f"[{c}][{s}]") for s, item in enumerate(row)] for c, row in enumerate(rows)]
    every = np.array([[item is None for item in row] for row in items], dtype=bool)
    grid = np.array([[0 if item is None else item for item in row] for row in items], dtype=int)
    if layers is not None:
        grid = np.where(every, layers, grid)
        over = np.argwhere((grid > layers) | (grid < 0))
        if over.size:
            c, s = over[0]
            raise InputError(f"{name}[{c}][{s}] is {grid[c, s]}; cell (chunk {c}, stage {s}) holds "
                             f"{layers[c, s]} layers (a count is between 0 and the cell's layers)")
    return grid


def _configured_from_lists(lists: dict, counts: np.ndarray, order, kinds: list[str], table) -> tuple[str, ...]:
    """Each layer's option from MindFormers' cumulative per-cell recompute counts."""
    v, p = counts.shape
    full, select, comm = (_per_cell(key, lists[key], v, p, allow_bool=True, layers=counts) for key in _RECOMPUTE_KEYS)
    configured = []
    for c, s in order:
        for position in range(counts[c, s]):
            if position < full[c, s]:
                option = "full"
            elif position < select[c, s] and position < comm[c, s]:
                option = "both"
            elif position < select[c, s]:
                option = "selective"
            elif position < comm[c, s]:
                option = "comm"
            else:
                option = "none"
            configured.append(option)
    for index, (kind, option) in enumerate(zip(kinds, configured)):
        if option not in table.options(kind):
            raise InputError(f"the recompute lists ({_COUNTED_BY[option]}) configure body layer {index} (kind "
                             f"{kind!r}) as {option!r}, but kind {kind!r} has no such option (its options: "
                             f"{', '.join(map(repr, table.options(kind)))})")
    return tuple(configured)
