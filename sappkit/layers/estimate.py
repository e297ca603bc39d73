"""Analytic layer tables from a transformer's shape, for users without a profile.

Notation: ``s`` sequence, ``b`` micro-batch size, ``h`` hidden size, ``a``
attention heads, ``a_kv`` key/value heads, ``d``/``d_v`` query-key/value
head sizes, ``f`` FFN size, ``v`` vocabulary, ``t``/``c`` tensor/context
parallel degrees, ``e`` bytes per element of ``dtype``; masks take 1 byte.

**Activations** (Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models", sec. 4): one layer keeps per token
``R = 4eh`` (two layer-norm inputs and the two linear inputs they feed)
``+ 2h`` (two dropout masks), replicated across tensor-parallel ranks unless
sequence parallel splits them; ``S = e(a·d + a_kv·d + a_kv·d_v + a·d_v)``
(Q, K, V, projection input) ``+ 2ef`` (GeLU input and output; SwiGLU
``3ef``) split over ``t``; and per (query, key) pair the attention core
``(e + 1 + e)·a`` (softmax output, dropout mask, dropout output; ``e·a``
without dropout), split over ``t``. Per device: ``s·b/c·(R/t_sp + S/t) +
core·(s/c)·s·b/t`` with ``t_sp = t`` under sequence parallel, else 1. With
MHA, GeLU, ``f = 4h``, dropout and ``e = 2`` this is the paper's
``s·b·h·(10 + 24/t + 5·a·s/(h·t))`` without sequence parallel (eq. 2) and
``s·b·h/t·(34 + 5·a·s/h)`` with it (eq. 5). Options:

- ``none``: all of it; ``selective`` drops the attention core (paper sec. 4.2.1:
  ``34·s·b·h/t``); ``full`` keeps the layer input, ``e·s·b·h/t_sp`` (sec. 4.2.1);
- ``comm`` (sappkit's approximation of MindFormers' communication recompute):
  re-runs the two layer norms and the sequence-parallel all-gathers in the
  backward, so the two gathered linear inputs (``2eh`` per token of ``R``)
  are not kept; ``both``: ``selective`` and ``comm`` together;
- ``selective_op``: torchtitan's per-op checkpointing, what its save list keeps
  (:mod:`sappkit.layers.op_sac`).

**Kernels** (:class:`KernelConfig`; the default is the paper's count above).
What PyTorch and transformers keep instead, as :func:`sappkit.torch.measure_layers`
measures it (``c`` = 1 for a ``bool`` dropout mask, else the bytes of the
dtype the dropout runs in):

- ``attention="eager"``: K and V repeated to all ``a`` heads (``e(a − a_kv)(d
  + d_v)`` more per token) and per (query, key) pair an fp32 softmax ``4a``
  plus its cast ``e·a`` (only when ``e < 4``) or, with dropout, the mask and
  output ``(c + e)·a``;
- ``attention="math"``: Q, K, V as fp32 copies, K and V repeated
  (``4(2a·d + a·d_v)`` per token instead of ``e(a·d + a_kv·d + a_kv·d_v)``),
  per pair ``4a`` (+ ``(c + 4)·a`` with dropout);
- ``attention="flash"`` (and ``fa2``, ``fa3``, ``cudnn``): nothing per pair, ``4a`` (fp32 log-sum-exp) per
  token;
- ``norm="hf"``: each norm keeps ``4h + e·h + 4`` per token instead of ``e·h``;
- ``fused_mlp=False``: a gated MLP keeps ``4ef`` (the activation's output too);
- ``moe="hf"``: ``top_k·(e·h + 20) + 12·top_k + 4`` more per token (routing bookkeeping);
- ``dropout_mask="dtype"``: masks take ``e`` bytes, not 1.

``selective`` drops what is per pair and what the kernel keeps beyond
the paper's Q, K, V (its recompute runs from them).

MoE layers (Megatron-style token routing, balanced, tokens split over TP
ranks) keep per token ``top_k·(2eh + m·e·f_e)`` (dispatched input, expert
output, the expert MLP's ``m·e·f_e``, ``m`` = 3 gated else 2) ``+
shared·m·e·f_e + 4·E`` (fp32 router scores) in ``S``. MLA (DeepSeek-V2/V3,
approximate): K and V are materialised per head (``a_kv = a``), plus the
latents ``2e·q_r + 2e·kv_r + e·d_rope`` in ``R``.

**Parameters** (Rajbhandari et al. 2020, ZeRO, sec. 3; Megatron mixed
precision): per parameter ``w = e`` bytes of weight, ``g = 4`` of fp32
gradient, ``o = 12`` of fp32 master weight and Adam moments (8 for fp32
training). ZeRO stage 1 (Megatron's distributed optimizer) shards ``o``,
stage 2 also ``g``, stage 3 (FSDP) also ``w``, over ``D`` = ``dp·c`` ranks
(experts: ``dp·c·t/(ep·etp)``). Dense parameters are split over ``t``
(norms, router and MLA down-projections too: < 10% of a layer), routed
experts over ``ep·etp``. Under stage 3 (FSDP that reshards) a layer's
backward holds, beyond its shards, its gathered weights and whole gradient,
``(w + g)·P·(1 − 1/D)``, and the next layer's weights, prefetched:
``working_mb = (2w + g)·P·(1 − 1/D)`` at the end of warm-up. The stage's first
layer runs the last backward, with no layer left to prefetch; as FSDP
reduces a layer's gradients while the next layer's backward runs, it also
holds the second layer's whole gradient, still being reduced, and its own
reduce-scatter output: ``first_working_mb = (w + 2g)·P·(1 − 1/D) + g·P/D``
(:func:`fsdp_working_bytes`; SAPP's estimator counts these terms). Without
``reshard_after_forward`` every layer keeps its gathered weights from its
forward to its backward, ``w·P·(1 − 1/D)`` more held, and its backward's
working set loses its own weights: ``(w + g)·P·(1 − 1/D)``.

**Context parallelism's gathered keys and values**: under ``cp_kind="allgather"`` a layer's backward holds the
whole sequence's keys and values, their gradients and a reordered copy beside its working set above,
``e·((K + V)(3 + 1/2c) + max(K, V))`` with ``K = s·b·a_kv·d/t``, ``V = s·b·a_kv·d_v/t``
(:mod:`sappkit.layers.cp_memory`, from Transformer Engine's backward); ``ring`` and ``a2a`` add nothing.

**Time** (``time_model="roofline"``, the default): each op of the layer,
forward and backward, priced on the device by the compute or memory roofline
with its size-dependent matmul efficiency (:mod:`sappkit.layers.ops`), plus
the communication of the tensor-, context- and expert-parallel groups on the
links they use (:mod:`sappkit.layers.comm`); what each recompute option
re-runs, and the per-kind breakdown the table carries, are
:mod:`sappkit.layers.timing`'s.

**Time (flops)** (``time_model="flops"``, the paper's count and sappkit's
model before the roofline; Narayanan et al. 2021, "Efficient Large-Scale
Language Model Training on GPU Clusters using Megatron-LM", app.:
``6·P·tokens`` per step plus attention): forward FLOPs per token
``2·P_active``, plus ``2·a·(d + d_v)`` per (query, key) pair for ``QKᵀ`` and
``AV`` (no causal discount, as in that paper); split over ``t·c``; time =
FLOPs / (``tflops``·``mfu``) in ms. Backward ``2×`` forward; ``selective``
adds the attention core's forward, ``full`` a whole forward, ``comm`` the
all-gathers (received bytes ``(t−1)/t·e·s·b·h/c`` twice, at ``link_gbs``) and
the layer norms (reading and writing ``2e·s·b·h/(c·t_sp)``, at ``hbm_gbs``).

**Head** (embeddings, on the first stage): token embedding ``v·h`` (0 FLOPs;
with dropout it keeps a mask, ``h`` bytes per token) and, for a vision tower, the patch
embedding ``3·p²·h + s·h`` (positions; ``2·3p²·h`` FLOPs and the ``e·3p²``
pixels per token). **Tail**: final norm and LM head ``h + v·h`` (``2hv``
FLOPs per token) keeping ``R = 2eh`` and ``S = 4v`` (fp32 logits) per token:
the paper's ``4·s·b·h/t·(1 + v/h)`` (sec. 4.3). Under ``time_model="flops"``
head and tail backward is ``2×`` forward. The last stack's multi-token-prediction
layers are part of the tail (:mod:`sappkit.layers.mtp`). A frozen stack's layers
hold ``w`` bytes per parameter alone and run backward only their input gradients.
"""

