"""torchtitan's per-op selective activation checkpointing as a recompute option: what it saves and what it re-runs.

torchtitan's ``activation_checkpoint.mode = "selective"`` with ``selective_ac_option = "op"`` wraps each
transformer block in a checkpoint whose policy (``_apply_ac_to_transformer_block`` in
``torchtitan/models/llama3/parallelize_llama.py`` at commit 820504e, and
``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370) saves the outputs of the ops in its ``_save_list``
(``aten.mm``, ``aten._scaled_dot_product_flash_attention`` and ``_efficient_attention``,
``_c10d_functional.reduce_scatter_tensor``, ``aten.max``) except every second ``aten.mm`` of the block (a counter
per block and pass: the 2nd, 4th, ... are recomputed), and recomputes every other op in the backward. The block's
matmuls run in the order of ``torchtitan/models/llama3/model.py`` (same commit): ``wq``, ``wk``, ``wv`` (the
attention's input projections, three matmuls), ``wo``, then ``w2(silu(w1(x)) * w3(x))``: ``w1``, ``w3``, ``w2``.
So the option (sappkit's name :data:`OP_SAC`) saves, per token of a dense layer:

- the block's input (the checkpoint's input), ``e·h`` (split over ``t`` under sequence parallelism);
- the outputs of the odd matmuls: ``wq`` (``e·a·d/t``), ``wv`` (``e·a_kv·d_v/t``), ``w1`` (``e·f/t``) and
  ``w2`` (``e·h`` on every tensor-parallel rank: the row-parallel matmul's partial sums before their reduction);
  without a gated MLP the matmuls are ``wq, wk, wv, wo, w1, w2`` and ``w2`` is recomputed;
- a fused attention kernel's output and log-sum-exp (``e·a·d_v/t + 4a/t``); a materialised attention is
  batched matmuls and a softmax, none in the list: recomputed, nothing kept per (query, key) pair;
- under sequence parallelism the two reduce-scatters' outputs (``2·e·h/t``).

It re-runs in the backward, before the layer's backward ops: ``wk``, ``wo`` and ``w3`` (each priced at its own
shape on the device), every memory-bound forward op of the layer (the norms, the rotary embedding, the activation,
the first residual add) but the last residual add (the block's output, which no backward op of the block reads),
and the tensor-parallel collectives the backward reads that are not in the list: the sequence-parallel
all-gathers (``LayerComm.regather``), or without sequence parallelism the attention block's all-reduce. Under FP8
the linear layers' GEMMs are not ``aten.mm`` (torchao's ``Float8Linear`` runs ``torch._scaled_mm``): every one
is recomputed, with its casts, and only their inputs' ``max`` (a scalar) is saved. Context parallelism's ring
exchanges run inside the saved attention and are not re-run. Layers with MLA or routed experts have no op order
here (torchtitan's Llama 3 is the source) and are refused.
"""

from __future__ import annotations

from ..errors import InputError
from ..hardware import DeviceConfig
from .comm import LayerComm
from .configs import _BYTES, KernelConfig, ParallelConfig, TransformerConfig
from .ops import FORWARD, Op

__all__ = ["OP_SAC", "OP_OPTIONS", "op_sac_projections", "op_sac_kept_bytes", "op_sac_rerun", "check_op_sac",
           "prices_op_sac"]

#: sappkit's name of torchtitan's per-op selective activation checkpointing (module docstring).
OP_SAC = "selective_op"
#: The recompute options priced beside SAPP's five (:data:`~sappkit.columns.SAPP_OPTIONS`).
OP_OPTIONS = (OP_SAC,)
#: The memory-bound op whose output is the block's output (:func:`sappkit.layers.ops.layer_ops` names it).
_LAYER_OUTPUT = "dropout_add2"


def prices_op_sac(model: TransformerConfig) -> bool:
    """Whether :data:`OP_SAC` prices the stack's layers (not with MLA attention or routed experts)."""
    return not (model.kv_lora_rank or model.experts)


def check_op_sac(model: TransformerConfig) -> None:
    """Refuse a stack whose layers :data:`OP_SAC` cannot price (:func:`prices_op_sac`)."""
    if not prices_op_sac(model):
        what = "MLA attention (kv_lora_rank > 0)" if model.kv_lora_rank else f"routed experts (experts={model.experts})"
        raise InputError(f"recompute option {OP_SAC!r} prices torchtitan's Llama 3 block (its matmul order); the "
                         f"stack {model.name!r} has {what}, which it does not know: use 'selective' or 'full'")


def op_sac_projections(model: TransformerConfig, parallel: ParallelConfig) -> list[tuple[str, float, float, float]]:
    """The block's ``aten.mm`` calls in torchtitan's order, per micro-batch on one device: ``(name, M, N, K)``
    (``M`` tokens; ``N`` output and ``K`` reduction columns on the device)."""
    t, h = parallel.tensor_parallel, model.hidden_size
    a, a_kv, d, dv, f = model.num_heads, model.num_kv_heads, model.head_dim, model.v_head_dim, model.ffn_size
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    mlp = [("w1", n, f / t, h), ("w3", n, f / t, h)] if model.gated_mlp else [("w1", n, f / t, h)]
    return [("wq", n, a * d / t, h), ("wk", n, a_kv * d / t, h), ("wv", n, a_kv * dv / t, h),
            ("wo", n, h, a * dv / t), *mlp, ("w2", n, h, f / t)]


def op_sac_kept_bytes(model: TransformerConfig, parallel: ParallelConfig, kernels: KernelConfig) -> float:
    """Activation bytes one dense layer keeps per micro-batch on one device under :data:`OP_SAC` (module
    docstring)."""
    e, h, t = _BYTES[parallel.dtype], model.hidden_size, parallel.tensor_parallel
    t_sp = t if parallel.sequence_parallel else 1
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    kept = e * n * h / t_sp
    if parallel.fp8_recipe is None:
        kept += sum(e * m * width for i, (_, m, width, _) in enumerate(op_sac_projections(model, parallel)) if i % 2 == 0)
    if kernels.fused_attention:
        kept += n * (e * model.num_heads * model.v_head_dim + 4 * model.num_heads) / t
    if parallel.sequence_parallel and t > 1:
        kept += 2 * e * n * h / t
    return kept


def op_sac_rerun(ops: list[Op], comm: LayerComm, model: TransformerConfig, parallel: ParallelConfig,
                 device: DeviceConfig, kernels: KernelConfig) -> tuple[float, float]:
    """What :data:`OP_SAC` re-runs in one dense layer's backward: (compute ms, tensor-parallel communication ms)."""
    fp8 = parallel.fp8_recipe is not None
    compute = sum(op.time_ms for op in ops if op.phase == FORWARD and _recomputed(op, kernels, fp8))
    if not fp8:
        e = _BYTES[parallel.dtype]
        compute += sum(device.matmul_ms(2 * m * width * k, e * (m * k + k * width + m * width), parallel.dtype)
                       for i, (_, m, width, k) in enumerate(op_sac_projections(model, parallel)) if i % 2)
    tp = comm.regather if parallel.sequence_parallel else comm.regather / 2
    return compute, tp


def _recomputed(op: Op, kernels: KernelConfig, fp8: bool) -> bool:
    """Whether a forward op of sappkit's layer is re-run as itself (the bf16 projections are priced one by one)."""
    if op.core:
        return not kernels.fused_attention
    if op.matmul:
        return fp8
    return op.name != _LAYER_OUTPUT
