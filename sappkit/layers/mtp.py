"""Multi-token-prediction (MTP) layers: what they add to the tail, on the last stage.

DeepSeek-V3 (Liu et al. 2024, "DeepSeek-V3 Technical Report", sec. 2.2)
appends ``D`` sequential MTP modules to the model; module ``k`` embeds the
tokens shifted by ``k`` with the *shared* embedding, normalises them and the
previous depth's hidden state (two RMSNorms), projects their concatenation
``2h → h``, runs one transformer block and predicts with the *shared* output
head. Megatron-LM (``--mtp-num-layers``) builds them after the last decoder
layer on the last pipeline stage, which therefore holds a copy of the word
embeddings (``GPTModel`` creates its ``embedding`` where ``pre_process or
mtp_process``: ``megatron/core/models/gpt/gpt_model.py``, commit
``d98e8a64ddf3``); MindFormers' ``mtp_depth`` does the same, and SAPP's
recompute chooser puts them after the output layer in the last stage's
working set.

sappkit prices them with the tail (``lm_head``), which sits on the last
stage (stage 0 under the V schedules, where the model ends), so the
balancer, the chooser, the memory model and the simulator see them as they
see the LM head:

- **parameters**: the embedding copy ``v·h``, and per MTP layer its block
  (as a body layer of the stack's last kind: MoE for DeepSeek-V3), the
  projection ``2h·h``, the two norms and its final norm (``3h``); the output
  head is the LM head's;
- **activations**, per token: the block's (under no recompute) plus
  ``R = 2e·h`` (the two norms' inputs) and ``S = 2e·h`` (the projection's
  input) plus, for its own logits, what the LM head keeps (``R = 2e·h``,
  ``S = 4v``);
- **time**: per MTP layer the embedding lookup, the two norms, the
  projection matmul, the block's ops and communication, and a second LM head
  with its cross-entropy.

The tail's working set (:meth:`~sappkit.LayerTable.working_set_mb`) is what it
keeps at one micro-batch, so it holds the LM head's and the MTP layers'
activations: SAPP's estimator's output layer plus MTP layer at the end of
warm-up. The MTP layers run no recompute of their own (the tail has one
option).
"""

from __future__ import annotations

from .comm import LayerComm, layer_comm, tail_comm
from .configs import _BYTES, KernelConfig, ParallelConfig, TransformerConfig
from .ops import BACKWARD, FORWARD, Op, _Pricer, head_ops, layer_ops, tail_ops
from .shapes import Shape, kinds, layer_shape

__all__ = ["mtp_shapes", "mtp_ops", "mtp_comm"]


def _block(model: TransformerConfig) -> bool:
    """Whether an MTP layer's block is a MoE layer: the stack's last kind's."""
    return kinds(model)[-1][2]


def mtp_shapes(model: TransformerConfig, parallel: ParallelConfig, kernels: KernelConfig) -> list[Shape]:
    """The MTP layers' shapes (module docstring), none without them."""
    if not model.mtp_layers:
        return []
    e, h, v, s = _BYTES[parallel.dtype], model.hidden_size, model.vocab_size, model.seq_length
    per_layer = [layer_shape(model, _block(model), e, kernels),
                 Shape(seq=s, dense_params=2 * h * h + 3 * h, replicated=2 * e * h, split=2 * e * h,
                       flops=2 * 2 * h * h),
                 Shape(seq=s, dense_params=0.0, replicated=2 * e * h, split=4 * v, flops=2 * h * v)]
    return [Shape(seq=s, dense_params=v * h)] + per_layer * model.mtp_layers


def mtp_ops(model: TransformerConfig, parallel: ParallelConfig, device, kernels: KernelConfig) -> list[Op]:
    """The MTP layers' ops per micro-batch on one device (module docstring)."""
    ops = []
    t_sp = parallel.tensor_parallel if parallel.sequence_parallel else 1
    h, n = model.hidden_size, model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    for _ in range(model.mtp_layers):
        price = _Pricer(device, parallel)
        e = price.e
        for norm in ("mtp_enorm", "mtp_hnorm"):
            price.memory(norm, 2 * e * n * h / t_sp, 3 * e * n * h / t_sp, norm=True)
        price.matmul("mtp_eh_proj", n, h / parallel.tensor_parallel, 2 * h)
        ops += head_ops(model, parallel, device) + price.ops
        ops += layer_ops(model, _block(model), parallel, device, kernels) + tail_ops(model, parallel, device, kernels)
    return ops


def mtp_comm(model: TransformerConfig, parallel: ParallelConfig, cluster, device,
             kernels: KernelConfig) -> LayerComm:
    """The tail's communication with its MTP layers: the LM head's, and per MTP layer its block's and its
    output head's."""
    forward, backward = tail_comm(model, parallel, cluster)
    if not model.mtp_layers:
        return LayerComm(tp=(forward, backward))
    moe = _block(model)
    ops = layer_ops(model, moe, parallel, device, kernels)
    core = tuple(sum(op.time_ms for op in ops if op.core and op.phase == phase) for phase in (FORWARD, BACKWARD))
    block = layer_comm(model, moe, parallel, cluster, core)
    n = model.mtp_layers
    return LayerComm(tp=(forward * (n + 1) + n * block.tp[0], backward * (n + 1) + n * block.tp[1]),
                     cp=(n * block.cp[0], n * block.cp[1]), ep=(n * block.ep[0], n * block.ep[1]))