from __future__ import annotations

import os

import pandas as pd

from .._check import check_choice, check_number
from ..columns import (
    ACTIVATION_MB, BACKWARD_TIME, BODY, COUNT, FIRST_WORKING_MB, FORWARD_TIME, GRAD_MB, HEAD, KIND, MEMORY_ONCE_MB,
    MODULE, OPTION, PARAM_MB, ROLE, SAPP_OPTIONS, TAIL, WORKING_MB,
)
from ..errors import InputError
from ..limits import MAX_MEMORY_MB
from ..hardware import Cluster, DeviceConfig
from .comm import LayerComm, boundary_ms, grad_sync_ms, head_comm, layer_comm, optimizer_ms
from .cp_memory import kv_gather_bytes
from .mtp import mtp_comm, mtp_ops, mtp_shapes
from .op_sac import OP_OPTIONS, OP_SAC, check_op_sac, op_sac_kept_bytes, op_sac_rerun
from .configs import _BYTES, KernelConfig, ParallelConfig, TransformerConfig
from .estimate_checks import check_estimate
from .ops import FORWARD, head_ops, layer_ops, patch_ops, tail_ops
from .param_memory import fsdp_working_bytes, param_bytes
from .shapes import Shape, head_shape, kinds, layer_shape, tail_shape
from .table import LayerTable
from .timing import (
    COMPUTE_MS, CP_COMM_MS, DP_COMM_MS, EP_COMM_MS, EXPERT_PARAMS, MODEL_FLOPS, OPTIMIZER_MS, PARAMS, PP_COMM_MS,
    RECOMPUTE_MS, TP_COMM_MS, KindTimes, kind_times,
)
from .units import MS

