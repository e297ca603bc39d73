"""The pipeline model's glue: from a layer table and an assignment to per-cell costs and per-stage memory.

An *assignment* is a frame with one row per (kind, chunk, stage, option):
``layers`` body layers of ``kind`` running ``option`` on cell (chunk, stage).
Head and tail are placed here, not in the assignment: the head on cell
(0, 0), the tail on (v - 1, p - 1), or (1, 0) for DualPipeV (the V ends on
stage 0) — time **and** memory. Under ``dualpipe`` (two copies of the
model, :mod:`sappkit.pipeline.schedules`) an assignment places one copy on
chunk 0, stages 0..p-1, as 1F1B does; :func:`cell_costs` mirrors it onto the
other copy, whose stage ``p - 1 - s`` runs on rank ``s`` as chunk 1, so each
rank holds the parameters of two stages.

- :func:`even_assignment` spreads the body layers evenly over the cells in
  model order.
- :func:`cell_costs` sums each cell's times and memory: the costs frame
  :func:`sappkit.simulate` takes.
- :func:`stage_memory` applies the micro-batches in flight
  (:func:`sappkit.in_flight`) to give per-stage memory in the shared schema.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from .._check import check_int, check_number
from .._frames import check_frame, whole_column
from ..columns import (
    ACTIVATION_MB, BACKWARD_INPUT_TIME, BACKWARD_TIME, BACKWARD_WEIGHT_TIME, CHUNK, CONST_MB, FORWARD_TIME, KIND,
    LAYERS, LIMIT_MB, MEMORY_MB, MEMORY_ONCE_MB, OPTION, OVERHEAD_MB, PARAM_MB, POSITIONAL_OPTIONS, RECOMPUTE_TIME,
    SPLIT_COLUMNS, STAGE, WEIGHT_PASS_MB, WORKING_MB,
)
from ..errors import InputError
from ..limits import MAX_MEMORY_MB, MAX_STAGES
from ..layers.table import LayerTable, as_layer_table
from ..layers.units import time_unit_of, with_time_unit
from .memory_events import NO_BACKWARD, memory_events
from .schedules import TWO_DIRECTIONS, check_pipeline, fewest_stages, in_flight_counts, model_order, tail_cell
from .simulator_inputs import STATIC_MB

__all__ = ["even_counts", "even_assignment", "cell_costs", "stage_memory", "positional_rank", "split_backward", "ASSIGNMENT",
           "COSTS"]

#: Columns of an assignment frame.
ASSIGNMENT = (KIND, CHUNK, STAGE, OPTION, LAYERS)
#: Columns of the costs frame :func:`cell_costs` returns.
COSTS = (STAGE, CHUNK, LAYERS, FORWARD_TIME, BACKWARD_TIME, RECOMPUTE_TIME, ACTIVATION_MB, PARAM_MB,
         MEMORY_ONCE_MB, WORKING_MB, CONST_MB, STATIC_MB)
#: Per-layer columns a cell sums, each times its layer count.
_SUMMED = (FORWARD_TIME, BACKWARD_TIME, RECOMPUTE_TIME, ACTIVATION_MB, PARAM_MB, MEMORY_ONCE_MB)


def positional_rank(option: str) -> int:
    """Where ``option``'s layers sit among a kind's layers in a cell: full, both, selective, comm, none, others.

    MindFormers' cumulative recompute counts put a cell's most recomputed
    layers first, so its last layer (the first its backward reaches) runs the
    least recompute present.
    """
    return POSITIONAL_OPTIONS.index(option) if option in POSITIONAL_OPTIONS else len(POSITIONAL_OPTIONS)


def even_assignment(layers, *, stages: int, chunks: int = 1, schedule: str = "1f1b",
                    option: str | Mapping[str, str] | None = None) -> pd.DataFrame:
    """Place the body layers evenly over the cells, in model order.

    Every cell gets ``L // (p v)`` layers and the ``L mod (p v)`` left over go
    one per cell, spread over the stages (each gets the same number, give or
    take one; the stages farthest from the head's and the tail's get the odd
    ones) and, within a stage, to the cells nearest the middle of model
    order. Kinds follow model order, so a cell may hold the end of one kind
    and the start of the next.

    Parameters
    ----------
    layers : LayerTable or DataFrame
    stages, chunks : int
    schedule : str
        One of :data:`sappkit.pipeline.schedules.SCHEDULES`; fixes model order (a V's chunk 1 runs back up).
    option : str or mapping kind -> option, optional
        What every layer (or each named kind) runs; by default each kind's
        first option, its least recompute.

    Returns
    -------
    DataFrame
        ``kind``, ``chunk``, ``stage``, ``option``, ``layers`` (> 0), in model order.

    Examples
    --------
    >>> table = pd.DataFrame([dict(kind="block", role="body", count=10, param_mb=1, option="none",
    ...                            forward_time=1, backward_time=2, activation_mb=1)])
    >>> even_assignment(table, stages=4)["layers"].tolist()
    [2, 3, 3, 2]
    """
    table = as_layer_table(layers)
    schedule, p, v = _check_shape(schedule, stages, chunks)
    if schedule in TWO_DIRECTIONS:  # one copy's stages, as 1F1B places them; cell_costs mirrors them
        return even_assignment(table, stages=p, option=option)
    chosen = _options(table, option)
    cells = model_order(schedule, p, v)
    per_cell = _even_counts(table.body_layers, cells, p, head_tail_stages=(0, cells[-1][1]))

    rows, kinds = [], [(kind, table.count(kind)) for kind in table.body_kinds]
    kind_index, left_of_kind = 0, kinds[0][1]
    for (chunk, stage), room in zip(cells, per_cell):
        while room:
            kind = kinds[kind_index][0]
            take = min(room, left_of_kind)
            rows.append((kind, chunk, stage, chosen[kind], int(take)))
            room -= take
            left_of_kind -= take
            if not left_of_kind and kind_index + 1 < len(kinds):
                kind_index += 1
                left_of_kind = kinds[kind_index][1]
    return pd.DataFrame(rows, columns=list(ASSIGNMENT))


def cell_costs(layers, assignment: pd.DataFrame, *, stages: int, chunks: int = 1, schedule: str = "1f1b",
               const_mb: float | None = None) -> pd.DataFrame:
    """Each cell's summed times and memory: the ``costs`` frame of :func:`sappkit.simulate`.

    Per cell (chunk, stage): ``forward_time``, ``backward_time`` and
    ``activation_mb`` sum its layers' values under their options, with the
    head's on (0, 0) and the tail's on its cell; ``recompute_time`` sums each
    layer's backward minus the least backward its kind has under any option
    (the recompute part; 0 for head and tail); ``param_mb`` and
    ``memory_once_mb`` sum what the layers hold; ``working_mb`` is what the
    cell's backward holds while it runs: the working set
    (:meth:`~sappkit.LayerTable.working_set_mb`) of the cell's last layer —
    the tail where the cell ends with it, else its last body layer in the
    order the cell runs them (kinds in model order, a kind's most recomputed
    layers first, :func:`positional_rank`), 0 for a cell with neither;
    ``const_mb`` (the layer table's constant unless given) sits on each
    stage's chunk-0 row; ``static_mb = param_mb + memory_once_mb + const_mb``.
    When the table has split-backward columns (``backward_input_time``,
    ``backward_weight_time``, ``weight_pass_mb``) they are summed too, a
    blank taking the simulator's default for its row (:func:`sappkit.simulate`).

    Returns
    -------
    DataFrame
        Columns :data:`COSTS` (and the split-backward ones), one row per cell, chunk-major, stages ascending.

    Examples
    --------
    >>> table = pd.DataFrame([
    ...     dict(kind="embed", role="head", count=1, param_mb=50, option="none",
    ...          forward_time=1, backward_time=2, activation_mb=5),
    ...     dict(kind="block", role="body", count=4, param_mb=100, option="none",
    ...          forward_time=2, backward_time=4, activation_mb=10),
    ...     dict(kind="block", role="body", count=4, param_mb=100, option="full",
    ...          forward_time=2, backward_time=6, activation_mb=1)])
    >>> plan = even_assignment(table, stages=2, option="full")
    >>> cell_costs(table, plan, stages=2)[["stage", "forward_time", "recompute_time", "static_mb"]]
       stage  forward_time  recompute_time  static_mb
    0      0           5.0             4.0      250.0
    1      1           4.0             4.0      200.0
    """
    table = as_layer_table(layers)
    schedule, p, v = _check_shape(schedule, stages, chunks)
    if schedule in TWO_DIRECTIONS:
        return _two_copies(cell_costs(table, assignment, stages=p, const_mb=const_mb))
    const = table.const_mb if const_mb is None else check_number("const_mb", const_mb, minimum=0, maximum=MAX_MEMORY_MB)
    placed = _checked_assignment(table, assignment, p, v)

    per_layer = table.frame.set_index([KIND, OPTION])
    rows = per_layer.loc[list(zip(placed[KIND], placed[OPTION]))]
    least_backward = table.frame.groupby(KIND)[BACKWARD_TIME].min()
    count = placed[LAYERS].to_numpy()
    cell = placed[CHUNK].to_numpy() * p + placed[STAGE].to_numpy()
    per_row = {column: rows[column].to_numpy() for column in _SUMMED if column != RECOMPUTE_TIME}
    per_row[RECOMPUTE_TIME] = per_row[BACKWARD_TIME] - least_backward.loc[placed[KIND]].to_numpy()
    split = [column for column in SPLIT_COLUMNS if column in table.frame.columns]
    if split:
        per_row.update(split_backward(rows, per_row[BACKWARD_TIME], per_row[RECOMPUTE_TIME], per_row[ACTIVATION_MB]))
    sums = {column: np.bincount(cell, weights=count * per_row[column], minlength=p * v)
            for column in (*_SUMMED, *(SPLIT_COLUMNS if split else ()))}

    for row, (chunk, stage) in ((table.head, (0, 0)), (table.tail, tail_cell(schedule, p, v))):
        if row is not None:
            fixed = {column: row[column] for column in (FORWARD_TIME, BACKWARD_TIME, ACTIVATION_MB, PARAM_MB,
                                                         MEMORY_ONCE_MB)}
            if split:
                fixed.update({column: float(values[0]) for column, values in split_backward(
                    row.to_frame().T, np.array([row[BACKWARD_TIME]]), np.zeros(1),
                    np.array([row[ACTIVATION_MB]])).items()})
            for column, value in fixed.items():
                sums[column][chunk * p + stage] += value
    sums[WORKING_MB] = _working_sets(table, placed, cell, tail_cell(schedule, p, v), p, v)
    chunks_of = np.repeat(np.arange(v), p)
    const_column = np.where(chunks_of == 0, const, 0.0)
    costs = pd.DataFrame({
        STAGE: np.tile(np.arange(p), v),
        CHUNK: chunks_of,
        LAYERS: np.bincount(cell, weights=count, minlength=p * v).astype(int),
        **sums,
        CONST_MB: const_column,
        STATIC_MB: sums[PARAM_MB] + sums[MEMORY_ONCE_MB] + const_column,
    })[[*COSTS, *(SPLIT_COLUMNS if split else ())]]
    return with_time_unit(costs, table.time_unit)


def _two_copies(one: pd.DataFrame) -> pd.DataFrame:
    """DualPipe's cells from one copy's (chunk 0, 1F1B's layout): chunk 1 on rank ``s`` holds stage ``p - 1 - s``;
    the constant stays once per rank, on chunk 0."""
    p = len(one)
    other = one.iloc[::-1].assign(**{STAGE: np.arange(p), CHUNK: 1, CONST_MB: 0.0})
    other[STATIC_MB] = other[PARAM_MB] + other[MEMORY_ONCE_MB]
    return with_time_unit(pd.concat([one, other], ignore_index=True), time_unit_of(one))


def split_backward(rows: pd.DataFrame, backward, recompute, activation) -> dict[str, np.ndarray]:
    """Per-layer split-backward values of layer-table ``rows``: those given, else the simulator's defaults
    (see :func:`sappkit.simulate`)."""
    def given(column, default):
        values = rows[column].to_numpy(dtype=float) if column in rows.columns else np.full(len(rows), np.nan)
        return np.where(np.isnan(values), default, values)

    weight = given(BACKWARD_WEIGHT_TIME, (backward - recompute) / 2)
    return {BACKWARD_WEIGHT_TIME: weight, BACKWARD_INPUT_TIME: given(BACKWARD_INPUT_TIME, backward - weight),
            WEIGHT_PASS_MB: given(WEIGHT_PASS_MB, activation)}


def _working_sets(table: LayerTable, placed: pd.DataFrame, cell: np.ndarray, tail_at: tuple[int, int],
                  p: int, v: int) -> np.ndarray:
    """Per cell, the working set of the layer its backward reaches first (:func:`cell_costs`)."""
    working = np.zeros(p * v)
    kinds = table.body_kinds
    last: dict[int, tuple[tuple[int, int], int]] = {}
    for row, (kind, option, index) in enumerate(zip(placed[KIND], placed[OPTION], cell)):
        order = (kinds.index(kind), positional_rank(option))
        if index not in last or order > last[index][0]:
            last[index] = (order, row)
    for index, (_, row) in last.items():
        working[index] = table.working_set_mb(placed.at[row, KIND], placed.at[row, OPTION])
    if table.tail is not None:
        working[tail_at[0] * p + tail_at[1]] = table.working_set_mb(str(table.tail[KIND]), str(table.tail[OPTION]))
    return working


def stage_memory(layers, assignment: pd.DataFrame, *, stages: int, micro_batches: int, chunks: int = 1,
                 schedule: str = "1f1b", less_memory: bool = False, seq_split: int = 1,
                 const_mb: float | None = None, limit_mb: float | None = None,
                 working_set: bool = True) -> pd.DataFrame:
    """Per-stage memory in the shared schema: the peak the simulator measures, from the schedule's order alone.

    ``activation_mb`` is Σ over the stage's cells of the cell's activation ×
    ``in_flight(s, c)`` plus ``memory_once_mb`` (for ``seqpipe`` the counts
    are slices and the layer table's activations per slice, as
    :func:`sappkit.pipeline.seqpipe.rescale_for_seqpipe` makes them);
    ``param_mb`` the layers' (and head's or tail's) parameters; ``const_mb``
    the table's constant unless given. By default the stage's memory is its
    peak over its memory events (:mod:`sappkit.pipeline.memory_events`), the
    balancer's and the chooser's model too: ``working_mb`` the working set
    (:func:`cell_costs`' ``working_mb``) of the cell whose backward runs at
    the peak, ``overhead_mb`` the peak's activations above ``Σ in_flight ×
    activation`` (0 for 1F1B, where the peak is the last-chunk cell's first
    backward; it may be negative where no event holds every cell's in-flight
    count). With ``working_set=False`` (SAPP's pipeline balancer's
    model without its interleaved overhead) both are 0. ``memory_mb`` is the sum.

    Examples
    --------
    >>> table = pd.DataFrame([dict(kind="block", role="body", count=8, param_mb=100, option="none",
    ...                            forward_time=1, backward_time=2, activation_mb=10)])
    >>> plan = even_assignment(table, stages=4)
    >>> stage_memory(table, plan, stages=4, micro_batches=8, const_mb=1000)["memory_mb"].tolist()
    [1290.0, 1270.0, 1250.0, 1230.0]
    >>> stage_memory(table, plan, stages=4, micro_batches=8, const_mb=1000, working_set=False)["memory_mb"].tolist()
    [1280.0, 1260.0, 1240.0, 1220.0]
    """
    costs = cell_costs(layers, assignment, stages=stages, chunks=chunks, schedule=schedule, const_mb=const_mb)
    counts = in_flight_counts(schedule, stages, micro_batches, chunks, less_memory, seq_split)
    limit = np.nan if limit_mb is None else check_number("limit_mb", limit_mb, minimum=0, strict=True,
                                                         maximum=MAX_MEMORY_MB)
    v, p = counts.shape

    def per_stage(values) -> np.ndarray:  # costs rows run chunk-major, stages ascending
        return np.asarray(values, dtype=float).reshape(v, p).sum(axis=0)

    param, const = per_stage(costs[PARAM_MB]), per_stage(costs[CONST_MB])
    activation = per_stage(costs[ACTIVATION_MB].to_numpy().reshape(v, p) * counts) + per_stage(costs[MEMORY_ONCE_MB])
    if not isinstance(working_set, bool):
        raise InputError(f"working_set must be a bool; got {working_set!r}")
    overhead, working = np.zeros(p), np.zeros(p)
    if working_set:
        cell_activation = costs[ACTIVATION_MB].to_numpy().reshape(v, p)
        cell_working = costs[WORKING_MB].to_numpy().reshape(v, p)
        in_flight = per_stage(cell_activation * counts)
        for s, events in enumerate(memory_events(schedule, stages, micro_batches, chunks, less_memory, seq_split)):
            peaks = events.peak(cell_activation[:, s], cell_working[:, s])
            event = int(np.argmax(peaks))  # the first of equal peaks, as the simulator reports it
            running = int(events.running[event])
            working[s] = cell_working[running, s] if running != NO_BACKWARD else 0.0
            overhead[s] = peaks[event] - working[s] - in_flight[s]
    return pd.DataFrame({
        STAGE: np.arange(p), PARAM_MB: param, ACTIVATION_MB: activation, OVERHEAD_MB: overhead,
        WORKING_MB: working, CONST_MB: const, MEMORY_MB: param + activation + overhead + working + const,
        LIMIT_MB: limit,
    })


def even_counts(total: int, *, schedule: str, stages: int, chunks: int = 1) -> np.ndarray:
    """Body layers per cell, in model order, as :func:`even_assignment` places ``total`` of them.

    Examples
    --------
    >>> even_counts(10, schedule="1f1b", stages=4).tolist()
    [2, 3, 3, 2]
    """
    cells = model_order(schedule, stages, chunks)
    return _even_counts(total, cells, stages, head_tail_stages=(0, cells[-1][1]))


def _even_counts(total: int, cells: list[tuple[int, int]], p: int, head_tail_stages: tuple[int, int]) -> np.ndarray:
    """Layers per cell (in model order): the base everywhere, the leftovers spread over the stages first."""
    base, extra = divmod(total, len(cells))
    per_stage = np.full(p, extra // p)
    by_distance = sorted(range(p), key=lambda s: (-min(abs(s - t) for t in head_tail_stages), s))
    per_stage[by_distance[:extra % p]] += 1
    middle = (len(cells) - 1) / 2
    counts = np.full(len(cells), base)
    for stage in range(p):
        positions = sorted((i for i, (_, s) in enumerate(cells) if s == stage), key=lambda i: (abs(i - middle), i))
        counts[positions[:per_stage[stage]]] += 1
    return counts


def _check_shape(schedule, stages, chunks) -> tuple[str, int, int]:
    """Validate schedule, stages and chunks (micro-batches do not matter here)."""
    p = check_int("stages", stages, minimum=fewest_stages(schedule), maximum=MAX_STAGES,
                  why="a pipeline needs at least two stages")
    schedule, p, _, v, _ = check_pipeline(schedule, p, 2 * p, chunks)
    return schedule, p, v


def _options(table: LayerTable, option) -> dict[str, str]:
    """The option each body kind runs: its first by default, else the one given (for all or per kind)."""
    chosen = {kind: table.options(kind)[0] for kind in table.body_kinds}
    if option is None:
        return chosen
    if isinstance(option, str):
        asked = dict.fromkeys(table.body_kinds, option)
    elif isinstance(option, Mapping):
        asked = dict(option)
    else:
        raise InputError(f"option must be an option name or a mapping kind -> option; got {option!r}")
    for kind, name in asked.items():
        if kind not in chosen:
            raise InputError(f"option names kind {kind!r}, which is not a body kind; body kinds are "
                             f"{', '.join(map(repr, table.body_kinds))}")
        if name not in table.options(kind):
            raise InputError(f"option {name!r} is not an option of kind {kind!r}; its options are "
                             f"{', '.join(map(repr, table.options(kind)))}")
        chosen[kind] = name
    return chosen


def _checked_assignment(table: LayerTable, assignment, p: int, v: int) -> pd.DataFrame:
    """Validate an assignment against the table and the pipeline shape; return a clean copy."""
    check_frame(assignment, "assignment", ASSIGNMENT, "an assignment")
    placed = assignment[list(ASSIGNMENT)].reset_index(drop=True).copy()
    for column, upper in ((CHUNK, v), (STAGE, p), (LAYERS, None)):
        placed[column] = whole_column(placed, column, "assignment", upper)
    options = {kind: table.options(kind) for kind in table.body_kinds}
    for row, (kind, option) in enumerate(zip(placed[KIND], placed[OPTION])):
        if kind not in options:
            raise InputError(f"assignment row {row} kind {kind!r} is not a body kind; body kinds are "
                             f"{', '.join(map(repr, table.body_kinds))} (head and tail are placed for you)")
        if option not in options[kind]:
            raise InputError(f"assignment row {row} option {option!r} is not an option of kind {kind!r}; "
                             f"its options are {', '.join(map(repr, options[kind]))}")
    duplicated = placed.duplicated([KIND, CHUNK, STAGE, OPTION])
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        raise InputError(f"assignment row {row} repeats (kind, chunk, stage, option) = "
                         f"({placed.at[row, KIND]!r}, {placed.at[row, CHUNK]}, {placed.at[row, STAGE]}, "
                         f"{placed.at[row, OPTION]!r}); give each once")
    totals = placed.groupby(KIND)[LAYERS].sum()
    for kind in table.body_kinds:
        placed_count = int(totals.get(kind, 0))
        if placed_count != table.count(kind):
            raise InputError(f"assignment places {placed_count} layers of kind {kind!r}; "
                             f"the layer table has {table.count(kind)}")
    return placed
