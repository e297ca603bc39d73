"""One parallel strategy: how a model is cut over devices and how its pipeline runs.

Ranks multiply as Megatron-LM lays them out: ``devices = t · cp · dp · p``.
Expert parallelism is carved out of the ranks a layer's dense part spreads
over (``t · cp · dp``), as Megatron-Core's MoE layers do, so ``ep · etp`` must
divide that product and adds no devices.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from .._check import check_bool, check_choice, check_int
from ..errors import InputError
from ..layers import ParallelConfig
from ..layers.configs import fp8_recipe_of
from ..limits import MAX_CHUNKS, MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_MICROBATCH_SIZE, MAX_STAGES
from ..pipeline.schedules import SCHEDULES, TWO_DIRECTIONS, V_SHAPED, Schedule, schedule_chunks

__all__ = ["Strategy", "DEGREE_NAMES"]

#: Short names of the degrees, in the order :attr:`Strategy.label` writes them (``etp`` goes after ``ep`` when set).
DEGREE_NAMES = {"tensor_parallel": "t", "pipeline_parallel": "p", "virtual_stages": "v", "data_parallel": "dp",
          "context_parallel": "cp", "expert_parallel": "ep", "micro_batch_size": "b"}


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """One parallel strategy: the degrees of every parallel dimension, the micro-batch and the schedule.

    Examples
    --------
    >>> s = Strategy(tensor_parallel=8, pipeline_parallel=16, virtual_stages=2, data_parallel=64,
    ...              schedule="interleaved")
    >>> s.devices, s.label
    (8192, 't8 p16 v2 dp64 cp1 ep1 b1 interleaved zero1')
    >>> s.micro_batches(global_batch=2048)
    32
    """

    tensor_parallel: int = 1
    """Tensor-parallel degree ``t`` (innermost ranks)."""
    pipeline_parallel: int = 1
    """Pipeline stages ``p``; 1 runs no pipeline."""
    virtual_stages: int = 1
    """Chunks per stage ``v`` (Megatron's virtual pipeline stages); 2 for the V schedules."""
    data_parallel: int = 1
    """Data-parallel degree ``dp``."""
    context_parallel: int = 1
    """Context-parallel degree ``cp`` (the sequence split over ``cp`` ranks)."""
    expert_parallel: int = 1
    """Expert-parallel degree ``ep``, carved out of ``t · cp · dp`` (MoE layers only)."""
    expert_tensor_parallel: int = 1
    """Tensor-parallel degree inside one expert ``etp``."""
    micro_batch_size: int = 1
    """Samples per micro-batch ``b``."""
    schedule: Schedule = "1f1b"
    """Pipeline schedule, one of :data:`sappkit.pipeline.schedules.SCHEDULES`. ``dualpipe`` (two model copies,
    ``virtual_stages=2``) is priced with the even placement only (``docs/pricing.md``, DualPipe)."""
    zero: Literal[0, 1, 2, 3] = 1
    """ZeRO stage: 0 replicates all, 1 shards optimizer state (Megatron's distributed optimizer), 2 also
    gradients, 3 (FSDP) also weights."""
    reshard_after_forward: bool = True
    """ZeRO 3 only: free each layer's gathered weights after its forward and gather them again for its backward
    (FSDP2's ``reshard_after_forward=True``, torchtitan's default); False keeps them gathered from the forward
    to the backward (one gather per micro-batch, the memory of every gathered layer). Ignored below ZeRO 3."""
    sequence_parallel: bool = True
    """Megatron sequence parallelism inside the tensor-parallel group."""
    dtype: Literal["bf16", "fp16", "fp32", "fp8"] = "bf16"
    """Weight and activation precision; ``fp8``: BF16 weights and activations, the linear layers' GEMMs in FP8
    as Transformer Engine runs them (``fp8_recipe``)."""
    overlap_grad_reduce: bool = True
    """Reduce a chunk's gradients while its last micro-batch's backward runs (Megatron's
    ``--overlap-grad-reduce``); False: after the stage's last op."""
    overlap_p2p_comm: bool = True
    """Send and receive between pipeline stages while computing (Megatron's ``--overlap-p2p-communication``, the
    default since 2023); False: the sending stage waits for each transfer."""
    overlap_param_gather: bool = True
    """Gather the updated weights (ZeRO 1 and 2) behind the next step's forward (Megatron's
    ``--overlap-param-gather``); False: after the optimizer step."""
    expert_imbalance: float = 1.0
    """MoE: the busiest device's routed tokens over the mean, in ``[1, ep]``; 1 is balanced routing (Megatron's
    ``moe_router_force_load_balancing``, or a capacity factor of 1 with padding to capacity). The expert GEMMs,
    the ops on the received tokens and the dispatch take that much longer: the step waits for the busiest."""
    moe_a2a_overlap: bool = False
    """MoE: hide each micro-batch's dispatch and combine under another micro-batch's compute (Megatron-Core's
    ``overlap_moe_expert_parallel_comm``, Megatron-Bridge's ``moe_a2a_overlap``): the forward's under the paired
    backward, the backward's under the paired forward, as far as each lasts (:func:`sappkit.hardware.overlap_ms`)."""
    moe_shared_expert_overlap: bool = False
    """MoE: run the shared experts' forward under the forward's dispatch and combine (Megatron-Core's
    ``moe_shared_expert_overlap``)."""
    fp8_recipe: Literal["delayed", "current", "mxfp8"] | None = None
    """``dtype="fp8"`` only: Transformer Engine's scaling recipe, ``delayed`` (the default: ``DelayedScaling``),
    ``current`` (per-tensor current scaling) or ``mxfp8`` (block scaling, Blackwell only:
    :mod:`sappkit.strategy.legality`); None with any other dtype."""
    tp_comm_overlap: bool = False
    """Hide each tensor-parallel all-gather and reduce-scatter under the matmul it feeds or follows (Megatron's
    ``--tp-comm-overlap`` with Transformer Engine's userbuffers, torchtitan's async TP); needs sequence
    parallelism. False: those collectives run exposed."""
    cp_kind: Literal["ring", "allgather", "a2a"] = "ring"
    """How context parallelism runs attention: ``ring`` (Megatron's ``p2p``), ``allgather`` (Llama 3's) or
    ``a2a`` (Ulysses; ``cp · t`` must divide the heads) (:data:`sappkit.layers.configs.CP_KINDS`)."""

    def __post_init__(self):
        for field in ("tensor_parallel", "data_parallel", "context_parallel", "expert_parallel",
                      "expert_tensor_parallel"):
            check_int(field, getattr(self, field), minimum=1, maximum=MAX_DEVICES)
        check_int("micro_batch_size", self.micro_batch_size, minimum=1, maximum=MAX_MICROBATCH_SIZE)
        check_int("pipeline_parallel", self.pipeline_parallel, minimum=1, maximum=MAX_STAGES)
        v = check_int("virtual_stages", self.virtual_stages, minimum=1, maximum=MAX_CHUNKS)
        schedule = check_choice("schedule", self.schedule, SCHEDULES)
        for field in ("sequence_parallel", "overlap_grad_reduce", "overlap_p2p_comm", "overlap_param_gather",
                      "reshard_after_forward", "moe_a2a_overlap", "moe_shared_expert_overlap",
                      "tp_comm_overlap"):
            check_bool(field, getattr(self, field))
        if schedule_chunks(schedule, v) != v:
            fixed = schedule_chunks(schedule, v)
            why = ("the V" if schedule in V_SHAPED else "a stage of each model copy" if schedule in TWO_DIRECTIONS
                   else "one chunk per stage")
            raise InputError(f"virtual_stages must be {fixed} for schedule {schedule!r} ({why}); got {v}")
        if self.pipeline_parallel == 1 and (v != 1 or schedule != "1f1b"):
            raise InputError(f"pipeline_parallel=1 runs no pipeline: give schedule='1f1b' and virtual_stages=1; "
                             f"got schedule={schedule!r}, virtual_stages={v}")
        object.__setattr__(self, "fp8_recipe", fp8_recipe_of(self.dtype, self.fp8_recipe))
        _ = self.parallel  # ParallelConfig checks the MoE degrees, the ZeRO stage and the dtype

    @property
    def devices(self) -> int:
        """Devices the strategy runs on: ``t · cp · dp · p``."""
        return self.tensor_parallel * self.context_parallel * self.data_parallel * self.pipeline_parallel

    @property
    def parallel(self) -> ParallelConfig:
        """The degrees a layer's estimate needs (everything but the pipeline)."""
        return ParallelConfig(micro_batch_size=self.micro_batch_size, tensor_parallel=self.tensor_parallel,
                              sequence_parallel=self.sequence_parallel, context_parallel=self.context_parallel,
                              data_parallel=self.data_parallel, expert_parallel=self.expert_parallel,
                              expert_tensor_parallel=self.expert_tensor_parallel, zero=self.zero, dtype=self.dtype,
                              reshard_after_forward=self.reshard_after_forward,
                              expert_imbalance=self.expert_imbalance, moe_a2a_overlap=self.moe_a2a_overlap,
                              moe_shared_expert_overlap=self.moe_shared_expert_overlap,
                              fp8_recipe=self.fp8_recipe, tp_comm_overlap=self.tp_comm_overlap,
                              cp_kind=self.cp_kind)

    @property
    def sharding(self) -> str:
        """What the strategy shards, in words: ``"ZeRO 1"`` ... ``"ZeRO 3, resharded after forward"``."""
        if self.zero < 3:
            return f"ZeRO {self.zero}"
        return f"ZeRO 3, {'resharded' if self.reshard_after_forward else 'not resharded'} after forward"

    @property
    def label(self) -> str:
        """A short, unique name: ``t8 p16 v2 dp64 cp1 ep1 b1 interleaved zero1`` (``etp``, no sequence
        parallelism, ZeRO 3 without resharding, TP overlap, a CP kind other than ring, a dtype other than bf16,
        overlaps switched off, an expert imbalance and the MoE overlaps are written only when set)."""
        parts = [f"{short}{getattr(self, field)}" for field, short in DEGREE_NAMES.items()]
        if self.expert_tensor_parallel != 1:
            parts.insert(6, f"etp{self.expert_tensor_parallel}")
        parts += [self.schedule, f"zero{self.zero}"]
        if self.zero == 3 and not self.reshard_after_forward:
            parts.append("no-reshard")
        if not self.sequence_parallel:
            parts.append("no-sp")
        if self.tp_comm_overlap:
            parts.append("tp-overlap")
        if self.cp_kind != "ring":
            parts.append(f"cp-{self.cp_kind}")
        if self.dtype != "bf16":
            parts.append(self.dtype if self.fp8_recipe is None else f"fp8-{self.fp8_recipe}")
        parts += [name for name, on in (("no-grad-overlap", self.overlap_grad_reduce),
                                        ("no-p2p-overlap", self.overlap_p2p_comm),
                                        ("no-param-overlap", self.overlap_param_gather)) if not on]
        if self.expert_imbalance != 1:
            parts.append(f"imbalance{self.expert_imbalance:g}")
        parts += [name for name, on in (("a2a-overlap", self.moe_a2a_overlap),
                                        ("shared-overlap", self.moe_shared_expert_overlap)) if on]
        return " ".join(parts)

    def micro_batches(self, global_batch: int) -> int:
        """Micro-batches per step ``m = global_batch / (dp · b)``, or raise when it does not divide."""
        batch = check_int("global_batch", global_batch, minimum=1, maximum=MAX_GLOBAL_BATCH)
        per_step = self.data_parallel * self.micro_batch_size
        if batch % per_step:
            raise InputError(f"global_batch must be a multiple of data_parallel * micro_batch_size = "
                             f"{self.data_parallel} * {self.micro_batch_size} = {per_step}; got {batch}")
        return batch // per_step

    def to_dict(self) -> dict:
        """The fields as a plain dict (for frames, JSON and trainer exports)."""
        return {field.name: getattr(self, field.name) for field in fields(self)}
