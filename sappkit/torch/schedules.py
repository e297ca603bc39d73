"""The step orders PyTorch's pipeline schedules generate, as sappkit's per-stage ops.

``torch.distributed.pipelining``'s schedule classes compute every rank's
action list when they are constructed (``pipeline_order``); they need no
process group when the stages they are given are light stand-ins that
answer ``stage_index``, ``num_stages``, ``group_size`` and ``group_rank``.
:func:`schedule_orders` builds one per schedule and reads the compute
actions back as ``(phase, chunk, unit)`` ops (:mod:`sappkit.pipeline.orders`):
``F``, ``B``, ``I``, ``W`` become the four phases, an overlapped
forward-backward pair (DualPipeV's ``OVERLAP_F_B``) its forward then its
backward, and idle steps and gradient reductions are dropped. PyTorch stage
``i`` is chunk ``i // p`` on rank ``i mod p`` for the looped schedules, and
for the V shapes chunk 0 on rank ``i`` (``i < p``) or chunk 1 on rank ``2p - 1 - i``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.pipelining import schedules as pipelining

from .._check import check_int
from ..errors import InputError
from ..pipeline.orders import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD
from ..pipeline.schedules import V_SHAPED

__all__ = ["PYTORCH_SCHEDULES", "schedule_orders"]

#: sappkit's schedule name -> the ``torch.distributed.pipelining`` class that runs it.
PYTORCH_SCHEDULES = {
    "1f1b": pipelining.Schedule1F1B,
    "gpipe": pipelining.ScheduleGPipe,
    "interleaved": pipelining.ScheduleInterleaved1F1B,
    "looped_bfs": pipelining.ScheduleLoopedBFS,
    "zb_interleaved": pipelining.ScheduleInterleavedZeroBubble,
    "zbv": pipelining.ScheduleZBVZeroBubble,
    "dualpipev_split": pipelining.ScheduleDualPipeV,
}
_PHASES = {"F": FORWARD, "B": BACKWARD, "I": BACKWARD_INPUT, "W": BACKWARD_WEIGHT}


@dataclass
class _Stage:
    """What a schedule class reads from a pipeline stage while it builds its action lists."""

    stage_index: int
    num_stages: int
    group_size: int
    group_rank: int = 0
    submod: object = None
    """No module: the zero-bubble classes look for compiled submodules here."""


def schedule_orders(name: str, stages: int, micro_batches: int, chunks: int = 1) -> tuple[tuple, ...]:
    """Each stage's ops ``(phase, chunk, unit)`` as PyTorch's schedule class ``name`` orders them.

    Parameters
    ----------
    name : str
        A key of :data:`PYTORCH_SCHEDULES` (sappkit's schedule names).
    stages, micro_batches, chunks : int
        ``p``, ``m`` and ``v`` (the V shapes take 2).

    Returns
    -------
    tuple
        One tuple of ops per stage (rank), in the order PyTorch runs them;
        :func:`sappkit.simulate` takes it as ``orders``.

    Examples
    --------
    >>> schedule_orders("gpipe", 2, 2)[1]
    ((0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1))
    """
    if name not in PYTORCH_SCHEDULES:
        raise InputError(f"name must be a schedule PyTorch runs, one of {', '.join(map(repr, PYTORCH_SCHEDULES))}; "
                         f"got {name!r}")
    p = check_int("stages", stages, minimum=2, why="a pipeline needs at least two stages")
    m = check_int("micro_batches", micro_batches, minimum=1)
    cls = PYTORCH_SCHEDULES[name]
    single = issubclass(cls, pipelining.PipelineScheduleSingle)
    v = check_int("chunks", chunks, minimum=1)
    if (single and v != 1) or (name in V_SHAPED and v != 2):
        raise InputError(f"chunks must be {1 if single else 2} for {cls.__name__}; got {v}")
    try:
        if single:
            schedule = cls(_Stage(0, p, p), m)
        else:
            indices = [0, 2 * p - 1] if name in V_SHAPED else [c * p for c in range(v)]
            schedule = cls([_Stage(i, p * v, p) for i in indices], m)
    except ValueError as error:
        raise InputError(f"PyTorch's {cls.__name__} refuses stages={p}, micro_batches={m}, chunks={v}: "
                         f"{error}") from error
    return tuple(tuple(op for action in schedule.pipeline_order[rank] for op in _ops(action, p, name))
                 for rank in range(p))


def _ops(action, p: int, name: str):
    """An action's compute ops as sappkit ops (none for idle steps and gradient reductions)."""
    if action is None:
        return
    if action.sub_actions:
        for sub in action.sub_actions:
            yield from _ops(sub, p, name)
        return
    phase = _PHASES.get(action.computation_type.value)
    if phase is None:
        return
    stage = action.stage_index
    chunk = (0 if stage < p else 1) if name in V_SHAPED else stage // p
    yield phase, chunk, action.microbatch_index
