"""Step orders: the sequence of forward and backward passes each stage runs in one training step.

An *op* is ``(phase, chunk, unit)``: ``phase`` :data:`FORWARD`,
:data:`BACKWARD` (a whole backward), or for the zero-bubble orders of
:mod:`sappkit.pipeline.zero_bubble` :data:`BACKWARD_INPUT` and
:data:`BACKWARD_WEIGHT`; ``unit`` is the micro-batch, or for ``seqpipe`` the
slice ``micro_batch * k + slice``. Each schedule is built from small pure passes:

- **1F1B** (one chunk): a warm-up of ``p - s - 1`` forwards, then one forward
  and one backward in turn, then the remaining backwards (Megatron's and
  MindSpore's non-interleaved order).
- **interleaved** (Megatron's interleaved 1F1B): forwards walk a table of
  groups of ``g`` units, every chunk in turn per group
  (``get_schedule_table``); backwards walk the same table with the chunks
  reversed. The warm-up is ``(v - 1) g + 2 (p - s - 1)`` forwards, or
  ``(v - 1) g + (p - s - 1)`` for the less-memory variant (SAPP's
  ``vpp2``). ``g = p``; when ``m`` is not a multiple of ``p`` the first group
  takes the remainder too (``p + m mod p`` units), as the original SAPP
  simulator does (Megatron refuses such ``m``).
- **seqpipe**: the same orders over ``m k`` slices, with a micro-batch's
  slices run backward in reverse (a slice's backward needs the later slices'
  gradients) and ``k - 1`` more warm-up forwards, so the last stage has run
  every slice of a micro-batch before its first backward. With chunks, the
  group is the smallest whole number of micro-batches ``>= p`` slices
  (``g = k ceil(p / k)``), so a group never splits a micro-batch.
- **dualpipev** (the V, two chunks): DeepSeek's DualPipeV step order with
  each backward as one block (no split into input- and weight-gradient
  passes): ``F0 x 2(p-s-1)``; ``(F0 F1) x (s+1)``; ``(B1 F1) x (p-s-1)``;
  ``(F0 B1 F1 B0) x (m-2p+s+1)``; ``(B1 F1 B0) x (p-s-1)``;
  ``(B1 B0) x (s+1)``; ``B0 x (p-s-1)``.
- **dualpipe** (DeepSeek's bidirectional DualPipe, backward split as its
  source does): :func:`sappkit.pipeline.zero_bubble.dualpipe`; a chunk is a
  direction, whose units are its ``m / 2`` micro-batches.
"""

from __future__ import annotations

from functools import lru_cache

from . import zero_bubble
from .phases import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD
from .schedules import check_pipeline

__all__ = ["FORWARD", "BACKWARD", "BACKWARD_INPUT", "BACKWARD_WEIGHT", "stage_orders", "warmup_forwards"]

Op = tuple[int, int, int]


def stage_orders(schedule: str, stages: int, micro_batches: int, chunks: int = 1,
                 less_memory: bool = False, seq_split: int = 1) -> tuple[tuple[Op, ...], ...]:
    """Each stage's ops ``(phase, chunk, unit)`` in the order it runs them.

    Examples
    --------
    >>> [op for op in stage_orders("1f1b", 2, 3)[0]]
    [(0, 0, 0), (0, 0, 1), (1, 0, 0), (0, 0, 2), (1, 0, 1), (1, 0, 2)]
    >>> [(p, c) for p, c, _ in stage_orders("dualpipev", 2, 4, chunks=2)[1]][:6]
    [(0, 0), (0, 1), (0, 0), (0, 1), (0, 0), (1, 1)]
    """
    shape = check_pipeline(schedule, stages, micro_batches, chunks, less_memory, seq_split)
    return _stage_orders(*shape, less_memory)


