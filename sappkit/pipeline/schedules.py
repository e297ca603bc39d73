"""Pipeline schedules: micro-batches in flight per cell, and the balancer's schedule factors.

A *cell* is (chunk, stage). ``in_flight`` counts how many micro-batches (or
SeqPipe slices) a cell holds activations for at its peak; every memory model
multiplies a layer's per-micro-batch activation by it. The counts follow the
SAPP pipeline balancer (docs/design.md "Pipelines and schedules"):

- ``1f1b``: ``p - s``, capped at ``m`` (a stage never holds more micro-batches
  than the step has; SAPP leaves this uncapped).
- ``interleaved``: every cell starts at ``p``; chunk 0 adds ``max(0, p-2s-1)``
  and the last chunk adds ``min(0, p-2s-1)``; capped at ``m``. With
  ``less_memory`` the last chunk holds ``p - s`` instead. One chunk is 1F1B.
- ``dualpipev`` (two chunks, the V): chunk 0 ``min(2p - s, m)``, chunk 1
  ``min(s + 1, m)``.
- ``seqpipe`` (each micro-batch cut into ``k`` slices, ``m k`` in all): one
  chunk holds ``p - s + k - 1`` slices; with more chunks the last holds ``k``
  and the earlier chunks take the remainder stage by stage (2 slices a step,
  1 with ``less_memory``), capped at ``m k``.

The schedules ``torch.distributed.pipelining`` runs (orders in
:mod:`sappkit.pipeline.orders` and :mod:`sappkit.pipeline.zero_bubble`; a
micro-batch counts until its weight pass ends), each count the cell's peak
in the simulator:

- ``gpipe`` and ``looped_bfs``: every forward before any backward, ``m`` everywhere.
- ``zb_interleaved``: counted by walking its order (the weight passes' lag
  and the rounds interleave; no closed form): e.g. one round (``m < 2p``)
  holds ``m`` on every chunk but the last and ``min(m, p)`` on the last.
- ``zbv`` and ``dualpipev_split``: as ``dualpipev``.

``dualpipe`` (DeepSeek-V3's bidirectional DualPipe, two model copies): rank
``s`` holds stage ``s`` of the forward-direction copy as chunk 0 and stage
``p - 1 - s`` of the reverse-direction copy as chunk 1; half the
micro-batches run down chunk 0 from rank 0, half up chunk 1 from rank
``p - 1`` (:func:`model_order` lists both copies' cells, :func:`directions`
says where the second begins). Each direction holds what 1F1B does: chunk 0
``p - s``, chunk 1 ``s + 1``, ``p + 1`` per rank (the report's "PP + 1").
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

import numpy as np
import pandas as pd

from .._check import check_bool, check_choice, check_int
from ..columns import CHUNK, IN_FLIGHT, STAGE
from ..errors import InputError
from ..limits import MAX_CHUNKS, MAX_MICRO_BATCHES, MAX_SEQ_SPLIT, MAX_SIMULATED_PASSES, MAX_STAGES
from . import zero_bubble

__all__ = ["Schedule", "SCHEDULES", "SAPP_SCHEDULES", "V_SHAPED", "SPLIT_BACKWARD", "schedule_chunks", "in_flight",
           "in_flight_counts", "forward_in_backward", "check_pipeline", "check_simulated", "model_order",
           "tail_cell", "one_stage_allowed", "fewest_stages", "TWO_DIRECTIONS", "directions",
           "check_one_copy"]

Schedule = Literal["1f1b", "interleaved", "dualpipev", "seqpipe", "gpipe", "looped_bfs", "zb_interleaved", "zbv",
                   "dualpipev_split", "dualpipe"]
SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved", "dualpipev", "seqpipe", "gpipe", "looped_bfs",
                              "zb_interleaved", "zbv", "dualpipev_split", "dualpipe")
#: The schedules of the original tool, whose interleaved overhead and time factors the ``sapp`` balancer models.
SAPP_SCHEDULES: tuple[str, ...] = SCHEDULES[:4]
#: Two chunks in a V: chunk 1 runs back up the stages and the model ends on stage 0.
V_SHAPED: tuple[str, ...] = ("dualpipev", "zbv", "dualpipev_split")
#: Schedules whose backward splits into an input-gradient and a weight-gradient pass.
SPLIT_BACKWARD: tuple[str, ...] = ("zb_interleaved", "zbv", "dualpipev_split", "dualpipe")
#: Two model copies run in opposite directions, each chunk one copy's stage (DualPipe).
TWO_DIRECTIONS: tuple[str, ...] = ("dualpipe",)
#: Chunks a schedule fixes (and the schedule running other chunk counts); the others take the caller's.
_FIXED_CHUNKS = {"1f1b": (1, "interleaved"), "gpipe": (1, "looped_bfs"),
                 **{v: (2, None) for v in V_SHAPED + TWO_DIRECTIONS}}


#: Whether :func:`check_pipeline` accepts one stage (see :func:`one_stage_allowed`).
_ONE_STAGE = ContextVar("one_stage", default=False)


@contextmanager
def one_stage_allowed(allowed: bool = True):
    """Within it (where ``allowed``), a pipeline may have one stage under ``1f1b``: a run without a pipeline.

    A trainer config at pipeline parallel size 1 (Megatron-LM's default) runs
    every layer on one device, micro-batch after micro-batch, which is 1F1B
    on one stage: one micro-batch in flight, the working set of the layer that
    ends warm-up, ``m`` times the stage's time. The config checker prices it
    with the pipeline's own models inside this context; everywhere else one
    stage is refused, since the balancer, the chooser and the simulator are
    asked about pipelines.

    Examples
    --------
    >>> with one_stage_allowed():
    ...     check_pipeline("1f1b", 1, 4)
    ('1f1b', 1, 4, 1, 1)
    """
    token = _ONE_STAGE.set(bool(allowed) or _ONE_STAGE.get())
    try:
        yield
    finally:
        _ONE_STAGE.reset(token)


def fewest_stages(schedule) -> int:
    """The fewest stages :func:`check_pipeline` accepts for ``schedule``: 1 for ``1f1b`` in
    :func:`one_stage_allowed`, else 2."""
    return 1 if schedule == "1f1b" and _ONE_STAGE.get() else 2


def schedule_chunks(schedule: str, chunks: int) -> int:
    """The chunks ``schedule`` runs: 1 for ``1f1b``, 2 for the V shapes and DualPipe, else ``chunks`` (for
    dashboards' sliders).

    Examples
    --------
    >>> schedule_chunks("dualpipev", 3), schedule_chunks("interleaved", 3)
    (2, 3)
    """
    return _FIXED_CHUNKS.get(schedule, (chunks,))[0]


def check_pipeline(schedule: str, stages, micro_batches, chunks=1, less_memory: bool = False,
                   seq_split=1) -> tuple[str, int, int, int, int]:
    """Validate a pipeline shape; return ``(schedule, p, m, v, k)`` or raise naming the bad argument."""
    schedule = check_choice("schedule", schedule, SCHEDULES)
    p = check_int("stages", stages, minimum=fewest_stages(schedule), maximum=MAX_STAGES,
                  why="a pipeline needs at least two stages")
    m = check_int("micro_batches", micro_batches, minimum=1, maximum=MAX_MICRO_BATCHES)
    v = check_int("chunks", chunks, minimum=1, maximum=MAX_CHUNKS)
    k = check_int("seq_split", seq_split, minimum=1, maximum=MAX_SEQ_SPLIT)
    check_bool("less_memory", less_memory)
    if schedule != "seqpipe" and k != 1:
        raise InputError(f"seq_split must be 1 for schedule {schedule!r}; got {k} "
                         "(sequence splitting is the 'seqpipe' schedule)")
    if schedule in V_SHAPED and v != 2:
        raise InputError(f"chunks must be 2 for schedule {schedule!r} (the V); got {v}")
    if schedule in TWO_DIRECTIONS and v != 2:
        raise InputError(f"chunks must be 2 for schedule {schedule!r} (one stage of each direction's model copy "
                         f"per rank); got {v}")
    if schedule in _FIXED_CHUNKS and v != _FIXED_CHUNKS[schedule][0]:
        fixed, other = _FIXED_CHUNKS[schedule]
        why = f"chunks must be {fixed} for schedule {schedule!r}; got {v}"
        raise InputError(f"{why} (use schedule={other!r})", cli=f"{why} (use --schedule {other})")
    if less_memory and schedule not in ("1f1b", "interleaved", "seqpipe"):
        if schedule == "dualpipev":
            raise InputError("less_memory does not apply to schedule 'dualpipev'")
        raise InputError(f"less_memory applies to the 'interleaved', 'seqpipe' and (one chunk, the 1F1B counts) "
                         f"'1f1b' schedules; got schedule {schedule!r}")
    if schedule in ("dualpipev", "dualpipev_split") and m < 2 * p:
        raise InputError(f"micro_batches must be >= 2 * stages = {2 * p} for schedule {schedule!r}; "
                         f"got {m} (DualPipeV's step order needs two micro-batches per stage)")
    if schedule in TWO_DIRECTIONS:
        _check_dualpipe(p, m)
    if schedule == "interleaved" and v > 1 and m < p:
        raise InputError(f"micro_batches must be >= stages = {p} for an interleaved schedule with "
                         f"{v} chunks; got {m}")
    if schedule == "zb_interleaved" and m % max(1, m // p):
        raise InputError(f"micro_batches must be a multiple of max(1, micro_batches // stages) = {max(1, m // p)} "
                         f"for schedule 'zb_interleaved' (PyTorch runs it in equal rounds); got {m}")
    if schedule == "seqpipe" and v > 1 and m * k < p:
        raise InputError(f"micro_batches * seq_split must be >= stages = {p} for an interleaved "
                         f"seqpipe schedule; got {m} * {k} = {m * k}")
    return schedule, p, m, v, k


def _check_dualpipe(p: int, m: int) -> None:
    """DualPipe's rules (``DualPipe.step`` in github.com/deepseek-ai/DualPipe, ``dualpipe/dualpipe.py``)."""
    if p % 2:
        raise InputError(f"stages must be even for schedule 'dualpipe'; got {p} (ranks pair up, s with p - 1 - s)")
    if m % 2 or m < 2 * p:
        raise InputError(f"micro_batches must be even and >= 2 * stages = {2 * p} for schedule 'dualpipe'; got {m} "
                         "(half run in each direction, and DualPipe's step order needs p per direction)")


def check_simulated(stages: int, micro_batches: int, chunks: int = 1, seq_split: int = 1) -> None:
    """Refuse a pipeline whose simulated step would run more than :data:`~sappkit.limits.MAX_SIMULATED_PASSES`.

    Examples
    --------
    >>> check_simulated(16, 64, 3)
    >>> check_simulated(256, 65536)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: simulating 256 stages x 1 chunk(s) x 65536 micro-batches runs 16,777,216 ...
    """
    passes = stages * chunks * micro_batches * seq_split
    if passes > MAX_SIMULATED_PASSES:
        slices = f" x {seq_split} slices" if seq_split > 1 else ""
        raise InputError(f"simulating {stages} stages x {chunks} chunk(s) x {micro_batches} micro-batches{slices} "
                         f"runs {passes:,} forward passes; sappkit simulates at most {MAX_SIMULATED_PASSES.cited}: "
                         "lower micro_batches")


def in_flight_counts(schedule: Schedule, stages: int, micro_batches: int, chunks: int = 1,
                     less_memory: bool = False, seq_split: int = 1) -> np.ndarray:
    """Micro-batches (slices for ``seqpipe``) in flight as an int array indexed ``[chunk, stage]``.

    The array form of :func:`in_flight` for models that index cells directly.
    """
    schedule, p, m, v, k = check_pipeline(schedule, stages, micro_batches, chunks, less_memory, seq_split)
    s = np.arange(p)
    if schedule in TWO_DIRECTIONS:
        return np.stack([p - s, s + 1])
    if schedule in V_SHAPED:
        counts = np.stack([2 * p - s, s + 1])
        return np.minimum(counts, m)
    if schedule in ("gpipe", "looped_bfs"):
        return np.full((v, p), m)
    if schedule == "zb_interleaved":
        return zero_bubble.zb_interleaved_in_flight(p, m, v)
    if schedule == "seqpipe":
        return np.minimum(_seqpipe_counts(p, v, k, less_memory), m * k)
    if v == 1:
        return np.minimum(p - s, m)[None, :]
    counts = np.full((v, p), p)
    if less_memory:
        counts[-1] -= s
        return np.minimum(counts, m)
    counts[0] += np.maximum(0, p - 2 * s - 1)
    counts[-1] += np.minimum(0, p - 2 * s - 1)
    return np.minimum(counts, m)


def _seqpipe_counts(p: int, v: int, k: int, less_memory: bool) -> np.ndarray:
    """SeqPipe slice counts before the cap (SAPP's pipeline balancer, ``compute_activation_seq_nums``)."""
    if v == 1:
        return (p - np.arange(p) + k - 1)[None, :]
    gap = 1 if less_memory else 2
    counts = np.full((v, p), p)
    counts[-1] = k
    # Walking from the second-to-last stage up, each step gives the stages above
    # it `gap` more slices on the first chunk whose next stage is not yet full
    # for this round (or on chunk 0 when every chunk is).
    for step, stage in enumerate(range(p - 2, -1, -1), start=1):
        below = counts[:, stage + 1]
        open_chunks = np.flatnonzero((below % p != 0) | (below // p < step))
        chunk = open_chunks[0] if open_chunks.size else 0
        counts[chunk, : stage + 1] += gap
    return counts


def in_flight(schedule: Schedule, stages: int, micro_batches: int, chunks: int = 1,
              less_memory: bool = False, seq_split: int = 1) -> pd.DataFrame:
    """Micro-batches whose activations each (stage, chunk) holds at its peak.

    Parameters
    ----------
    schedule : str
        One of :data:`SCHEDULES` (the original tool's four, then the ones ``torch.distributed.pipelining`` runs).
    stages, micro_batches, chunks : int
        ``p``, ``m`` and ``v``.
    less_memory : bool
        The less-memory interleaved variant (``interleaved`` and ``seqpipe``).
    seq_split : int
        SeqPipe's slices per micro-batch ``k``; counts are then slices of ``m k``.

    Returns
    -------
    DataFrame
        Columns ``stage``, ``chunk``, ``in_flight`` (>= 1), in model order
        (chunk 0 stages 0..p-1, then chunk 1, ...).

    Examples
    --------
    >>> in_flight("1f1b", 4, 8)["in_flight"].tolist()
    [4, 3, 2, 1]
    >>> in_flight("interleaved", 4, 8, chunks=2)["in_flight"].tolist()
    [7, 5, 4, 4, 4, 4, 3, 1]
    """
    counts = in_flight_counts(schedule, stages, micro_batches, chunks, less_memory, seq_split)
    v, p = counts.shape
    return pd.DataFrame({
        STAGE: np.tile(np.arange(p), v),
        CHUNK: np.repeat(np.arange(v), p),
        IN_FLIGHT: counts.ravel().astype(int),
    })


def forward_in_backward(stages: int, micro_batches: int, less_memory: bool = False) -> np.ndarray:
    """Forwards of the last chunk that run after a backward, per stage (the balancer's time factors).

    ``|p - 1 - 2s|``, zero for the first ``p // 2`` stages when ``m < 2p``;
    ``s`` for the less-memory schedule (SAPP's pipeline balancer, ``compute_forward_in_backward``).

    Examples
    --------
    >>> forward_in_backward(4, 8).tolist()
    [3, 1, 1, 3]
    >>> forward_in_backward(4, 4).tolist()
    [0, 0, 1, 3]
    """
    p = check_int("stages", stages, minimum=fewest_stages("1f1b"), maximum=MAX_STAGES,
                  why="a pipeline needs at least two stages")
    m = check_int("micro_batches", micro_batches, minimum=1, maximum=MAX_MICRO_BATCHES)
    s = np.arange(p)
    if check_bool("less_memory", less_memory):
        return s
    factors = np.abs(p - 1 - 2 * s)
    if m < 2 * p:
        factors[: p // 2] = 0
    return factors


def model_order(schedule: Schedule, stages: int, chunks: int) -> list[tuple[int, int]]:
    """Cells ``(chunk, stage)`` in the order the model's layers run through them.

    Chunk 0 stages 0..p-1, then chunk 1 stages 0..p-1, ...; for the V shapes
    (``dualpipev``, ``zbv``, ``dualpipev_split``) chunk 1 runs back up the V, stages p-1..0. For
    ``dualpipe`` the two copies' cells, each in its own order: chunk 0 stages 0..p-1, then chunk 1
    stages p-1..0 (:func:`directions`).

    Examples
    --------
    >>> model_order("dualpipev", 2, 2)
    [(0, 0), (0, 1), (1, 1), (1, 0)]
    """
    cells = []
    for c in range(chunks):
        backward_run = schedule in V_SHAPED + TWO_DIRECTIONS and c == 1
        stage_order = range(stages - 1, -1, -1) if backward_run else range(stages)
        cells.extend((c, s) for s in stage_order)
    return cells


def directions(schedule: Schedule) -> int:
    """Model copies :func:`model_order`'s cells split into, in equal runs: 2 for ``dualpipe``, else 1.

    Each copy's micro-batches run through its own run of cells only.

    Examples
    --------
    >>> directions("dualpipe"), directions("dualpipev")
    (2, 1)
    """
    return 2 if schedule in TWO_DIRECTIONS else 1


def check_one_copy(schedule: str, model: str) -> None:
    """Refuse ``dualpipe`` in a ``model`` that places one copy of the model along :func:`model_order`.

    Examples
    --------
    >>> check_one_copy("dualpipe", "the balancer")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: schedule 'dualpipe' is not modelled by the balancer: ...
    """
    if schedule in TWO_DIRECTIONS:
        raise InputError(f"schedule {schedule!r} is not modelled by {model}: it runs two copies of the model in "
                         "opposite directions; give another schedule, or simulate it with "
                         "sappkit.simulate on per-cell costs")


def tail_cell(schedule: Schedule, stages: int, chunks: int) -> tuple[int, int]:
    """The cell ``(chunk, stage)`` the tail runs on: the model's last cell, (1, 0) for ``dualpipev``'s V.

    Examples
    --------
    >>> tail_cell("interleaved", 4, 2), tail_cell("dualpipev", 4, 2)
    ((1, 3), (1, 0))
    """
    return model_order(schedule, stages, chunks)[-1]
