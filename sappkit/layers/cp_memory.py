"""The keys and values all-gather context parallelism holds while a layer's attention runs: a working set.

``cp_kind="allgather"`` (Llama 3's CP, Transformer Engine's
``AttnFuncWithCPAndKVAllGather`` in
``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``, commit d0067d0, the
``sbhd`` layout Megatron-LM passes) keeps only the local keys and values
for the backward; each pass gathers the whole sequence's again, one layer at
a time, so what it holds is a transient working set (``working_mb`` and
``first_working_mb``), not activations kept per layer. Per micro-batch on one
device, with ``n = s·b`` tokens of the whole sequence, ``K = n·a_kv·d/t`` and
``V = n·a_kv·d_v/t`` elements of its keys and values, ``e`` bytes each (the
attention's input dtype), ``c`` the CP degree:

- the backward allocates whole-sequence gradient accumulators ``dK``, ``dV``
  (``K + V``) and gathers, then reorders, ``K`` and ``V`` (``K + V``);
- each of its two steps (the rank's two load-balanced query chunks ``r``
  and ``2c − 1 − r`` of ``2c``) runs the kernel against the keys up to its
  chunk, ``(r + 1)/2c`` and ``(2c − r)/2c`` of them, and keeps the step's
  ``dK``, ``dV`` until the pass returns: ``(K + V)(2c + 1)/2c`` on every
  rank;
- before the reduce-scatter ``dK``, then ``dV``, is reordered into a new
  tensor while the rest is still referenced: ``max(K, V)`` more.

The backward's peak, ``e·((K + V)(3 + 1/2c) + max(K, V))``, is above the
forward's (the gathered ``K + V`` and one reorder copy). A sliding window
(``attention_window``) shortens the steps' key ranges, not the gathered
sequence; the steps' gradients are counted at full causal length (an upper
bound, and exact wherever a stack has layers without one). Zero for ``ring``
(Megatron's ``p2p``) and ``a2a`` (Ulysses), and without context
parallelism: what those hold beyond the local keys and values (the ring's
block in flight, Ulysses' exchanged heads) is of the local tokens' size,
not the whole sequence's, and is not counted.
"""

from __future__ import annotations

from .configs import _BYTES, ParallelConfig
from .shapes import Shape

__all__ = ["kv_gather_bytes"]


def kv_gather_bytes(parts: list[Shape], parallel: ParallelConfig) -> float:
    """Bytes all-gather context parallelism holds at the peak of one micro-batch's backward through ``parts`` (the
    module docstring's ``e·((K + V)(3 + 1/2c) + max(K, V))``, the largest part's: the layers run one at a time);
    0 for the other kinds and without context parallelism.

    Examples
    --------
    One layer of 8 key/value heads of 128, 8,192 tokens, ``t = 8``, ``c = 2`` in bf16: ``K = V = 8192·128``,
    ``2·(2K·(3 + 1/4) + K)``:

    >>> from sappkit.layers import KernelConfig, TransformerConfig
    >>> from sappkit.layers.shapes import layer_shape
    >>> llama = TransformerConfig(layers=1, hidden_size=8192, num_heads=64, num_kv_heads=8, ffn_size=28672,
    ...                           seq_length=8192, vocab_size=128256, gated_mlp=True)
    >>> shape = layer_shape(llama, False, 2, KernelConfig())
    >>> parallel = ParallelConfig(tensor_parallel=8, context_parallel=2, cp_kind="allgather")
    >>> kv_gather_bytes([shape], parallel) == 2 * (2 * 8192 * 128 * 3.25 + 8192 * 128)
    True
    >>> kv_gather_bytes([shape], ParallelConfig(tensor_parallel=8, context_parallel=2, cp_kind="ring"))
    0.0
    """
    c = parallel.context_parallel
    if parallel.cp_kind != "allgather" or c == 1:
        return 0.0
    e, t, b = _BYTES[parallel.dtype], parallel.tensor_parallel, parallel.micro_batch_size
    held = 0.0
    for part in parts:
        tokens = part.seq * b
        keys, values = tokens * part.keys / t, tokens * part.values / t
        held = max(held, e * ((keys + values) * (3 + 1 / (2 * c)) + max(keys, values)))
    return held
