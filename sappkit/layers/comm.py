"""A layer's communication per parallel dimension, each on the link its rank group really uses.

Per micro-batch and device (``n`` tokens, ``e`` bytes per element; the groups
and links are :meth:`sappkit.hardware.Cluster.group`'s):

- **TP** (Megatron's tensor parallelism): without sequence parallelism an
  all-reduce of ``e·n·h`` after the attention and after the MLP forward, and
  two backward (the gradients of the inputs they copied); with it an
  all-gather before and a reduce-scatter after each block, forward and
  backward (under FP8 the all-gathers move the quantized tensor,
  :func:`fp8_gather_bytes`), each exposed, or with ``tp_comm_overlap`` hidden
  under the matmul it feeds or follows as far as that lasts, slowing it by the
  SMs it takes (:func:`sappkit.hardware.overlap_ms`; the pairs:
  ``_tp_overlap``). A MoE block keeps its tokens sequence-split (no
  collective). The head reduces (or reduce-scatters) its vocabulary-parallel
  embedding; the tail gathers its input (or copies it, all-reducing the
  gradient) and all-reduces three ``4n``-byte statistics of the cross-entropy.
- **CP**, by ``cp_kind``: ``ring`` (Megatron's ``p2p``): ``c − 1`` steps
  each sending the next rank this rank's keys and values
  (``e·n·a_kv/t·(d + d_v)``; backward also their gradients, twice the
  bytes; off the node through the device's own card) while the attention
  of the current block runs; a step costs what its transfer exceeds the
  block's attention (``1/c`` of the core). ``allgather`` (Llama 3's): an
  all-gather of the keys and values (``c`` times this rank's share) before
  the attention, and a reduce-scatter of their gradients after its
  backward, exposed. ``a2a`` (Ulysses): an all-to-all of the queries, keys
  and values (``e·n·(a·d + a_kv·(d + d_v))/t``) from the sequence split to a
  head split before the attention and one of its output (``e·n·a·d_v/t``)
  back, the same two for the gradients backward, exposed and hierarchical
  like EP's.
- **EP** (token dispatch, Megatron-Core's all-to-all dispatcher): an
  all-to-all of the routed tokens (``e·n/t·top_k·h``, times
  ``expert_imbalance`` ``κ``: the busiest device receives ``κ`` times the
  mean) to dispatch and one to combine, forward and backward, hierarchical
  (:meth:`sappkit.hardware.Cluster.all_to_all_ms`: the off-node share through
  each device's own card); with ``etp > 1`` an all-gather of the received
  tokens over the expert tensor-parallel group after the dispatch and a
  reduce-scatter before the combine (``etp·κ·e·n/t·top_k·h`` gathered).
  Overlapped (``moe_a2a_overlap``: the forward's under the paired
  micro-batch's backward compute and the backward's under its forward;
  ``moe_shared_expert_overlap``: the forward's under the shared experts'
  forward), each is exposed beyond its window and slows that window's
  compute (:func:`sappkit.hardware.overlap_ms`; the slowdown is charged to
  EP). Every micro-batch counts as paired, the pipeline's warm-up and
  cool-down ones too (to first order).
- **PP**: a send/receive of the activation ``e·n·h/t`` (each tensor rank
  sends its slice) at a stage boundary, forward and backward.

Data parallelism and the optimizer step act once per step on a stage's
parameters (:func:`grad_sync_ms`, :func:`optimizer_ms`): gradients are
reduced over the ``dp·c`` ranks (experts' over ``t·c·dp/(etp·ep)``) in fp32
for bf16 and fp32 training and in fp16 for fp16 training (Megatron's
defaults); ZeRO stages 1 and 2 (the distributed optimizer) reduce-scatter them
and all-gather the updated weights, stage 0 all-reduces. Stage 3 (FSDP)
works per micro-batch instead (:func:`zero3_comm_ms`): each layer all-gathers
its weights (``e`` bytes per parameter) for its forward, again for its
backward when it reshards after the forward (FSDP2's default), and
reduce-scatters its gradients in the backward (FSDP2 reduces every
micro-batch); :mod:`sappkit.strategy.compiled` overlaps each with the
layer's own forward or backward (:func:`sappkit.hardware.overlap_ms`: the
prefetch of the next layer runs under this one). The optimizer step
(Adam) moves 34 bytes per parameter it updates: the fp32 master weight and
two moments read and written (24), the gradient read for the norm and the
step (8) and the new weight written (2). FP8 training then casts each
updated weight a device holds once per step (Transformer Engine keeps the FP8
weight copies across a step's micro-batches, Megatron-LM's
``is_first_microbatch``): :data:`FP8_WEIGHT_CAST_BYTES` per parameter (the
BF16 weight read, the rowwise and columnwise FP8 copies written; ``current``
reads it twice for its amax).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware import Cluster, GroupSizes, collective_ms, overlap_ms
from .configs import _BYTES, ParallelConfig, TransformerConfig

__all__ = ["LayerComm", "layer_comm", "head_comm", "tail_comm", "boundary_ms", "grad_sync_ms", "optimizer_ms",
           "grad_sync_parts", "copies_sum_ms", "zero3_comm_ms", "dense_sizes", "expert_sizes", "GRAD_BYTES",
           "OPTIMIZER_BYTES", "FP8_WEIGHT_CAST_BYTES"]

#: Bytes per parameter of the gradients data parallelism reduces, per training dtype.
GRAD_BYTES = {"bf16": 4, "fp16": 2, "fp32": 4, "fp8": 4}
#: Bytes Adam moves per parameter it updates (module docstring).
OPTIMIZER_BYTES = 34
#: Bytes an FP8 run's once-per-step weight cast moves per parameter, by recipe (module docstring).
FP8_WEIGHT_CAST_BYTES = {"delayed": 4, "current": 6, "mxfp8": 4 + 2 / 32}


@dataclass(frozen=True)
class LayerComm:
    """One layer's communication per micro-batch, ms."""

    tp: tuple[float, float] = (0.0, 0.0)
    """Tensor parallel, (forward, backward)."""
    cp: tuple[float, float] = (0.0, 0.0)
    """Context parallel, exposed beyond the attention it overlaps, (forward, backward)."""
    ep: tuple[float, float] = (0.0, 0.0)
    """Expert parallel, (forward, backward)."""
    regather: float = 0.0
    """The sequence-parallel all-gathers ``comm`` recompute re-runs in the backward."""
    slowdown: tuple[float, float] = (0.0, 0.0)
    """What the collectives overlapped with the layer's matmuls slow them by (the SMs they take), (forward,
    backward)."""


