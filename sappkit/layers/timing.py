"""A layer kind's times per recompute option and its breakdown, from its ops and its communication.

Per micro-batch: ``forward_time`` is the forward ops (slowed by the
collectives they hide: ``LayerComm.slowdown``) plus the forward
communication of every dimension; ``backward_time`` the backward ops and
communication plus what the option re-runs: ``selective`` the attention
core's forward ops, ``comm`` the layer norms' forward ops and the
sequence-parallel all-gathers, ``both`` the two, ``full`` the whole forward
(its communication included); ``selective_op`` (torchtitan's per-op checkpointing) what
:func:`~sappkit.layers.op_sac.op_sac_rerun` prices.

The breakdown row of a kind and option (:data:`BREAKDOWN_COLUMNS`): per
micro-batch, forward and backward together, ``compute_ms`` (recompute
included; ``recompute_ms`` is that part, its communication too),
``tp_comm_ms``, ``cp_comm_ms``, ``ep_comm_ms`` and ``pp_comm_ms`` (a stage
boundary after the layer: its activation forward and gradient backward);
per step, ``dp_comm_ms`` (its gradients reduced, its weights gathered) and
``optimizer_ms``; its ``params`` and ``expert_params`` on the device (before
ZeRO sharding) and ``model_flops``, the paper's FLOP count of a micro-batch's
forward and backward on the device (3 x forward, recompute not counted).
"""

from __future__ import annotations

from dataclasses import dataclass

from .comm import LayerComm
from .op_sac import OP_SAC
from .ops import FORWARD, Op

__all__ = ["KindTimes", "kind_times", "BREAKDOWN_COLUMNS", "COMPUTE_MS", "RECOMPUTE_MS", "TP_COMM_MS",
           "CP_COMM_MS", "EP_COMM_MS", "PP_COMM_MS", "DP_COMM_MS", "OPTIMIZER_MS", "PARAMS", "EXPERT_PARAMS",
           "MODEL_FLOPS", "ZERO_COMM_MS"]

COMPUTE_MS = "compute_ms"
RECOMPUTE_MS = "recompute_ms"
TP_COMM_MS = "tp_comm_ms"
CP_COMM_MS = "cp_comm_ms"
EP_COMM_MS = "ep_comm_ms"
PP_COMM_MS = "pp_comm_ms"
DP_COMM_MS = "dp_comm_ms"
OPTIMIZER_MS = "optimizer_ms"
PARAMS = "params"
EXPERT_PARAMS = "expert_params"
MODEL_FLOPS = "model_flops"
#: ZeRO 3's per-micro-batch weight gathers and gradient reduce-scatters, as far as the layer's compute does not
#: hide them (added per data-parallel layout by :mod:`sappkit.strategy.compiled`; not in the estimate's breakdown).
ZERO_COMM_MS = "zero_comm_ms"
#: The breakdown frame's columns after ``kind`` and ``option`` (module docstring).
BREAKDOWN_COLUMNS = (COMPUTE_MS, RECOMPUTE_MS, TP_COMM_MS, CP_COMM_MS, EP_COMM_MS, PP_COMM_MS, DP_COMM_MS,
                     OPTIMIZER_MS, PARAMS, EXPERT_PARAMS, MODEL_FLOPS)


@dataclass(frozen=True)
class KindTimes:
    """One kind's forward and backward time per option, and its breakdown rows (module docstring)."""

    times: dict
    """option -> (forward_time, backward_time), ms."""
    breakdown: dict
    """option -> {column: value} for :data:`BREAKDOWN_COLUMNS`."""


def kind_times(ops: list[Op], comm: LayerComm, options, *, boundary_ms: float, step: dict,
               op_rerun: tuple[float, float] | None = None) -> KindTimes:
    """Times and breakdown of one kind under ``options``; ``step`` holds its per-step and count columns,
    ``op_rerun`` what ``selective_op`` re-runs (compute ms, tensor-parallel communication ms) where it is
    among them."""
    forward = sum(op.time_ms for op in ops if op.phase == FORWARD) + comm.slowdown[0]
    backward = sum(op.time_ms for op in ops if op.phase != FORWARD) + comm.slowdown[1]
    core = sum(op.time_ms for op in ops if op.phase == FORWARD and op.core)
    norms = sum(op.time_ms for op in ops if op.phase == FORWARD and op.norm)
    sent = {TP_COMM_MS: comm.tp, CP_COMM_MS: comm.cp, EP_COMM_MS: comm.ep}
    forward_comm = sum(f for f, _ in sent.values())
    rerun = {  # option -> (compute re-run, communication re-run by dimension)
        "none": (0.0, {}),
        "selective": (core, {}),
        "comm": (norms, {TP_COMM_MS: comm.regather}),
        "both": (core + norms, {TP_COMM_MS: comm.regather}),
        "full": (forward, {column: f for column, (f, _) in sent.items()}),
    }
    if op_rerun is not None:
        rerun[OP_SAC] = (op_rerun[0], {TP_COMM_MS: op_rerun[1]})
    times, breakdown = {}, {}
    for option in options:
        compute, again = rerun[option]
        recompute = compute + sum(again.values())
        times[option] = (forward + forward_comm, backward + sum(b for _, b in sent.values()) + recompute)
        breakdown[option] = {COMPUTE_MS: forward + backward + compute, RECOMPUTE_MS: recompute,
                             **{column: f + b + again.get(column, 0.0) for column, (f, b) in sent.items()},
                             PP_COMM_MS: 2 * boundary_ms, **step}
    return KindTimes(times, breakdown)
