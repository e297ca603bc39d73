"""A layer's ops, forward and backward, priced on a device by the compute or memory roofline.

Per micro-batch and device, with ``n = s·b/c`` tokens, ``t`` tensor-parallel
ranks (``t_sp = t`` under sequence parallelism, else 1) and ``e`` bytes per
element. Matmuls are ``(M, K) × (K, N)``: ``2MNK`` FLOPs moving ``e(MK + KN
+ MN)`` bytes; their backward is two matmuls of the same FLOPs (the input
gradient and the weight gradient; a frozen stack's layers run only the first). A dense layer runs:

- ``norm1``, ``norm2``: memory-bound, ``2e·n·h/t_sp`` bytes forward (read,
  write), ``3e·n·h/t_sp`` backward (read input and gradient, write);
- ``qkv`` (``h → (a·d + a_kv·(d + d_v))/t``; MLA: the latent down and up
  projections), ``out`` (``a·d_v/t → h``), ``fc1`` (``h → f/t``, gated ``2f/t``),
  ``fc2`` (``f/t → h``): matmuls;
- the attention core over ``a/t`` heads of ``s/c`` queries and ``s`` keys:
  materialised (``KernelConfig.attention`` ``paper``, ``eager``, ``math``:
  Megatron's fused softmax) as the batched matmuls ``QKᵀ`` and ``PV`` (four
  backward), a softmax moving ``2e`` bytes per score forward and ``3e``
  backward and, with dropout, a dropout moving ``2e + 1`` both ways; or
  ``flash``: one kernel of ``2·(d + d_v)`` FLOPs per causal (query, key) pair
  (half the pairs) forward and 2.5 times that backward (FlashAttention-2's
  five backward matmuls to two forward);
- ``act``: GeLU moving ``2e·n·f/t`` bytes forward and ``3e`` per element
  backward, SwiGLU ``3e`` and ``5e``;
- ``dropout_add1``, ``dropout_add2``: the residual add (and hidden dropout)
  moving ``n·h/t_sp·(3e + 1)`` bytes forward and ``(2e + 1)`` backward
  (``3e`` and nothing without dropout).

A MoE layer replaces ``fc1``, ``act`` and ``fc2`` by the ``router`` (``h →
E``, over the ``n/t_sp`` tokens a rank holds), the token ``permute`` and
``unpermute`` (``2e·h`` bytes per routed token each), the routed experts as
one grouped matmul per projection (each device runs its ``E/ep`` experts on
``n/t·top_k`` routed tokens on average, split over ``etp``) and the shared
experts as a dense MLP split over ``t``.

``selective`` recompute re-runs the ops marked ``core``, ``comm`` recompute
the ops marked ``norm``, ``full`` every forward op. The head runs the token
embedding (a memory-bound gather ``2e·n·h/t_sp``, its backward a scatter-add)
and its dropout; the tail the final norm, the LM head (``h → v/t``) and the
vocabulary-parallel cross-entropy (``(e + 4)`` bytes per logit each way).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware import DeviceConfig
from .configs import _BYTES, KernelConfig, ParallelConfig, TransformerConfig

__all__ = ["Op", "layer_ops", "head_ops", "patch_ops", "tail_ops", "FORWARD", "BACKWARD"]

FORWARD, BACKWARD = "forward", "backward"


@dataclass(frozen=True)
class Op:
    """One kernel of a layer, priced on a device."""

    name: str
    phase: str
    """``forward`` or ``backward``."""
    flops: float
    nbytes: float
    time_ms: float
    matmul: bool
    """A matmul (the compute roofline applies); else memory-bound."""
    core: bool = False
    """Part of the attention core (``selective`` recompute re-runs its forward)."""
    norm: bool = False
    """A layer norm (``comm`` recompute re-runs its forward)."""


class _Pricer:
    """Builds a layer's ops on one device (the module docstring's formulas)."""

    def __init__(self, device: DeviceConfig, parallel: ParallelConfig, *, frozen: bool = False):
        self.device, self.dtype, self.e = device, parallel.dtype, _BYTES[parallel.dtype]
        self.frozen = frozen  # weights that train no gradient: their matmuls run no weight-gradient matmul
        self.ops: list[Op] = []

    def matmul(self, name: str, m: float, n: float, k: float, *, batch: float = 1, core: bool = False):
        """A (batched) matmul forward, its input- and weight-gradient matmuls backward."""
        self._matmul(name, FORWARD, m, n, k, batch, core)
        self._matmul(name, BACKWARD, m, k, n, batch, core)
        if core or not self.frozen:  # the core's second backward matmul is an input gradient too
            self._matmul(name, BACKWARD, k, n, m, batch, core)

    def _matmul(self, name, phase, m, n, k, batch, core):
        flops = 2 * m * n * k
        nbytes = self.e * (m * k + k * n + m * n) * batch
        time = self.device.matmul_ms(flops * batch, nbytes, self.dtype, size=flops)
        self.ops.append(Op(name, phase, flops * batch, nbytes, time, True, core))

    def memory(self, name: str, forward_bytes: float, backward_bytes: float, *, core=False, norm=False):
        """A memory-bound kernel forward and backward."""
        for phase, nbytes in ((FORWARD, forward_bytes), (BACKWARD, backward_bytes)):
            if nbytes:
                self.ops.append(Op(name, phase, 0.0, nbytes, self.device.memory_ms(nbytes), False, core, norm))

    def fused(self, name: str, forward_flops: float, backward_flops: float, nbytes: float, *, core=False):
        """A fused kernel on the matmul units (flash attention), priced at its own size."""
        for phase, flops in ((FORWARD, forward_flops), (BACKWARD, backward_flops)):
            time = self.device.matmul_ms(flops, nbytes, self.dtype)
            self.ops.append(Op(name, phase, flops, nbytes, time, True, core))


def layer_ops(model: TransformerConfig, moe: bool, parallel: ParallelConfig, device: DeviceConfig,
              kernels: KernelConfig) -> list[Op]:
    """The ops of one body layer (dense, or MoE when ``moe``) per micro-batch on one device (of a frozen stack: no
    weight-gradient matmuls)."""
    price = _Pricer(device, parallel, frozen=model.frozen)
    t, c, e = parallel.tensor_parallel, parallel.context_parallel, price.e
    t_sp = t if parallel.sequence_parallel else 1
    h, n = model.hidden_size, model.seq_length * parallel.micro_batch_size / c
    norm = (2 * e * n * h / t_sp, 3 * e * n * h / t_sp)
    residual = ((3 * e + 1, 2 * e + 1) if model.hidden_dropout else (3 * e, 0))
    price.memory("norm1", *norm, norm=True)
    _attention(price, model, parallel, kernels, n)
    price.memory("dropout_add1", *(n * h / t_sp * r for r in residual))
    price.memory("norm2", *norm, norm=True)
    if moe:
        _moe(price, model, parallel, n)
    else:
        _mlp(price, model, n, model.ffn_size / t)
    price.memory("dropout_add2", *(n * h / t_sp * r for r in residual))
    return price.ops


def _attention(price: _Pricer, model: TransformerConfig, parallel: ParallelConfig, kernels: KernelConfig,
               n: float) -> None:
    t, e, h = parallel.tensor_parallel, price.e, model.hidden_size
    a, d, dv = model.num_heads, model.head_dim, model.v_head_dim
    q_r, kv_r, rope = model.q_lora_rank, model.kv_lora_rank, model.rope_head_dim
    if kv_r:  # MLA: latent down projections, then up to per-head queries, keys and values
        if q_r:
            price.matmul("q_down", n, q_r / t, h)
            price.matmul("q_up", n, a * d / t, q_r)
        else:
            price.matmul("q", n, a * d / t, h)
        price.matmul("kv_down", n, (kv_r + rope) / t, h)
        price.matmul("kv_up", n, a * (d - rope + dv) / t, kv_r)
    else:
        price.matmul("qkv", n, (a * d + model.num_kv_heads * (d + dv)) / t, h)
    heads, queries = a / t, model.seq_length / parallel.context_parallel
    keys, batch = model.seq_length, parallel.micro_batch_size * heads
    if kernels.attention == "flash":
        forward = 2 * batch * queries * keys * (d + dv) / 2  # causal: half the (query, key) pairs
        price.fused("attention", forward, 2.5 * forward, e * batch * (queries * (2 * d + 2 * dv) + keys * (d + dv)),
                    core=True)
    else:
        price.matmul("scores", queries, keys, d, batch=batch, core=True)
        scores = batch * queries * keys
        price.memory("softmax", 2 * e * scores, 3 * e * scores, core=True)
        if model.dropout:
            price.memory("attention_dropout", (2 * e + 1) * scores, (2 * e + 1) * scores, core=True)
        price.matmul("context", queries, dv, keys, batch=batch, core=True)
    price.matmul("out", n, h, a * dv / t)


def _mlp(price: _Pricer, model: TransformerConfig, n: float, width: float, prefix: str = "") -> None:
    """A dense (or shared-expert) MLP of ``width`` columns per device."""
    e, h = price.e, model.hidden_size
    price.matmul(f"{prefix}fc1", n, width * (2 if model.gated_mlp else 1), h)
    price.memory(f"{prefix}act", *((3 * e * n * width, 5 * e * n * width) if model.gated_mlp
                                   else (2 * e * n * width, 3 * e * n * width)))
    price.matmul(f"{prefix}fc2", n, h, width)


def _moe(price: _Pricer, model: TransformerConfig, parallel: ParallelConfig, n: float) -> None:
    t, e, h = parallel.tensor_parallel, price.e, model.hidden_size
    t_sp = t if parallel.sequence_parallel else 1
    experts, ep, etp = model.experts, parallel.expert_parallel, parallel.expert_tensor_parallel
    price.matmul("router", n / t_sp, experts, h)
    routed = n / t * model.top_k  # tokens this device's experts run, balanced routing
    price.memory("permute", 2 * e * routed * h, 2 * e * routed * h)
    local = experts / ep
    per_expert = routed * etp / local
    width = model.expert_ffn_size / etp
    price.matmul("experts_fc1", per_expert, width * (2 if model.gated_mlp else 1), h, batch=local)
    price.memory("experts_act", *((3 * e * routed * width, 5 * e * routed * width) if model.gated_mlp
                                  else (2 * e * routed * width, 3 * e * routed * width)))
    price.matmul("experts_fc2", per_expert, h, width, batch=local)
    price.memory("unpermute", 2 * e * routed * h, 2 * e * routed * h)
    if model.shared_experts:
        _mlp(price, model, n, model.shared_experts * model.expert_ffn_size / t, prefix="shared_")


def head_ops(model: TransformerConfig, parallel: ParallelConfig, device: DeviceConfig) -> list[Op]:
    """The head's ops: the last stack's token embedding (and its dropout), per micro-batch on one device."""
    price = _Pricer(device, parallel)
    t_sp = parallel.tensor_parallel if parallel.sequence_parallel else 1
    e, h = price.e, model.hidden_size
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    price.memory("embedding", 2 * e * n * h / t_sp, 2 * e * n * h / t_sp)
    if model.hidden_dropout:
        price.memory("embedding_dropout", n * h / t_sp * (2 * e + 1), n * h / t_sp * (2 * e + 1))
    return price.ops


def patch_ops(model: TransformerConfig, parallel: ParallelConfig, device: DeviceConfig) -> list[Op]:
    """A vision tower's patch embedding: one matmul of ``3p²`` pixels to ``h`` per patch."""
    price = _Pricer(device, parallel)
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    price.matmul("patch_embedding", n, model.hidden_size, 3 * model.patch_size**2)
    return price.ops


def tail_ops(model: TransformerConfig, parallel: ParallelConfig, device: DeviceConfig) -> list[Op]:
    """The tail's ops: final norm, LM head and cross-entropy, per micro-batch on one device."""
    price = _Pricer(device, parallel)
    t = parallel.tensor_parallel
    t_sp = t if parallel.sequence_parallel else 1
    e, h, v = price.e, model.hidden_size, model.vocab_size
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    price.memory("final_norm", 2 * e * n * h / t_sp, 3 * e * n * h / t_sp, norm=True)
    price.matmul("lm_head", n, v / t, h)
    price.memory("cross_entropy", (e + 4) * n * v / t, (e + 4) * n * v / t)
    return price.ops