__all__ = ["estimate_layers", "param_bytes", "fsdp_working_bytes", "TIME_MODELS"]

#: How :func:`estimate_layers` prices time (its ``time_model``).
TIME_MODELS = ("roofline", "flops")

_MB = 2**20


def estimate_layers(*models: TransformerConfig, parallel: ParallelConfig | None = None,
                    device: DeviceConfig | None = None, options=SAPP_OPTIONS, const_mb: float = 0.0,
                    kernels: KernelConfig | None = None, cluster: Cluster | None = None,
                    time_model: str = "roofline") -> LayerTable:
    """A layer table from transformer stacks in model order (formulas and sources in the module docstring).

    Parameters
    ----------
    *models : TransformerConfig
        The stacks in model order, e.g. a vision tower then a language model.
        The head embeds the first stack's input (its patch embedding) and the
        last stack's tokens; the tail is the last stack's LM head.
    parallel : ParallelConfig
        Micro-batch, parallel degrees, ZeRO stage, precision (default: all 1, bf16, ZeRO-1).
    device : DeviceConfig
        What prices the ops (default: the cluster's device, else a generic 300 TFLOP/s device whose matmuls reach
        40% of it); a device preset name (``"h100-sxm"``) is looked up.
    options : sequence of str
        Body options to price, among ``none``, ``selective``, ``comm``,
        ``both``, ``full`` and ``selective_op`` (torchtitan's per-op checkpointing,
        :mod:`sappkit.layers.op_sac`; roofline time only); rows come in that order.
    const_mb : float
        The table's per-stage constant (runtime buffers, workspace), MB.
    kernels : KernelConfig
        Which attention, norm, MLP and dropout kernels the layers run (default: the paper's count).
    cluster : Cluster
        The links the tensor-, context- and expert-parallel groups use (default: one node of ``device`` talking
        over its ``link_gbs``); a cluster preset name (``"dgx-h100"``) is looked up.
    time_model : {"roofline", "flops"}
        ``roofline``: each op on the device plus each dimension's communication (:mod:`sappkit.layers.ops`,
        :mod:`sappkit.layers.comm`); ``flops``: the paper's FLOP count at the device's flat ``mfu`` (the
        module docstring's "Time (flops)"), as sappkit priced layers before the roofline model.

    Returns
    -------
    LayerTable
        Memory per device in MB, times per micro-batch in ms, and the :attr:`~LayerTable.breakdown` of each
        kind's time (:mod:`sappkit.layers.timing`).

    Examples
    --------
    Korthikanti et al.'s per-layer activations, ``s·b·h/t·(34 + 5·a·s/h)`` bytes:

    >>> gpt = TransformerConfig(layers=4, hidden_size=1024, num_heads=16, ffn_size=4096,
    ...                         seq_length=2048, vocab_size=50000)
    >>> table = estimate_layers(gpt, parallel=ParallelConfig(tensor_parallel=2), options=("none", "full"))
    >>> table.rows("layer")["activation_mb"].tolist() == [2048 * 1024 / 2 * (34 + 5 * 16 * 2048 / 1024) / 2**20,
    ...                                                   2 * 2048 * 1024 / 2 / 2**20]
    True
    >>> table.frame[["kind", "role", "count", "option"]]
            kind  role  count option
    0  embedding  head      1   none
    1      layer  body      4   none
    2      layer  body      4   full
    3    lm_head  tail      1   none
    >>> table.breakdown[["kind", "option", "compute_ms", "tp_comm_ms"]].round(2)
            kind option  compute_ms  tp_comm_ms
    0  embedding   none        0.01        0.09
    1      layer   none        1.39        0.38
    2      layer   full        1.90        0.56
    3    lm_head   none        3.01        0.12
    """
    parallel = ParallelConfig() if parallel is None else parallel
    cluster, device = _hardware(cluster, device)
    kernels = KernelConfig() if kernels is None else kernels
    options = check_estimate(models, parallel, device, options, kernels)
    time_model = check_choice("time_model", time_model, TIME_MODELS)
    if OP_SAC in options:
        if time_model == "flops":
            raise InputError(f"option {OP_SAC!r} is priced op by op: it needs time_model='roofline'")
        for model in models:
            check_op_sac(model)
    price = _Pricing(parallel, device, cluster, kernels, time_model)
    first, last = models[0], models[-1]
    rows = price.rows(head_shape(models, parallel, kernels), first.module, HEAD, "embedding",
                      ops=lambda: _head_ops(models, parallel, device),
                      comm=lambda: LayerComm(tp=head_comm(last, parallel, cluster)), boundary=last)
    for model in models:
        for kind, count, moe in kinds(model):
            shape = layer_shape(model, moe, _BYTES[parallel.dtype], kernels, fp8=parallel.fp8_recipe is not None)
            rows += price.rows([shape], model.module, BODY, kind, count=count, options=options, body=(model, moe),
                               boundary=model)
    rows += price.rows(tail_shape(last, parallel) + mtp_shapes(last, parallel, kernels), last.module, TAIL, "lm_head",
                       ops=lambda: tail_ops(last, parallel, device, kernels) + mtp_ops(last, parallel, device, kernels),
                       comm=lambda: mtp_comm(last, parallel, cluster, device, kernels), boundary=last)
    frame = pd.DataFrame([row for row, _ in rows])
    breakdown = pd.DataFrame([{KIND: row[KIND], OPTION: row[OPTION], **parts} for row, parts in rows])
    return LayerTable._built(frame, const_mb=check_number("const_mb", const_mb, minimum=0, maximum=MAX_MEMORY_MB),
                             time_unit=MS, breakdown=breakdown,
                             custom_options=tuple(option for option in OP_OPTIONS if option in options))


