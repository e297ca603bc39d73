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
  five backward matmuls to two forward). Under context parallelism the
  kind (``ParallelConfig.cp_kind``) decides the kernels: ``ring`` runs ``c``
  steps, each the ``s/c`` local queries (two load-balanced chunks) against
  one ``s/c`` block of keys at that block's size, and ``c − 1`` softmax
  merges (memory-bound: the fp32 partial output and log-sum-exp read twice
  and written, ``12·(d_v + 1)`` bytes per query and head forward; the fp32
  query gradient accumulated, ``12·d`` backward); ``allgather`` one kernel
  of the local queries against all ``s`` keys; ``a2a`` (Ulysses) one kernel
  of all ``s`` queries and keys over ``a/(t·c)`` heads;
- ``act``: GeLU moving ``2e·n·f/t`` bytes forward and ``3e`` per element
  backward, SwiGLU ``3e`` and ``5e``;
- ``dropout_add1``, ``dropout_add2``: the residual add (and hidden dropout)
  moving ``n·h/t_sp·(3e + 1)`` bytes forward and ``(2e + 1)`` backward
  (``3e`` and nothing without dropout).

With eager elementwise ops (``KernelConfig.fused_elementwise=False``) the
norms and a gated MLP's ``act`` move :data:`EAGER_BYTES` per element instead,
and ``rope`` rotates the local queries and keys (``n·(a + a_kv)·d/t``
elements; MLA: ``n·(a/t + 1)`` rotary parts of ``d_r``), which the fused
kernels do inside the projection's epilogue and these formulas leave out.

A MoE layer replaces ``fc1``, ``act`` and ``fc2`` by the ``router`` (``h →
E``, over the ``n/t_sp`` tokens a rank holds) and its softmax, top-k and
auxiliary loss (``router_topk``: ``(e + 8)`` bytes per score each way, the
logits read and fp32 probabilities written and read again), the token
``permute`` and ``unpermute`` of the ``n/t·top_k`` token copies a device
sends (``2e·h`` bytes each), and on the ``ρ = κ·etp·n/t·top_k`` copies the
busiest device receives (``κ``: ``expert_imbalance``; ``etp``: the expert
tensor-parallel gather of Megatron-Core's all-to-all dispatcher) the sort by
local expert and its inverse (``sort_tokens``, ``unsort_tokens``, ``2e·h``
bytes each, with more than one local expert), the routed experts as one
grouped matmul per projection (``E/ep`` experts of ``ρ·ep/E`` tokens each,
``f/etp`` wide) and their activation; then the shared experts as a dense MLP
split over ``t``. GPT-OSS's clamped expert activation (``TransformerConfig.expert_clamp``: ``experts_clamp`` before
``experts_act``) and its experts' second bias (``expert_bias``: ``experts_bias`` after ``experts_fc2``) are eager
ops moving :data:`MEGATRON_EAGER_BYTES` per element.

**FP8** (``ParallelConfig.dtype="fp8"``; ``fp8_recipe``) runs the linear
layers' GEMMs as Transformer Engine runs them, and the rest in BF16 (the
attention core, the norms, the activations, the router, the LM head and the
patch embedding, which trainers run outside TE's linear layers; the
optimizer in FP32). Each of the three GEMMs of a linear layer (forward,
input gradient, weight gradient) reads FP8 inputs (1 byte) and writes BF16
at the device's FP8 peak (``mxfp8``: its block-scaled peak) and FP8
efficiency. Before each, a memory-bound ``<name>_cast`` quantizes the BF16
input (forward) or output gradient (backward): it reads the tensor once
(``delayed``: the scale comes from the amax history) or twice
(``current``: an amax pass, then the cast) and writes two FP8 copies, the
rowwise and the columnwise one (Hopper transposes it; MXFP8 quantizes each
direction on its own), with ``mxfp8`` one E8M0 scale per 32 elements of
each; a device with block-scaled FP8 (``DeviceConfig.mxfp8_tflops``:
Blackwell, SM 10.0) also runs FP8 GEMMs in every layout, so a per-tensor
cast writes one copy there. ``delayed`` also updates its amax histories (``amax_history``: 1,024
fp32 entries for three tensors per GEMM forward and two backward, read and
written). Sources: the low-precision-training pages of Transformer
Engine's documentation (NVIDIA/TransformerEngine: "Performance
considerations" for the rowwise and columnwise usages and the Hopper
transpose; "FP8 Delayed Scaling" for one tensor read against current
scaling's two and the history shapes; "MXFP8" for the 32-element blocks).

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

__all__ = ["Op", "layer_ops", "head_ops", "patch_ops", "tail_ops", "FORWARD", "BACKWARD", "BF16_GEMMS",
           "AMAX_HISTORY", "EAGER_BYTES", "MEGATRON_EAGER_BYTES"]

