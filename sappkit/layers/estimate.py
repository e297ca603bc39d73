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
  are not kept; ``both``: ``selective`` and ``comm`` together.

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
- ``attention="flash"``: nothing per pair, ``4a`` (fp32 log-sum-exp) per token;
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
experts over ``ep·etp``. Under stage 3 a layer gathers its weights and
gradients for compute: ``working_mb = (w + g)·P·(1 − 1/D)``.

**Time** (Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters using Megatron-LM", app.: ``6·P·tokens`` per step
plus attention): forward FLOPs per token ``2·P_active``, plus ``2·a·(d +
d_v)`` per (query, key) pair for ``QKᵀ`` and ``AV`` (no causal discount,
as in that paper); split over ``t·c``; time = FLOPs / (``tflops``·``mfu``)
in ms. Backward ``2×`` forward; ``selective`` adds the attention core's
forward, ``full`` a whole forward, ``comm`` the all-gathers (received bytes
``(t−1)/t·e·s·b·h/c`` twice, at ``link_gbs``) and the layer norms
(reading and writing ``2e·s·b·h/(c·t_sp)``, at ``hbm_gbs``).

**Head** (embeddings, on the first stage): token embedding ``v·h`` (0 FLOPs;
with dropout it keeps a mask, ``h`` bytes per token) and, for a vision tower, the patch
embedding ``3·p²·h + s·h`` (positions; ``2·3p²·h`` FLOPs and the ``e·3p²``
pixels per token). **Tail**: final norm and LM head ``h + v·h`` (``2hv``
FLOPs per token) keeping ``R = 2eh`` and ``S = 4v`` (fp32 logits) per token:
the paper's ``4·s·b·h/t·(1 + v/h)`` (sec. 4.3). Head and tail backward is
``2×`` forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .._check import check_number
from ..columns import (
    ACTIVATION_MB, BACKWARD_TIME, BODY, COUNT, FIRST_WORKING_MB, FORWARD_TIME, GRAD_MB, HEAD, KIND, MEMORY_ONCE_MB,
    MODULE, OPTION, PARAM_MB, ROLE, SAPP_OPTIONS, TAIL, WORKING_MB,
)
from ..errors import InputError
from ..limits import MAX_MEMORY_MB
from .configs import _BYTES, DeviceConfig, KernelConfig, ParallelConfig, TransformerConfig
from .table import LayerTable
from .units import MS

__all__ = ["estimate_layers", "param_bytes"]

_MB = 2**20