def _hardware(cluster, device) -> tuple[Cluster, DeviceConfig]:
    """The cluster and the device the estimate prices on (the device wins over the cluster's)."""
    if isinstance(device, str | os.PathLike):
        device = DeviceConfig.preset(device)
    if isinstance(cluster, str | os.PathLike):
        cluster = Cluster.preset(cluster)
    if cluster is not None and not isinstance(cluster, Cluster):
        raise InputError(f"cluster must be a Cluster, a preset name or a hardware file (.toml); got {type(cluster).__name__}")
    if device is not None and not isinstance(device, DeviceConfig):
        raise InputError(f"device must be a DeviceConfig, a preset name or a hardware file (.toml); got {type(device).__name__}")
    if cluster is None:
        device = DeviceConfig() if device is None else device
        return Cluster.of(device), device
    if device is None or device == cluster.device:
        return cluster, cluster.device
    return cluster.replace(device=device), device


def _head_ops(models, parallel, device) -> list:
    first, last = models[0], models[-1]
    return (patch_ops(first, parallel, device) if first.patch_size else []) + head_ops(last, parallel, device)


def _overlap_windows(ops) -> tuple:
    """What :func:`layer_comm` overlaps its collectives with, from one pass over a layer's ops: the attention
    core's (forward, backward) ms, all ops' (forward, backward) ms, the shared experts' forward ms, and each
    matmul outside the core by name -> [forward, backward] ms."""
    core, compute, shared, gemms = [0.0, 0.0], [0.0, 0.0], 0.0, {}
    for op in ops:
        backward = op.phase != FORWARD
        compute[backward] += op.time_ms
        if op.core:
            core[backward] += op.time_ms
        elif op.matmul:
            gemms.setdefault(op.name, [0.0, 0.0])[backward] += op.time_ms
        if not backward and op.name.startswith("shared_"):
            shared += op.time_ms
    return tuple(core), tuple(compute), shared, gemms