FORWARD, BACKWARD = "forward", "backward"
#: The GEMMs an FP8 run keeps in BF16 (besides the attention core): Megatron-LM's router and LM head are not
#: Transformer Engine linear layers, and a patch embedding is a convolution.
BF16_GEMMS = ("router", "lm_head", "patch_embedding")
#: Transformer Engine's ``DelayedScaling`` default ``amax_history_len`` (NeMo's and Megatron-LM's too).
AMAX_HISTORY = 1024
#: Bytes per element of a ring step's softmax merge: the partial outputs and log-sum-exps are fp32.
_MERGE_BYTES = 4
#: Bytes PyTorch's eager ops move per element (forward, backward), by the activations' bytes per element: an
#: RMSNorm as torchtitan writes it (an fp32 upcast, ``pow``, ``mean``, ``rsqrt``, the product, the cast back and
#: the weight's product; per element of its input), SwiGLU's ``silu`` and product (per element of each of the
#: gate's and the up projection's outputs) and the complex-number rotary embedding (per element of the queries
#: and keys). Counted ATen op by ATen op, each op's input and output tensors read or written once;
#: ``tests/torch/test_eager_elementwise.py`` counts them again on PyTorch.
EAGER_BYTES = {2: {"norm": (36, 96), "swiglu": (10, 18), "rope": (20, 20)},
               4: {"norm": (28, 96), "swiglu": (20, 36), "rope": (8, 8)}}
#: Bytes the eager ops Megatron-Core runs around its fused MoE kernels move per element (forward, backward), by the
#: activations' bytes per element, ``torch.compile`` or not: a clamped gated activation's two clamps and their
#: concatenation (``weighted_bias_quick_geglu_impl`` in ``megatron/core/fusions/fused_bias_geglu.py``; per
#: element of each half) and the routed experts' second bias, ``t + b·p`` per expert then concatenated
#: (``TEGroupedMLP._apply_bias`` in ``megatron/core/transformer/moe/experts.py``; per element of the experts'
#: output), both at the Megatron-LM commits Megatron-Bridge pins for 25.11, 26.02 and 26.04.01 (``0d8e0714cd``,
#: ``23dd639cf3``, ``4415119414``). Counted ATen op by ATen op; ``tests/torch/test_eager_elementwise.py``
#: counts them again on PyTorch.
MEGATRON_EAGER_BYTES = {2: {"clamp": (16, 30), "expert_bias": (12, 16)},
                        4: {"clamp": (32, 52), "expert_bias": (24, 32)}}


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
        self.device, self.e, self.recipe = device, _BYTES[parallel.dtype], parallel.fp8_recipe
        self.dtype = "bf16" if self.recipe else parallel.dtype  # what the ops outside the FP8 GEMMs run in
        self.frozen = frozen  # weights that train no gradient: their matmuls run no weight-gradient matmul
        self.fp8_gemms = 0
        self.ops: list[Op] = []

    def matmul(self, name: str, m: float, n: float, k: float, *, batch: float = 1, core: bool = False,
               tokens: float | None = None):
        """A (batched) matmul forward, its input- and weight-gradient matmuls backward (FP8: with their casts);
        ``tokens``: an expert GEMM's tokens per expert (all three run at that many rows or reduction steps)."""
        fp8 = self.recipe is not None and not core and name not in BF16_GEMMS
        if fp8:
            self.fp8_gemms += 1
            self.memory(f"{name}_cast", self.cast_bytes() * m * k * batch, self.cast_bytes() * m * n * batch)
        self._matmul(name, FORWARD, m, n, k, batch, core, fp8, tokens)
        self._matmul(name, BACKWARD, m, k, n, batch, core, fp8, tokens)
        if core or not self.frozen:  # the core's second backward matmul is an input gradient too
            self._matmul(name, BACKWARD, k, n, m, batch, core, fp8, tokens)

    def _matmul(self, name, phase, m, n, k, batch, core, fp8, tokens=None):
        flops = 2 * m * n * k
        nbytes = ((1 if fp8 else self.e) * (m * k + k * n) + self.e * m * n) * batch
        dtype = ("mxfp8" if self.recipe == "mxfp8" else "fp8") if fp8 else self.dtype
        time = self.device.matmul_ms(flops * batch, nbytes, dtype, size=flops, tokens=tokens)
        self.ops.append(Op(name, phase, flops * batch, nbytes, time, True, core))

    def cast_bytes(self) -> float:
        """Bytes an FP8 cast moves per element (module docstring): one BF16 read (``current``: two), the rowwise
        and the columnwise FP8 copy (one copy for a per-tensor recipe on a device that runs every FP8 layout),
        and (``mxfp8``) their scales."""
        reads = 2 if self.recipe == "current" else 1
        copies = 2 if self.recipe == "mxfp8" or self.device.mxfp8_tflops is None else 1
        return reads * self.e + copies + (2 / 32 if self.recipe == "mxfp8" else 0)

    def amax_history(self):
        """Delayed scaling's amax-history update of the layer's FP8 GEMMs (module docstring), forward and backward."""
        if self.recipe == "delayed" and self.fp8_gemms:
            entries = 2 * 4 * AMAX_HISTORY * self.fp8_gemms  # fp32 entries read and written, per tensor
            self.memory("amax_history", 3 * entries, 2 * entries)

    def memory(self, name: str, forward_bytes: float, backward_bytes: float, *, core=False, norm=False):
        """A memory-bound kernel forward and backward."""
        for phase, nbytes in ((FORWARD, forward_bytes), (BACKWARD, backward_bytes)):
            if nbytes:
                self.ops.append(Op(name, phase, 0.0, nbytes, self.device.memory_ms(nbytes), False, core, norm))

    def fused(self, name: str, forward_flops: float, backward_flops: float, nbytes: float, *, core=False,
              repeat: int = 1, kernel: str = "flash"):
        """A fused attention kernel on the matmul units, priced as ``kernel`` runs on the device
        (:meth:`~sappkit.hardware.DeviceConfig.attention_ms`); ``repeat`` such kernels in turn (one op)."""
        for phase, flops in ((FORWARD, forward_flops), (BACKWARD, backward_flops)):
            time = repeat * self.device.attention_ms(kernel, phase == BACKWARD, flops, nbytes, self.dtype)
            self.ops.append(Op(name, phase, repeat * flops, repeat * nbytes, time, True, core))