def dense_sizes(parallel: ParallelConfig, stages: int = 1) -> GroupSizes:
    """The rank dimensions' sizes for dense layers."""
    return GroupSizes(tp=parallel.tensor_parallel, cp=parallel.context_parallel, dp=parallel.data_parallel,
                      pp=stages)


def expert_sizes(parallel: ParallelConfig, stages: int = 1) -> GroupSizes:
    """The rank dimensions' sizes for MoE layers (Megatron-Core's expert grid over the same ranks)."""
    ranks = parallel.tensor_parallel * parallel.context_parallel * parallel.data_parallel
    grid = parallel.expert_tensor_parallel * parallel.expert_parallel
    return GroupSizes(tp=parallel.expert_tensor_parallel, ep=parallel.expert_parallel, dp=ranks // grid, pp=stages)


def layer_comm(model: TransformerConfig, moe: bool, parallel: ParallelConfig, cluster: Cluster,
               core_ms: tuple[float, float], compute_ms: tuple[float, float] = (0.0, 0.0),
               shared_ms: float = 0.0, gemm_ms: dict | None = None) -> LayerComm:
    """One body layer's communication; ``core_ms`` is its attention core's (forward, backward) time,
    ``compute_ms`` all its ops' and ``shared_ms`` its shared experts' forward (the windows of the MoE overlaps),
    ``gemm_ms`` its matmuls' (op name -> (forward, backward) ms; the TP overlap hides collectives under them)."""
    e, h = _BYTES[parallel.dtype], model.hidden_size
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    ranks, link = cluster.group(dense_sizes(parallel), "tp")
    activation = e * n * h
    blocks = 1 if moe else 2
    slowdown = (0.0, 0.0)
    if parallel.sequence_parallel:
        gather = collective_ms("all_gather", fp8_gather_bytes(parallel, activation / e), ranks, link)
        scatter = collective_ms("reduce_scatter", activation, ranks, link)
        tp, regather = (blocks * (gather + scatter),) * 2, blocks * gather
        if parallel.tp_comm_overlap and gather + scatter:
            tp, slowdown = _tp_overlap(_TP_BLOCKS[:blocks], gather, scatter, gemm_ms or {},
                                       cluster.device.comm_sm_share)
    else:
        reduce = collective_ms("all_reduce", activation, ranks, link)
        tp, regather = (blocks * reduce, blocks * reduce), 0.0
    return LayerComm(tp=tp, cp=_context_parallel(model, parallel, cluster, n, core_ms),
                     ep=_overlapped(_dispatch(model, parallel, cluster, n), parallel, cluster.device.comm_sm_share,
                                    compute_ms, shared_ms) if moe else (0.0, 0.0), regather=regather,
                     slowdown=slowdown)


def fp8_gather_bytes(parallel: ParallelConfig, elements: float) -> float:
    """Bytes of a sequence-parallel all-gather of ``elements`` feeding a linear layer: ``e`` each, or under FP8 the
    quantized tensor (1 byte each, ``mxfp8`` with its scales), which Transformer Engine gathers instead (its
    ``fp8_current_scaling`` and ``mxfp8`` docs: quantized all-gather)."""
    if parallel.fp8_recipe is None:
        return _BYTES[parallel.dtype] * elements
    return elements * (1 + (1 / 32 if parallel.fp8_recipe == "mxfp8" else 0))


#: Per block a tensor-parallel group overlaps (attention, then the MLP): the matmuls that read the gathered
#: input and the one whose output is reduce-scattered (Transformer Engine's userbuffers pairs).
_TP_BLOCKS = ((("qkv", "q", "q_down", "kv_down"), ("out",)), (("fc1",), ("fc2",)))


def _tp_overlap(blocks, gather: float, scatter: float, gemm_ms: dict, share: float):
    """(exposed, slowdown) per (forward, backward) of the sequence-parallel collectives, each overlapped with its
    matmul: forward the all-gather under the first matmuls and the reduce-scatter under the last; backward the
    all-gather of the output gradient under the last matmul's two gradient matmuls and the reduce-scatter of the
    input gradient under the first matmuls'."""
    exposed, slowdown = [0.0, 0.0], [0.0, 0.0]
    for first, last in blocks:
        windows = [sum(gemm_ms.get(name, (0.0, 0.0))[phase] for name in names) for names in (first, last)
                   for phase in (0, 1)]
        pairs = ((0, gather, windows[0]), (0, scatter, windows[2]), (1, gather, windows[3]),
                 (1, scatter, windows[1]))
        for phase, comm, window in pairs:
            left, slower = overlap_ms(comm, window, share)
            exposed[phase] += left
            slowdown[phase] += slower
    return tuple(exposed), tuple(slowdown)


def _context_parallel(model, parallel, cluster, n, core_ms) -> tuple[float, float]:
    c = parallel.context_parallel
    if c == 1:
        return 0.0, 0.0
    e, t = _BYTES[parallel.dtype], parallel.tensor_parallel
    kv_heads = model.num_heads if model.kv_lora_rank else model.num_kv_heads
    keys_values = e * n * kv_heads / t * (model.head_dim + model.v_head_dim)  # this rank's share
    if parallel.cp_kind == "allgather":
        ranks, link = cluster.group(dense_sizes(parallel), "cp")
        return (collective_ms("all_gather", c * keys_values, ranks, link),
                collective_ms("reduce_scatter", c * keys_values, ranks, link))
    if parallel.cp_kind == "a2a":
        queries = e * n * model.num_heads / t * model.head_dim
        output = e * n * model.num_heads / t * model.v_head_dim
        both = sum(cluster.all_to_all_ms(dense_sizes(parallel), "cp", nbytes)
                   for nbytes in (queries + keys_values, output))
        return both, both
    ranks, stride = cluster.group_stride(dense_sizes(parallel), "cp")
    link = cluster.nic_link(ranks, stride)
    exposed = []
    for factor, core in zip((1, 2), core_ms):
        step = collective_ms("send_recv", factor * keys_values, ranks, link)
        exposed.append((c - 1) * max(0.0, step - core / c))
    return exposed[0], exposed[1]


def _dispatch(model, parallel, cluster, n) -> tuple[float, float]:
    """The dispatch and the combine of one direction (the backward's mirror the forward's), ms."""
    routed = _BYTES[parallel.dtype] * n / parallel.tensor_parallel * model.top_k * model.hidden_size
    busiest = parallel.expert_imbalance * routed
    sizes = expert_sizes(parallel)
    both = 2 * cluster.all_to_all_ms(sizes, "ep", busiest)
    etp, link = cluster.group(sizes, "tp")
    gathered = etp * busiest
    both += collective_ms("all_gather", gathered, etp, link) + collective_ms("reduce_scatter", gathered, etp, link)
    return both, both


def _overlapped(ep: tuple[float, float], parallel: ParallelConfig, sm_share: float, compute_ms: tuple[float, float],
                shared_ms: float) -> tuple[float, float]:
    """The dispatch's (forward, backward) ms left on the critical path with the MoE overlaps: each part exposed
    beyond the compute it runs under, plus the slowdown of that compute (:func:`overlap_ms`)."""
    if parallel.moe_a2a_overlap:  # under the paired micro-batch's other direction
        windows = (compute_ms[1], compute_ms[0])
    elif parallel.moe_shared_expert_overlap:  # under the shared experts' forward only
        windows = (shared_ms, 0.0)
    else:
        return ep
    parts = [overlap_ms(comm, window, sm_share) for comm, window in zip(ep, windows)]
    return parts[0][0] + parts[0][1], parts[1][0] + parts[1][1]


def head_comm(model: TransformerConfig, parallel: ParallelConfig, cluster: Cluster) -> tuple[float, float]:
    """The token embedding's tensor-parallel reduce, (forward, backward) ms."""
    ranks, link = cluster.group(dense_sizes(parallel), "tp")
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    activation = _BYTES[parallel.dtype] * n * model.hidden_size
    if parallel.sequence_parallel:
        return (collective_ms("reduce_scatter", activation, ranks, link),
                collective_ms("all_gather", activation, ranks, link))
    return collective_ms("all_reduce", activation, ranks, link), 0.0


def tail_comm(model: TransformerConfig, parallel: ParallelConfig, cluster: Cluster) -> tuple[float, float]:
    """The LM head's input gather and the cross-entropy's statistics, (forward, backward) ms."""
    ranks, link = cluster.group(dense_sizes(parallel), "tp")
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    activation = _BYTES[parallel.dtype] * n * model.hidden_size
    statistics = 3 * collective_ms("all_reduce", 4 * n, ranks, link)
    if parallel.sequence_parallel:
        return (collective_ms("all_gather", activation, ranks, link) + statistics,
                collective_ms("reduce_scatter", activation, ranks, link))
    return statistics, collective_ms("all_reduce", activation, ranks, link)


def boundary_ms(model: TransformerConfig, parallel: ParallelConfig, cluster: Cluster, stages: int) -> float:
    """One send/receive of an activation (or its gradient) between two pipeline stages, ms."""
    if stages == 1:
        return 0.0
    ranks, link = cluster.group(dense_sizes(parallel, stages), "pp")
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    activation = _BYTES[parallel.dtype] * n * model.hidden_size / parallel.tensor_parallel
    return collective_ms("send_recv", activation, ranks, link)


def grad_sync_ms(dense_params: float, expert_params: float, parallel: ParallelConfig, cluster: Cluster,
                 stages: int = 1) -> float:
    """Reducing one step's gradients of ``dense_params`` and ``expert_params`` (per device) over data parallelism,
    and (ZeRO 1 and 2) gathering the updated weights, ms: the sum of :func:`grad_sync_parts`."""
    return sum(grad_sync_parts(dense_params, expert_params, parallel, cluster, stages))


def grad_sync_parts(dense_params: float, expert_params: float, parallel: ParallelConfig, cluster: Cluster,
                    stages: int = 1) -> tuple[float, float]:
    """(the gradient reduction, the weight gather after the optimizer step) of one step, ms; none under ZeRO 3,
    which reduces and gathers per micro-batch (:func:`zero3_comm_ms`)."""
    reduce = gather = 0.0
    if parallel.zero == 3:
        return reduce, gather
    weight, grad = _BYTES[parallel.dtype], GRAD_BYTES[parallel.dtype]
    for params, sizes in ((dense_params, dense_sizes(parallel, stages)), (expert_params, expert_sizes(parallel, stages))):
        if not params:
            continue
        ranks, link = _data_group(cluster, sizes)
        if parallel.zero == 0:
            reduce += collective_ms("all_reduce", grad * params, ranks, link)
        else:
            reduce += collective_ms("reduce_scatter", grad * params, ranks, link)
            gather += collective_ms("all_gather", weight * params, ranks, link) if parallel.zero < 3 else 0.0
    return reduce, gather


def copies_sum_ms(dense_params: float, expert_params: float, parallel: ParallelConfig, cluster: Cluster,
                  stages: int) -> float:
    """DualPipe's sum of its two model copies' gradients, ms: rank ``s`` and rank ``p - 1 - s`` hold the same two
    stages, one of each copy, and all-reduce the gradients of both (``dense_params + expert_params``, a rank's two
    stages) over the pipeline's link; below ZeRO 3 after the data-parallel reduction (on its shards from
    ZeRO 1 on), under ZeRO 3 on the shards it keeps."""
    grad = GRAD_BYTES[parallel.dtype]
    shards = (1, 1) if not parallel.zero else (
        parallel.data_parallel * parallel.context_parallel, expert_sizes(parallel).dp)
    _, link = cluster.group(dense_sizes(parallel, stages), "pp")
    return collective_ms("all_reduce", grad * (dense_params / shards[0] + expert_params / shards[1]), 2, link)


def zero3_comm_ms(dense_params: float, expert_params: float, parallel: ParallelConfig, cluster: Cluster,
                  stages: int = 1) -> tuple[float, float]:
    """ZeRO 3's collectives of one layer per micro-batch, ms: (the forward's weight gather, the backward's: the
    gather again when resharding after the forward, and the gradient reduce-scatter); zeros below ZeRO 3."""
    if parallel.zero != 3:
        return 0.0, 0.0
    weight, grad = _BYTES[parallel.dtype], GRAD_BYTES[parallel.dtype]
    forward = backward = 0.0
    for params, sizes in ((dense_params, dense_sizes(parallel, stages)), (expert_params, expert_sizes(parallel, stages))):
        if not params:
            continue
        ranks, link = _data_group(cluster, sizes)
        gather = collective_ms("all_gather", weight * params, ranks, link)
        forward += gather
        backward += (gather if parallel.reshard_after_forward else 0.0) + collective_ms(
            "reduce_scatter", grad * params, ranks, link)
    return forward, backward


def _data_group(cluster: Cluster, sizes: GroupSizes):
    """The gradient-reduction group: data and context parallel together (``dp·cp`` ranks), ``stride`` apart: the
    product of the dimensions inside the innermost of the two that has more than one rank (the expert grid's
    ``cp`` is 1, so its data-parallel ranks lie ``etp·ep`` apart, not ``etp``)."""
    ranks = sizes.dp * sizes.cp
    order = cluster.rank_order.split("-")
    inner = [name for name in order if name in ("cp", "dp") and getattr(sizes, name) > 1] or ["dp"]
    stride = 1
    for name in order[: order.index(inner[0])]:
        stride *= getattr(sizes, name)
    return ranks, cluster.link(ranks, stride)


def optimizer_ms(dense_params: float, expert_params: float, parallel: ParallelConfig, cluster: Cluster) -> float:
    """The optimizer step over the parameters a device holds (ZeRO shards them over the gradient group), ms."""
    shards = (1, 1) if not parallel.zero else (
        parallel.data_parallel * parallel.context_parallel, expert_sizes(parallel).dp)
    updated = dense_params / shards[0] + expert_params / shards[1]
    cast = FP8_WEIGHT_CAST_BYTES[parallel.fp8_recipe] * (dense_params + expert_params) if parallel.fp8_recipe else 0
    return cluster.device.memory_ms(OPTIMIZER_BYTES * updated + cast) if updated else 0.0