class _Pricing:
    """Prices the rows of one estimate: memory from the shapes, times from the ops (or the paper's FLOPs)."""

    def __init__(self, parallel, device, cluster, kernels, time_model):
        self.parallel, self.device, self.cluster, self.kernels = parallel, device, cluster, kernels
        self.time_model = time_model

    def rows(self, parts: list[Shape], module: str, role: str, kind: str, *, count: int = 1, options=("none",),
             body=None, ops=None, comm=None, boundary) -> list[tuple[dict, dict]]:
        """The table rows of one kind with their breakdown parts (the body's ops from ``(model, moe)``)."""
        parallel = self.parallel
        t, experts = parallel.tensor_parallel, parallel.expert_parallel * parallel.expert_tensor_parallel
        dense = sum(p.dense_params for p in parts) / t
        routed = sum(p.expert_params for p in parts) / experts
        frozen = body is not None and body[0].frozen
        held, _ = param_bytes(dense, routed, parallel, body=body is not None, frozen=frozen)
        working, first_working = fsdp_working_bytes(dense, routed, parallel, body=body is not None,
                                                   frozen=frozen)
        gathered = kv_gather_bytes(parts, parallel) / _MB  # all-gather CP's keys and values, beside the weights
        kept, flops = _kept(parts, parallel)
        op_rerun = None
        trained = (0.0, 0.0) if frozen else (dense, routed)  # a frozen stack reduces and updates nothing
        step = {DP_COMM_MS: grad_sync_ms(*trained, parallel, self.cluster),
                OPTIMIZER_MS: optimizer_ms(*trained, parallel, self.cluster), PARAMS: trained[0],
                EXPERT_PARAMS: trained[1], MODEL_FLOPS: 3 * flops}
        if self.time_model == "flops":
            priced = _flops_times(parts, parallel, self.device, options, step, frozen=frozen)
        else:
            if body is not None:
                model, moe = body
                ops = layer_ops(model, moe, parallel, self.device, self.kernels)
                comm = layer_comm(model, moe, parallel, self.cluster, *_overlap_windows(ops))
                if OP_SAC in options:
                    op_rerun = op_sac_rerun(ops, comm, model, parallel, self.device, self.kernels)
                    kept[OP_SAC] = op_sac_kept_bytes(model, parallel, self.kernels)
            else:
                ops, comm = ops(), comm()
            priced = kind_times(ops, comm, options, step=step, op_rerun=op_rerun,
                                boundary_ms=boundary_ms(boundary, parallel, self.cluster, stages=2))
        return [({KIND: kind, ROLE: role, COUNT: count, PARAM_MB: held / _MB, OPTION: option,
                  FORWARD_TIME: priced.times[option][0], BACKWARD_TIME: priced.times[option][1],
                  ACTIVATION_MB: kept[option] / _MB, MODULE: module, MEMORY_ONCE_MB: 0.0,
                  WORKING_MB: gathered + working / _MB, FIRST_WORKING_MB: gathered + first_working / _MB,
                  GRAD_MB: 0.0}, priced.breakdown[option])
                for option in options]