def layer_ops(model: TransformerConfig, moe: bool, parallel: ParallelConfig, device: DeviceConfig,
              kernels: KernelConfig) -> list[Op]:
    """The ops of one body layer (dense, or MoE when ``moe``) per micro-batch on one device (of a frozen stack: no
    weight-gradient matmuls)."""
    price = _Pricer(device, parallel, frozen=model.frozen)
    t, c, e = parallel.tensor_parallel, parallel.context_parallel, price.e
    t_sp = t if parallel.sequence_parallel else 1
    h, n = model.hidden_size, model.seq_length * parallel.micro_batch_size / c
    eager = None if kernels.fused_elementwise else EAGER_BYTES[e]
    norm = tuple(n * h / t_sp * b for b in (eager["norm"] if eager else (2 * e, 3 * e)))
    residual = ((3 * e + 1, 2 * e + 1) if model.hidden_dropout else (3 * e, 0))
    price.memory("norm1", *norm, norm=True)
    _attention(price, model, parallel, kernels, n)
    price.memory("dropout_add1", *(n * h / t_sp * r for r in residual))
    price.memory("norm2", *norm, norm=True)
    if moe:
        _moe(price, model, parallel, n, eager)
    else:
        _mlp(price, model, n, model.ffn_size / t, eager=eager)
    price.memory("dropout_add2", *(n * h / t_sp * r for r in residual))
    price.amax_history()
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
    if not kernels.fused_elementwise:
        rotated = n * (a / t + 1) * rope if kv_r else n * (a + model.num_kv_heads) * d / t
        price.memory("rope", *(rotated * b for b in EAGER_BYTES[e]["rope"]))
    heads, queries = a / t, model.seq_length / parallel.context_parallel
    keys, batch = model.seq_length, parallel.micro_batch_size * heads
    if kernels.fused_attention:
        _flash(price, parallel, kernels.attention, batch, queries, keys, d, dv, share=model.causal_pair_share)
    else:
        price.matmul("scores", queries, keys, d, batch=batch, core=True)
        scores = batch * queries * keys
        price.memory("softmax", 2 * e * scores, 3 * e * scores, core=True)
        if model.dropout:
            price.memory("attention_dropout", (2 * e + 1) * scores, (2 * e + 1) * scores, core=True)
        price.matmul("context", queries, dv, keys, batch=batch, core=True)
    price.matmul("out", n, h, a * dv / t)