@lru_cache(maxsize=64)
def _stage_orders(schedule: str, p: int, m: int, v: int, k: int, less_memory: bool):
    if schedule == "dualpipev":
        return tuple(_dualpipev(p, m, s) for s in range(p))
    if schedule == "dualpipev_split":
        return tuple(zero_bubble.dualpipev_split(p, m, s) for s in range(p))
    if schedule == "dualpipe":
        return tuple(zero_bubble.dualpipe(p, m, s)[0] for s in range(p))
    if schedule == "zbv":
        return tuple(zero_bubble.zbv(p, m, s) for s in range(p))
    if schedule == "zb_interleaved":
        return tuple(zero_bubble.zb_interleaved(p, m, v, s) for s in range(p))
    if schedule in ("gpipe", "looped_bfs"):
        return (_breadth_first(m, v, reverse=schedule == "looped_bfs"),) * p
    units = m * k
    group = k * -(-p // k)
    forward = _group_table(units, v, group)
    backward = _backward_table(forward, v, k)
    return tuple(_one_f_one_b(forward, backward, warmup_forwards(p, s, v, k, units, group, less_memory))
                 for s in range(p))


def warmup_forwards(p: int, s: int, v: int, k: int, units: int, group: int, less_memory: bool) -> int:
    """Forwards stage ``s`` runs before its first backward (its steady state starts with one more)."""
    if v == 1:
        return min(p - s - 1 + k - 1, units)
    first_group = group + units % group
    per_stage = 1 if less_memory else 2
    return min((v - 1) * first_group + per_stage * (p - s - 1) + k - 1, v * units)


def _group_table(units: int, v: int, group: int) -> list[tuple[int, int]]:
    """Forward ``(chunk, unit)`` order: groups of ``group`` units, each run through every chunk in turn.

    The first group also takes the ``units % group`` left over; one chunk is one group.
    """
    if v == 1:
        return [(0, u) for u in range(units)]
    first = group + units % group
    bounds = [0, *range(first, units + 1, group)]
    return [(c, u) for lo, hi in zip(bounds, bounds[1:]) for c in range(v) for u in range(lo, hi)]


def _backward_table(forward: list[tuple[int, int]], v: int, k: int) -> list[tuple[int, int]]:
    """Backward order: the forward table with chunks reversed and each micro-batch's slices reversed."""
    return [(v - 1 - c, u - u % k + k - 1 - u % k) for c, u in forward]


def _one_f_one_b(forward, backward, warmup: int) -> tuple[Op, ...]:
    """Merge forward and backward tables: ``warmup`` forwards, then one of each in turn, then the rest."""
    ops = [(FORWARD, c, u) for c, u in forward[:warmup]]
    steady = len(forward) - warmup
    for (fc, fu), (bc, bu) in zip(forward[warmup:], backward[:steady]):
        ops.append((FORWARD, fc, fu))
        ops.append((BACKWARD, bc, bu))
    ops.extend((BACKWARD, c, u) for c, u in backward[steady:])
    return tuple(ops)


def _breadth_first(m: int, v: int, reverse: bool) -> tuple[Op, ...]:
    """Every forward chunk by chunk, then every backward back down; ``reverse``: last micro-batch first."""
    units = range(m - 1, -1, -1) if reverse else range(m)
    return tuple([(FORWARD, c, u) for c in range(v) for u in range(m)]
                 + [(BACKWARD, c, u) for c in range(v - 1, -1, -1) for u in units])


def _dualpipev(p: int, m: int, s: int) -> tuple[Op, ...]:
    """DualPipeV's order for stage ``s``: the seven phases of its step, backward as one block."""
    f0, f1, b1, b0 = (FORWARD, 0), (FORWARD, 1), (BACKWARD, 1), (BACKWARD, 0)
    phases = (
        ((f0,), 2 * (p - s - 1)),
        ((f0, f1), s + 1),
        ((b1, f1), p - s - 1),
        ((f0, b1, f1, b0), m - 2 * p + s + 1),
        ((b1, f1, b0), p - s - 1),
        ((b1, b0), s + 1),
        ((b0,), p - s - 1),
    )
    next_unit = {f0: 0, f1: 0, b1: 0, b0: 0}
    ops = []
    for pattern, repeats in phases:
        for _ in range(repeats):
            for kind in pattern:
                ops.append((*kind, next_unit[kind]))
                next_unit[kind] += 1
    return tuple(ops)