def estimate_layers(*models: TransformerConfig, parallel: ParallelConfig | None = None,
                    device: DeviceConfig | None = None, options=SAPP_OPTIONS, const_mb: float = 0.0,
                    kernels: KernelConfig | None = None) -> LayerTable:
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
        Throughput for the times (default 300 TFLOP/s at 40% MFU).
    options : sequence of str
        Body options to price, among ``none``, ``selective``, ``comm``,
        ``both``, ``full``; rows come in that order.
    const_mb : float
        The table's per-stage constant (runtime buffers, workspace), MB.
    kernels : KernelConfig
        Which attention, norm, MLP and dropout kernels the layers run (default: the paper's count).

    Returns
    -------
    LayerTable
        Memory per device in MB, times per micro-batch in ms.

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
    """
    parallel = ParallelConfig() if parallel is None else parallel
    device = DeviceConfig() if device is None else device
    kernels = KernelConfig() if kernels is None else kernels
    options = _check_estimate(models, parallel, device, options, kernels)
    rows = _rows(_head_shape(models, parallel, kernels), models[0].module, parallel, device, HEAD, "embedding")
    for model in models:
        for kind, count, moe in _kinds(model):
            shape = _layer_shape(model, moe, _BYTES[parallel.dtype], kernels)
            rows += _rows([shape], model.module, parallel, device, BODY, kind, count=count, options=options)
    rows += _rows(_tail_shape(models[-1], parallel), models[-1].module, parallel, device, TAIL, "lm_head")
    return LayerTable(pd.DataFrame(rows), const_mb=check_number("const_mb", const_mb, minimum=0, maximum=MAX_MEMORY_MB),
                      time_unit=MS)


@dataclass(frozen=True)
class _Shape:
    """One kind's costs before parallel splitting: parameters, bytes kept and FLOPs, per token of its stack."""

    seq: float
    """The stack's sequence length ``s``: tokens per sample and keys each query attends to."""
    dense_params: float
    expert_params: float = 0.0
    replicated: float = 0.0
    """``R``: bytes per token split over ``t`` only under sequence parallel."""
    split: float = 0.0
    """``S``: bytes per token split over ``t``."""
    core: float = 0.0
    """Attention-core bytes per (query, key) pair, all heads."""
    core_tokens: float = 0.0
    """Attention-core bytes per token that ``selective`` does not keep either (split over ``t``)."""
    dropped_by_comm: float = 0.0
    """Bytes per token of ``R`` that ``comm`` recompute does not keep."""
    kept_by_full: float = 0.0
    """Bytes per token of ``R`` that ``full`` recompute keeps (the layer input)."""
    flops: float = 0.0
    """Forward matmul FLOPs per token."""
    core_flops: float = 0.0
    """Forward attention-core FLOPs per (query, key) pair."""


def _layer_shape(model: TransformerConfig, moe: bool, e: int, kernels: KernelConfig) -> _Shape:
    h, a, d, dv = model.hidden_size, model.num_heads, model.head_dim, model.v_head_dim
    q_r, kv_r, rope = model.q_lora_rank, model.kv_lora_rank, model.rope_head_dim
    if kv_r:  # MLA: latents projected up to per-head keys and values
        kv_heads = a
        query = h * q_r + q_r + q_r * a * d if q_r else h * a * d
        key_value = h * (kv_r + rope) + kv_r + kv_r * a * (d - rope + dv)
        latents = 2 * e * q_r + 2 * e * kv_r + e * rope
    else:
        kv_heads = model.num_kv_heads
        query, key_value, latents = h * a * d, h * kv_heads * (d + dv), 0
    attention = query + key_value + a * dv * h
    m = 3 if model.gated_mlp else 2
    kept_m = 4 if model.gated_mlp and not kernels.fused_mlp else m
    f, experts = model.expert_ffn_size, model.experts
    if moe:
        mlp_dense = h * experts + model.shared_experts * m * h * f
        expert = experts * m * h * f
        mlp_kept = model.top_k * (2 * e * h + kept_m * e * f) + model.shared_experts * kept_m * e * f + 4 * experts
        if kernels.moe == "hf":
            mlp_kept += model.top_k * (e * h + 4 + 16) + model.top_k * 12 + 4
        mlp_flops = 2 * (h * experts + (model.top_k + model.shared_experts) * m * h * f)
    else:
        mlp_dense, expert = m * h * model.ffn_size, 0.0
        mlp_kept, mlp_flops = kept_m * e * model.ffn_size, 2 * m * h * model.ffn_size
    qkv = e * (a * d + kv_heads * d + kv_heads * dv)
    core, core_tokens = _attention_core(kernels, e, a, a * (2 * d + dv), qkv, model.dropout)
    norm = e * h if kernels.norm == "paper" else 4 * h + e * h + 4
    hidden_masks = 2 * _mask_bytes(kernels, e) * h if model.hidden_dropout else 0
    return _Shape(
        seq=model.seq_length, dense_params=attention + mlp_dense + 2 * h, expert_params=expert,
        replicated=2 * norm + 2 * e * h + hidden_masks + latents,
        split=qkv + e * a * dv + mlp_kept, core=core, core_tokens=core_tokens,
        dropped_by_comm=2 * e * h, kept_by_full=e * h, flops=2 * attention + mlp_flops, core_flops=2 * a * (d + dv))


def _mask_bytes(kernels: KernelConfig, e: int) -> int:
    """Bytes per element of a dropout mask for a dropout running in ``e``-byte elements."""
    return 1 if kernels.dropout_mask == "bool" else e


def _attention_core(kernels: KernelConfig, e: int, a: int, repeated: int, qkv: float,
                    dropout: bool) -> tuple[float, float]:
    """The attention core's bytes per (query, key) pair and per token (module docstring, "Kernels").

    ``repeated`` is ``a·(2d + d_v)``, Q, K and V at every query head, in
    elements; ``qkv`` the paper's Q, K, V bytes per token.
    """
    if kernels.attention == "flash":
        return 0.0, 4 * a
    if kernels.attention == "paper":
        return a * (e + (_mask_bytes(kernels, e) + e if dropout else 0)), 0.0
    if kernels.attention == "eager":
        kept_for_values = _mask_bytes(kernels, e) + e if dropout else (e if e < 4 else 0)
        return a * (4 + kept_for_values), e * repeated - qkv
    return a * (4 + (_mask_bytes(kernels, 4) + 4 if dropout else 0)), 4 * repeated - qkv


def _head_shape(models: tuple[TransformerConfig, ...], parallel: ParallelConfig,
                kernels: KernelConfig) -> list[_Shape]:
    """The head's parts: the first stack's patch embedding (if any) and the last stack's token embedding."""
    e, parts = _BYTES[parallel.dtype], []
    first, last = models[0], models[-1]
    mask = _mask_bytes(kernels, e)
    if first.patch_size:
        pixels = 3 * first.patch_size**2
        parts.append(_Shape(seq=first.seq_length,
                            dense_params=pixels * first.hidden_size + first.seq_length * first.hidden_size,
                            replicated=e * pixels + first.hidden_dropout * mask * first.hidden_size,
                            flops=2 * pixels * first.hidden_size))
    parts.append(_Shape(seq=last.seq_length, dense_params=last.vocab_size * last.hidden_size,
                        replicated=last.hidden_dropout * mask * last.hidden_size))
    return parts


def _tail_shape(model: TransformerConfig, parallel: ParallelConfig) -> list[_Shape]:
    e, h, v = _BYTES[parallel.dtype], model.hidden_size, model.vocab_size
    return [_Shape(seq=model.seq_length, dense_params=h + v * h, replicated=2 * e * h,
                   split=4 * v, flops=2 * h * v)]


def _kinds(model: TransformerConfig) -> list[tuple[str, int, bool]]:
    """(kind, count, is MoE) of a stack, in model order."""
    if not model.experts:
        return [(model.name, model.layers, False)]
    dense = [(model.name, model.dense_layers, False)] if model.dense_layers else []
    return [*dense, (model.moe_name, model.layers - model.dense_layers, True)]


def _rows(parts: list[_Shape], module: str, parallel: ParallelConfig, device: DeviceConfig, role: str,
          kind: str, *, count: int = 1, options=("none",)) -> list[dict]:
    """The table rows of one kind (its parts summed): memory per device in MB, times per micro-batch in ms."""
    t, c, b = parallel.tensor_parallel, parallel.context_parallel, parallel.micro_batch_size
    t_sp = t if parallel.sequence_parallel else 1
    ms_per_flop = 1e3 / (device.tflops * 1e12 * device.mfu)
    experts = parallel.expert_parallel * parallel.expert_tensor_parallel
    held, working = param_bytes(sum(p.dense_params for p in parts) / t,
                                sum(p.expert_params for p in parts) / experts, parallel)
    tokens = [p.seq * b / c for p in parts]
    linear = sum(n * (p.replicated / t_sp + p.split / t) for n, p in zip(tokens, parts))
    core = sum(n * (p.seq * p.core + p.core_tokens) / t for n, p in zip(tokens, parts))
    core_time = sum(n * p.seq * p.core_flops for n, p in zip(tokens, parts)) / t * ms_per_flop
    forward = sum(n * p.flops for n, p in zip(tokens, parts)) / t * ms_per_flop + core_time
    comm_bytes = sum(n * p.dropped_by_comm for n, p in zip(tokens, parts))
    gathered = comm_bytes * (t - 1) / t if parallel.sequence_parallel else 0.0
    comm_time = (gathered / (device.link_gbs * 1e9) + 2 * comm_bytes / t_sp / (device.hbm_gbs * 1e9)) * 1e3
    kept = {  # option -> (activation bytes kept, backward time beyond 2 x forward)
        "none": (linear + core, 0.0),
        "selective": (linear, core_time),
        "comm": (linear + core - comm_bytes / t_sp, comm_time),
        "both": (linear - comm_bytes / t_sp, core_time + comm_time),
        "full": (sum(n * p.kept_by_full for n, p in zip(tokens, parts)) / t_sp, forward),
    }
    return [{KIND: kind, ROLE: role, COUNT: count, PARAM_MB: held / _MB, OPTION: option,
             FORWARD_TIME: forward, BACKWARD_TIME: 2 * forward + kept[option][1],
             ACTIVATION_MB: kept[option][0] / _MB, MODULE: module, MEMORY_ONCE_MB: 0.0, WORKING_MB: working / _MB,
             FIRST_WORKING_MB: working / _MB, GRAD_MB: 0.0}
            for option in options]


def param_bytes(dense: float, experts: float, parallel: ParallelConfig) -> tuple[float, float]:
    """Bytes a device holds for ``dense`` and routed-``experts`` parameters, and the ZeRO-3 gathered working set.

    The module docstring's rules ("Parameters"); the counts are already split over tensor and expert parallelism.

    Examples
    --------
    >>> param_bytes(1000, 0, ParallelConfig(data_parallel=4, zero=1))  # bf16 weight, fp32 gradient, Adam / 4
    (9000.0, 0.0)
    """
    w = _BYTES[parallel.dtype]
    g, o = 4, (12 if w == 2 else 8)
    ranks = parallel.data_parallel * parallel.context_parallel
    expert_ranks = ranks * parallel.tensor_parallel // (parallel.expert_parallel * parallel.expert_tensor_parallel)
    held = working = 0.0
    for params, shard in ((dense, ranks), (experts, expert_ranks)):
        kept = {0: w + g + o, 1: w + g + o / shard, 2: w + (g + o) / shard, 3: (w + g + o) / shard}[parallel.zero]
        held += params * kept
        working += params * (w + g) * (1 - 1 / shard) if parallel.zero == 3 else 0.0
    return held, working


def _check_estimate(models, parallel, device, options, kernels) -> tuple[str, ...]:
    """Check the stacks against each other and the parallel layout; return the options in SAPP order."""
    if not models:
        raise InputError("estimate_layers needs at least one TransformerConfig; got none")
    for index, model in enumerate(models):
        if not isinstance(model, TransformerConfig):
            raise InputError(f"models[{index}] must be a TransformerConfig; got {type(model).__name__}")
    if not isinstance(parallel, ParallelConfig):
        raise InputError(f"parallel must be a ParallelConfig; got {type(parallel).__name__}")
    if not isinstance(device, DeviceConfig):
        raise InputError(f"device must be a DeviceConfig; got {type(device).__name__}")
    if not isinstance(kernels, KernelConfig):
        raise InputError(f"kernels must be a KernelConfig; got {type(kernels).__name__}")
    if isinstance(options, str) or not options or len(set(options)) != len(options) \
            or any(option not in SAPP_OPTIONS for option in options):
        raise InputError(f"options must be distinct names among {', '.join(map(repr, SAPP_OPTIONS))}; "
                         f"got {options!r}")
    t, c = parallel.tensor_parallel, parallel.context_parallel
    split = t * c if parallel.sequence_parallel else c
    for index, model in enumerate(models):
        where = f"models[{index}] ({model.name!r})"
        for field, value, divisor, by in (
                ("num_heads", model.num_heads, t, "tensor_parallel"),
                ("num_kv_heads", model.num_kv_heads, t, "tensor_parallel"),
                ("seq_length", model.seq_length, split, "the sequence split (context_parallel, "
                                                        "times tensor_parallel under sequence_parallel)"),
                ("experts", model.experts, parallel.expert_parallel, "expert_parallel")):
            if value % divisor:
                raise InputError(f"{where} {field}={value} is not a multiple of {by} = {divisor}")
        if index < len(models) - 1 and model.vocab_size:
            raise InputError(f"{where} vocab_size={model.vocab_size}; only the last stack has a vocabulary "
                             "(its token embedding is the head, its LM head the tail)")
        if index > 0 and model.patch_size:
            raise InputError(f"{where} patch_size={model.patch_size}; only the first stack embeds patches")
    if not models[-1].vocab_size:
        raise InputError(f"models[{len(models) - 1}] ({models[-1].name!r}) needs vocab_size > 0: "
                         "the last stack's LM head is the tail")
    if len(models) > 1 and not models[0].patch_size:
        raise InputError(f"models[0] ({models[0].name!r}) needs patch_size > 0: the head embeds the first "
                         "stack's input, and only the last stack has a vocabulary")
    kinds = [kind for model in models for kind, _, _ in _kinds(model)] + ["embedding", "lm_head"]
    repeated = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if repeated:
        raise InputError(f"layer kind name(s) {', '.join(map(repr, repeated))} repeat; give each stack its "
                         "own name (and moe_name); 'embedding' and 'lm_head' are the head and tail")
    return tuple(option for option in SAPP_OPTIONS if option in options)
