"""SAPP's pipeline balancer's own counts, for ``sapp_compat=True``: where they differ from sappkit's and when
they apply (docs/design.md, "Where sappkit differs from SAPP, and why")."""

from __future__ import annotations

import numpy as np

from .._check import check_bool
from ..errors import InputError
from ..pipeline.schedules import SAPP_SCHEDULES, V_SHAPED, check_pipeline, in_flight_counts

__all__ = ["check_sapp_compat", "sapp_in_flight", "sapp_tail_time_cell"]


def check_sapp_compat(sapp_compat, schedule: str, working_set: bool, objective: str) -> None:
    """Refuse ``sapp_compat=True`` where SAPP's pipeline balancer has no counts to reproduce."""
    if not check_bool("sapp_compat", sapp_compat):
        return
    if working_set:
        raise InputError("sapp_compat=True reproduces SAPP's pipeline balancer, which charges no working set: "
                         "pass working_set=False with it")
    if schedule not in SAPP_SCHEDULES:
        raise InputError(f"sapp_compat=True applies to SAPP's schedules {', '.join(map(repr, SAPP_SCHEDULES))}; "
                         f"got schedule {schedule!r}")
    if objective != "sapp":
        raise InputError(f"sapp_compat=True applies to the 'sapp' objective (SAPP's own time model); "
                         f"got objective {objective!r}")


def sapp_in_flight(schedule: str, stages: int, micro_batches: int, chunks: int = 1, less_memory: bool = False,
                   seq_split: int = 1) -> np.ndarray:
    """``[chunk, stage]`` in-flight counts as SAPP's pipeline balancer has them: :func:`sappkit.in_flight`'s
    without the cap at ``m`` (``m k`` slices) where SAPP leaves it out.

    SAPP caps the interleaved, DualPipeV and interleaved SeqPipe counts at the
    step's micro-batches but not 1F1B's ``p - s`` nor one-chunk SeqPipe's
    ``p - s + k - 1`` (its less-memory interleaved counts are uncapped too, but
    never above ``p <= m``). With ``m < p`` a stage cannot hold more
    micro-batches than the step has, so sappkit's own counts cap them (docs/design.md "Where sappkit differs from SAPP, and why").

    Examples
    --------
    >>> sapp_in_flight("1f1b", 4, 2).tolist(), in_flight_counts("1f1b", 4, 2).tolist()
    ([[4, 3, 2, 1]], [[2, 2, 2, 1]])
    """
    schedule, p, m, v, k = check_pipeline(schedule, stages, micro_batches, chunks, less_memory, seq_split)
    if schedule not in SAPP_SCHEDULES:
        raise InputError(f"SAPP's in-flight counts exist for its schedules {', '.join(map(repr, SAPP_SCHEDULES))}; "
                         f"got schedule {schedule!r}")
    if v > 1 or schedule == "dualpipev":  # capped as SAPP caps them (the interleaved ones need m >= p)
        return in_flight_counts(schedule, p, m, v, less_memory, k)
    return (p - np.arange(p) + (k - 1 if schedule == "seqpipe" else 0))[None, :]


def sapp_tail_time_cell(schedule: str, stages: int, chunks: int) -> tuple[int, int] | None:
    """Where SAPP's pipeline balancer charges the tail's time when it is not :func:`tail_cell`: DualPipeV's
    last chunk on the last stage ``(1, p - 1)`` (its memory stays on stage 0); None elsewhere.

    Physically the V's model ends on stage 0: the output layer runs right after
    chunk 1's last body layer there, so sappkit charges both on ``(1, 0)``.

    Examples
    --------
    >>> sapp_tail_time_cell("dualpipev", 4, 2), sapp_tail_time_cell("1f1b", 4, 1)
    ((1, 3), None)
    """
    if schedule not in V_SHAPED:
        return None
    return chunks - 1, stages - 1