def _flash(price: _Pricer, parallel: ParallelConfig, kernel: str, batch: float, queries: float, keys: float, d: int,
           dv: int, *, share: float = 1.0) -> None:
    """Flash attention of ``batch`` heads of ``queries`` local queries against ``keys`` keys (causal: half the
    pairs, times ``share``: a sliding window's, :attr:`TransformerConfig.causal_pair_share`), as the context-parallel kind runs it: ``ring`` as ``c`` steps, each a kernel of the local queries
    against a block of ``keys / c`` keys, with the ``c − 1`` softmax merges; ``a2a`` over ``1/c`` of the heads and
    the whole sequence; ``allgather`` (and no CP) as one kernel."""
    c, e = parallel.context_parallel, price.e
    steps = c if parallel.cp_kind == "ring" else 1
    if parallel.cp_kind == "a2a":
        batch, queries = batch / c, queries * c
    block = keys / steps
    forward = 2 * batch * queries * block * (d + dv) / 2 * share
    nbytes = e * batch * (queries * (2 * d + 2 * dv) + block * (d + dv))
    price.fused("attention", forward, 2.5 * forward, nbytes, core=True, repeat=steps, kernel=kernel)
    if steps > 1:
        rows = _MERGE_BYTES * batch * queries
        price.memory("softmax_merge", 3 * (steps - 1) * rows * (dv + 1), 3 * (steps - 1) * rows * d, core=True)


def _mlp(price: _Pricer, model: TransformerConfig, n: float, width: float, prefix: str = "", *,
         eager: dict | None = None) -> None:
    """A dense (or shared-expert) MLP of ``width`` columns per device (``eager``: :data:`EAGER_BYTES`' row)."""
    h = model.hidden_size
    price.matmul(f"{prefix}fc1", n, width * (2 if model.gated_mlp else 1), h)
    price.memory(f"{prefix}act", *_activation_bytes(price.e, model.gated_mlp, n * width, eager))
    price.matmul(f"{prefix}fc2", n, h, width)


def _activation_bytes(e: int, gated: bool, elements: float, eager: dict | None) -> tuple[float, float]:
    """The MLP activation's bytes forward and backward over ``elements`` outputs (of each of a gated MLP's halves)."""
    if gated:
        return tuple(elements * b for b in (eager["swiglu"] if eager else (3 * e, 5 * e)))
    return 2 * e * elements, 3 * e * elements


def _moe(price: _Pricer, model: TransformerConfig, parallel: ParallelConfig, n: float, eager: dict | None) -> None:
    t, e, h = parallel.tensor_parallel, price.e, model.hidden_size
    t_sp = t if parallel.sequence_parallel else 1
    experts, ep, etp = model.experts, parallel.expert_parallel, parallel.expert_tensor_parallel
    price.matmul("router", n / t_sp, experts, h)
    scores = n / t_sp * experts
    price.memory("router_topk", (e + 8) * scores, (e + 8) * scores)
    routed = n / t * model.top_k  # token copies this device sends to the experts
    price.memory("permute", 2 * e * routed * h, 2 * e * routed * h)
    local = experts / ep
    received = routed * etp * parallel.expert_imbalance  # what the busiest device's experts run
    if local > 1:
        price.memory("sort_tokens", 2 * e * received * h, 2 * e * received * h)
    width = model.expert_ffn_size / etp
    per_expert = received / local
    price.matmul("experts_fc1", per_expert, width * (2 if model.gated_mlp else 1), h, batch=local, tokens=per_expert)
    if model.expert_clamp:
        price.memory("experts_clamp", *(received * width * b for b in MEGATRON_EAGER_BYTES[e]["clamp"]))
    price.memory("experts_act", *_activation_bytes(e, model.gated_mlp, received * width, eager))
    price.matmul("experts_fc2", per_expert, h, width, batch=local, tokens=per_expert)
    if model.expert_bias:
        price.memory("experts_bias", *(received * h * b for b in MEGATRON_EAGER_BYTES[e]["expert_bias"]))
    if local > 1:
        price.memory("unsort_tokens", 2 * e * received * h, 2 * e * received * h)
    price.memory("unpermute", 2 * e * routed * h, 2 * e * routed * h)
    if model.shared_experts:
        _mlp(price, model, n, model.shared_experts * model.expert_ffn_size / t, prefix="shared_", eager=eager)


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


def tail_ops(model: TransformerConfig, parallel: ParallelConfig, device: DeviceConfig,
             kernels: KernelConfig | None = None) -> list[Op]:
    """The tail's ops: final norm, LM head and cross-entropy, per micro-batch on one device."""
    price = _Pricer(device, parallel)
    t = parallel.tensor_parallel
    t_sp = t if parallel.sequence_parallel else 1
    e, h, v = price.e, model.hidden_size, model.vocab_size
    n = model.seq_length * parallel.micro_batch_size / parallel.context_parallel
    fused = kernels is None or kernels.fused_elementwise
    price.memory("final_norm", *(n * h / t_sp * b for b in ((2 * e, 3 * e) if fused else EAGER_BYTES[e]["norm"])),
                 norm=True)
    price.matmul("lm_head", n, v / t, h)
    price.memory("cross_entropy", (e + 4) * n * v / t, (e + 4) * n * v / t)
    return price.ops