def _kept(parts: list[Shape], parallel: ParallelConfig) -> tuple[dict, float]:
    """Activation bytes kept per option, and the paper's forward FLOPs of a micro-batch on one device."""
    t, c, b = parallel.tensor_parallel, parallel.context_parallel, parallel.micro_batch_size
    t_sp = t if parallel.sequence_parallel else 1
    tokens = [p.seq * b / c for p in parts]
    linear = sum(n * (p.replicated / t_sp + p.split / t) for n, p in zip(tokens, parts))
    core = sum(n * (p.seq * p.core + p.core_tokens) / t for n, p in zip(tokens, parts))
    dropped = sum(n * p.dropped_by_comm for n, p in zip(tokens, parts)) / t_sp
    flops = sum(n * (p.flops + p.seq * p.core_flops) for n, p in zip(tokens, parts)) / t
    return {"none": linear + core, "selective": linear, "comm": linear + core - dropped, "both": linear - dropped,
            "full": sum(n * p.kept_by_full for n, p in zip(tokens, parts)) / t_sp}, flops


def _flops_times(parts, parallel, device, options, step, *, frozen: bool = False) -> KindTimes:
    """The paper's times (module docstring, "Time (flops)"): FLOPs at the device's flat ``mfu``; a frozen stack's
    backward runs the input gradients alone (the matmuls once, the attention core twice)."""
    t, c, b = parallel.tensor_parallel, parallel.context_parallel, parallel.micro_batch_size
    t_sp = t if parallel.sequence_parallel else 1
    ms_per_flop = 1e3 / (device.tflops * 1e12 * device.mfu)
    tokens = [p.seq * b / c for p in parts]
    core_time = sum(n * p.seq * p.core_flops for n, p in zip(tokens, parts)) / t * ms_per_flop
    forward = sum(n * p.flops for n, p in zip(tokens, parts)) / t * ms_per_flop + core_time
    comm_bytes = sum(n * p.dropped_by_comm for n, p in zip(tokens, parts))
    gathered = comm_bytes * (t - 1) / t if parallel.sequence_parallel else 0.0
    comm_time = (gathered / (device.link_gbs * 1e9) + 2 * comm_bytes / t_sp / (device.hbm_gbs * 1e9)) * 1e3
    extra = {"none": 0.0, "selective": core_time, "comm": comm_time, "both": core_time + comm_time, "full": forward}
    backward = forward + core_time if frozen else 2 * forward
    times = {option: (forward, backward + extra[option]) for option in options}
    breakdown = {option: {COMPUTE_MS: forward + backward + extra[option], RECOMPUTE_MS: extra[option], TP_COMM_MS: 0.0,
                          CP_COMM_MS: 0.0, EP_COMM_MS: 0.0, PP_COMM_MS: 0.0, **step} for option in options}
    return KindTimes(times, breakdown)
