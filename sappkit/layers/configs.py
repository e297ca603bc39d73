"""Settings of an analytic layer estimate: a transformer stack's shape, how it is trained in parallel
(micro-batch, parallel degrees, ZeRO stage, precision) and which kernels its layers run. What one device computes
and moves per second (:class:`DeviceConfig`) lives in :mod:`sappkit.hardware` and is re-exported here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .._check import check_bool, check_choice, check_int, check_number
from ..errors import InputError
from ..hardware import DeviceConfig
from ..limits import MAX_LAYERS, MAX_SEQ_LENGTH, MAX_WIDTH

__all__ = ["TransformerConfig", "ParallelConfig", "DeviceConfig", "KernelConfig", "FP8_RECIPES", "CP_KINDS",
           "ATTENTION_KERNELS", "FUSED_ATTENTION"]

#: Bytes per element of each dtype: ParallelConfig's choices, the estimate's ``e``. FP8 training keeps its
#: weights, activations and communication in BF16 and casts each linear layer's GEMM inputs to FP8 (Transformer
#: Engine's recipes, :data:`FP8_RECIPES`; the FP8 copies are priced apart, :mod:`sappkit.layers.ops`).
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 2}
#: Transformer Engine's FP8 scaling recipes: ``delayed`` (``DelayedScaling``: one scale per tensor from an amax
#: history), ``current`` (``Float8CurrentScaling``: one scale per tensor from its own amax) and ``mxfp8``
#: (``MXFP8BlockScaling``: one E8M0 scale per 32 elements, Blackwell's block-scaled tensor cores).
FP8_RECIPES = ("delayed", "current", "mxfp8")
#: How context parallelism runs attention: ``ring`` (Megatron/Transformer Engine's ``p2p``: the keys and values
#: passed around a ring, load-balanced causal chunks), ``allgather`` (Llama 3's, torch's ``rotate_method=
#: "allgather"``: the keys and values all-gathered, then the local queries' attention), ``a2a`` (DeepSpeed
#: Ulysses: all-to-alls from a sequence split to a head split and back).
CP_KINDS = ("ring", "allgather", "a2a")
#: The attention kernels :class:`KernelConfig` knows; the last four are fused (no memory per (query, key) pair).
ATTENTION_KERNELS = ("paper", "eager", "math", "flash", "fa2", "fa3", "cudnn")
FUSED_ATTENTION = ATTENTION_KERNELS[3:]


@dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """One stack of transformer layers: a language model or a vision tower."""

    layers: int
    """Layers in the stack (MoE stacks: dense and MoE together)."""
    hidden_size: int
    """Model width ``h``."""
    num_heads: int
    """Attention (query) heads ``a``."""
    ffn_size: int
    """FFN width ``f`` of a dense layer."""
    seq_length: int
    """Tokens per sample ``s`` (patches for a vision tower)."""
    num_kv_heads: int | None = None
    """Key/value heads (GQA); default ``num_heads``."""
    head_dim: int | None = None
    """Query/key head size (with MLA's rope part); default ``hidden_size // num_heads``."""
    v_head_dim: int | None = None
    """Value head size; default ``head_dim``."""
    vocab_size: int = 0
    """Vocabulary; required on the last stack (its LM head is the tail), 0 on the others."""
    patch_size: int = 0
    """Patch side for a vision tower's patch embedding (first stack only); 0 for none."""
    gated_mlp: bool = False
    """SwiGLU-style MLP with three matrices (Llama, DeepSeek); False: two (GPT's GeLU)."""
    dropout: bool = True
    """Attention dropout (its mask and output kept, as the paper does); also the default of ``hidden_dropout``."""
    hidden_dropout: bool | None = None
    """Dropout after the attention and the MLP (two masks per layer) and after the embedding; default ``dropout``."""
    q_lora_rank: int = 0
    """MLA query latent rank; 0 for a plain query projection."""
    kv_lora_rank: int = 0
    """MLA key/value latent rank; > 0 makes the attention MLA (DeepSeek)."""
    rope_head_dim: int = 0
    """MLA's decoupled rotary key size (part of ``head_dim``, shared by all heads)."""
    experts: int = 0
    """Routed experts of a MoE layer; 0 for a dense stack."""
    top_k: int = 0
    """Experts each token is routed to (MoE only)."""
    shared_experts: int = 0
    """Shared experts every token runs (MoE only)."""
    expert_ffn_size: int | None = None
    """FFN width of one expert; default ``ffn_size``."""
    dense_layers: int = 0
    """Leading dense layers of a MoE stack (DeepSeek-V3: 3)."""
    name: str = "layer"
    """Kind name of the dense layers."""
    moe_name: str | None = None
    """Kind name of the MoE layers; default ``name + "_moe"``."""
    module: str = "model"
    """Submodule the stack's layers belong to (e.g. ``vision``, ``language``)."""
    mtp_layers: int = 0
    """Multi-token-prediction layers after the last decoder layer (DeepSeek-V3's ``num_nextn_predict_layers``,
    Megatron-LM's ``--mtp-num-layers``; last stack only), priced with the tail on the last stage
    (:mod:`sappkit.layers.mtp`)."""
    frozen: bool = False
    """The stack trains no weights (a frozen vision tower): no gradients, no optimizer state, no weight-gradient
    matmuls; a frozen stack with no trained stack before it runs no backward and keeps no activations."""
    attention_window: int = 0
    """Keys a query of a windowed layer attends to, itself included (sliding-window attention: Megatron-Core's
    ``window_size[0] + 1``; GPT-OSS: 128); 0: every layer attends to all earlier keys."""
    windowed_layers: int | None = None
    """How many of the stack's layers attend within ``attention_window`` (GPT-OSS: every other one, Megatron-Core's
    ``window_attn_skip_freq = 2``); default all of them where a window is set, else 0. The stack stays one layer
    kind: each layer's fused attention is priced at the stack's mean (:attr:`causal_pair_share`)."""

    expert_clamp: bool = False
    """The routed experts' gated activation clamps its two halves first (GPT-OSS: Megatron-Core's
    ``activation_func_clamp_value``, 7): both halves clamped and concatenated again by PyTorch's eager ops before
    the fused activation (:data:`~sappkit.layers.ops.MEGATRON_EAGER_BYTES`); MoE only, with ``gated_mlp``."""
    expert_bias: bool = False
    """The routed experts' linear layers have biases (GPT-OSS: ``add_bias_linear``): Megatron-Core's grouped MLP
    adds the second one per expert, scaled by the routing probability, by eager ops
    (:data:`~sappkit.layers.ops.MEGATRON_EAGER_BYTES`; the first runs in the GEMM); MoE only."""

    def __post_init__(self):
        check_int("layers", self.layers, minimum=1, maximum=MAX_LAYERS)
        if check_bool("expert_clamp", self.expert_clamp) and not self.gated_mlp:
            raise InputError("expert_clamp clamps the two halves of a gated MLP; set gated_mlp=True to use it")
        check_bool("expert_bias", self.expert_bias)
        for field in ("hidden_size", "num_heads", "ffn_size"):
            check_int(field, getattr(self, field), minimum=1, maximum=MAX_WIDTH)
        check_int("seq_length", self.seq_length, minimum=1, maximum=MAX_SEQ_LENGTH)
        for field in ("vocab_size", "patch_size", "q_lora_rank", "kv_lora_rank", "rope_head_dim", "experts",
                      "top_k", "shared_experts", "dense_layers"):
            check_int(field, getattr(self, field), minimum=0, maximum=MAX_WIDTH)
        check_int("mtp_layers", self.mtp_layers, minimum=0, maximum=MAX_LAYERS)
        check_bool("frozen", self.frozen)
        window = check_int("attention_window", self.attention_window, minimum=0, maximum=MAX_SEQ_LENGTH)
        if self.windowed_layers is not None:
            windowed = check_int("windowed_layers", self.windowed_layers, minimum=0, maximum=MAX_LAYERS)
            if windowed > self.layers:
                raise InputError(f"windowed_layers must be <= layers={self.layers}; got {windowed}")
            if windowed and not window:
                raise InputError(f"windowed_layers={windowed} needs attention_window > 0 (the keys those layers "
                                 "see)")
        mla = self.kv_lora_rank > 0
        kv_heads = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
        check_int("num_kv_heads", kv_heads, minimum=1, maximum=MAX_WIDTH)
        if self.num_heads % kv_heads or (mla and kv_heads != self.num_heads):
            raise InputError(f"num_kv_heads must divide num_heads={self.num_heads} (and equal it under MLA); "
                             f"got {self.num_kv_heads!r}")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise InputError(f"hidden_size={self.hidden_size} is not a multiple of num_heads={self.num_heads}; "
                             "give head_dim explicitly")
        head_dim = check_int("head_dim", self.hidden_size // self.num_heads if self.head_dim is None
                             else self.head_dim, minimum=1, maximum=MAX_WIDTH)
        if (self.rope_head_dim or self.q_lora_rank) and not mla:
            raise InputError("rope_head_dim and q_lora_rank are MLA settings; set kv_lora_rank > 0 to use MLA, "
                             f"got kv_lora_rank=0 with rope_head_dim={self.rope_head_dim!r}, "
                             f"q_lora_rank={self.q_lora_rank!r}")
        if self.rope_head_dim >= head_dim and mla:
            raise InputError(f"rope_head_dim must be < head_dim={head_dim} (it is part of it); "
                             f"got {self.rope_head_dim!r}")
        if self.experts:
            check_int("top_k", self.top_k, minimum=1, why="a MoE layer routes each token to top_k experts")
            if self.top_k > self.experts:
                raise InputError(f"top_k must be <= experts={self.experts}; got {self.top_k!r}")
            if self.dense_layers >= self.layers:
                raise InputError(f"dense_layers must be < layers={self.layers} (a MoE stack needs a MoE layer); "
                                 f"got {self.dense_layers!r}")
        elif self.expert_bias or self.expert_clamp:
            raise InputError("expert_bias and expert_clamp are MoE settings (the routed experts' biases and clamp); "
                             f"set experts > 0 to use them (got expert_bias={self.expert_bias!r}, expert_clamp="
                             f"{self.expert_clamp!r})")
        elif (self.top_k or self.shared_experts or self.dense_layers
              or self.expert_ffn_size not in (None, self.ffn_size)):  # ffn_size: a resolved config, replaced
            raise InputError("top_k, shared_experts, dense_layers and expert_ffn_size are MoE settings; set "
                             f"experts > 0 to use them (got top_k={self.top_k!r}, shared_experts="
                             f"{self.shared_experts!r}, dense_layers={self.dense_layers!r}, "
                             f"expert_ffn_size={self.expert_ffn_size!r})")
        if self.hidden_dropout is not None and not isinstance(self.hidden_dropout, bool):
            raise InputError(f"hidden_dropout must be a bool or None; got {self.hidden_dropout!r}")
        for field in ("name", "module", "moe_name"):
            value = getattr(self, field)
            if not (isinstance(value, str) and value) and not (field == "moe_name" and value is None):
                raise InputError(f"{field} must be a non-empty string; got {value!r}")
        resolved = dict(num_kv_heads=kv_heads, head_dim=head_dim,
                        v_head_dim=check_int("v_head_dim", head_dim if self.v_head_dim is None
                                             else self.v_head_dim, minimum=1, maximum=MAX_WIDTH),
                        expert_ffn_size=check_int("expert_ffn_size", self.ffn_size if self.expert_ffn_size is None
                                                  else self.expert_ffn_size, minimum=1, maximum=MAX_WIDTH),
                        moe_name=f"{self.name}_moe" if self.moe_name is None else self.moe_name,
                        hidden_dropout=self.dropout if self.hidden_dropout is None else self.hidden_dropout)
        for field, value in resolved.items():
            object.__setattr__(self, field, value)

    @property
    def causal_pair_share(self) -> float:
        """The share of the causal (query, key) pairs (``s²/2``) a layer's fused attention computes, averaged over
        the stack: a windowed layer computes ``s·w − w(w − 1)/2`` pairs (``w`` = ``attention_window``, at most
        ``s``), a full one all of them.

        Examples
        --------
        >>> gpt_oss = TransformerConfig(layers=36, hidden_size=2880, num_heads=64, ffn_size=2880, seq_length=4096,
        ...                             attention_window=128, windowed_layers=18)
        >>> round(gpt_oss.causal_pair_share, 4)  # half the layers at 128 keys of 4,096
        0.5308
        """
        s, w = self.seq_length, min(self.attention_window, self.seq_length)
        if not w:
            return 1.0
        layers = self.layers if self.windowed_layers is None else self.windowed_layers
        return (layers * min(1.0, (s * w - w * (w - 1) / 2) / (s * s / 2)) + self.layers - layers) / self.layers


@dataclass(frozen=True, kw_only=True)
class ParallelConfig:
    """How the model is trained: micro-batch, parallel degrees, optimizer sharding, precision."""

    micro_batch_size: int = 1
    """Samples per micro-batch ``b``."""
    tensor_parallel: int = 1
    """Tensor-parallel degree ``t``."""
    sequence_parallel: bool = True
    """Megatron sequence parallelism: split the ``R`` activations over ``t`` too."""
    context_parallel: int = 1
    """Context-parallel degree ``c`` (the sequence split over ``c`` ranks)."""
    data_parallel: int = 1
    """Data-parallel degree ``dp`` (ZeRO shards over ``dp·c``)."""
    expert_parallel: int = 1
    """Expert-parallel degree ``ep``; must divide ``t·c·dp`` together with ``expert_tensor_parallel``."""
    expert_tensor_parallel: int = 1
    """Tensor-parallel degree inside an expert ``etp``."""
    zero: Literal[0, 1, 2, 3] = 1
    """ZeRO stage: 0 replicates all, 1 shards optimizer state, 2 also gradients, 3 (FSDP) also weights."""
    dtype: Literal["bf16", "fp16", "fp32", "fp8"] = "bf16"
    """Weight and activation precision (gradients and optimizer state are fp32); ``fp8``: BF16 weights and
    activations with the linear layers' GEMMs in FP8 (``fp8_recipe``)."""
    reshard_after_forward: bool = True
    """ZeRO 3: free a layer's gathered weights after its forward and gather them again for its backward
    (FSDP2's default); False keeps them from the forward to the backward. Ignored below ZeRO 3."""
    expert_imbalance: float = 1.0
    """MoE: the busiest device's routed tokens over the mean, ``>= 1`` (1: balanced, as force-balanced routing and
    padding to capacity run); scales the expert GEMMs, what runs on the received tokens and the dispatch."""
    moe_a2a_overlap: bool = False
    """MoE: each micro-batch's dispatch and combine run under another micro-batch's compute (Megatron-Core's
    ``overlap_moe_expert_parallel_comm``, Megatron-Bridge's ``moe_a2a_overlap``)."""
    moe_shared_expert_overlap: bool = False
    """MoE: the shared experts' forward runs on its own stream under the forward's dispatch and combine
    (Megatron-Core's ``moe_shared_expert_overlap``)."""
    fp8_recipe: Literal["delayed", "current", "mxfp8"] | None = None
    """``dtype="fp8"`` only: the FP8 scaling recipe (:data:`FP8_RECIPES`); None there means ``delayed``
    (Transformer Engine's ``DelayedScaling``, Megatron-LM's default ``--fp8-recipe``)."""
    tp_comm_overlap: bool = False
    """Hide each sequence-parallel all-gather and reduce-scatter under the matmul it feeds or follows
    (Megatron's ``--tp-comm-overlap``, torchtitan's async TP; :mod:`sappkit.layers.comm`)."""
    cp_kind: Literal["ring", "allgather", "a2a"] = "ring"
    """How context parallelism runs attention (:data:`CP_KINDS`, :mod:`sappkit.layers.comm`)."""

    def __post_init__(self):
        check_bool("reshard_after_forward", self.reshard_after_forward)
        check_bool("tp_comm_overlap", self.tp_comm_overlap)
        check_choice("cp_kind", self.cp_kind, CP_KINDS)
        for field in ("micro_batch_size", "tensor_parallel", "context_parallel", "data_parallel",
                      "expert_parallel", "expert_tensor_parallel"):
            check_int(field, getattr(self, field), minimum=1)
        check_choice("zero", check_int("zero", self.zero, minimum=0), (0, 1, 2, 3))
        check_choice("dtype", self.dtype, tuple(_BYTES))
        object.__setattr__(self, "fp8_recipe", fp8_recipe_of(self.dtype, self.fp8_recipe))
        check_bool("sequence_parallel", self.sequence_parallel)
        ranks = self.tensor_parallel * self.context_parallel * self.data_parallel
        if ranks % (self.expert_parallel * self.expert_tensor_parallel):
            raise InputError(f"expert_parallel * expert_tensor_parallel = {self.expert_parallel} * "
                             f"{self.expert_tensor_parallel} must divide tensor_parallel * context_parallel * "
                             f"data_parallel = {ranks}")
        check_bool("moe_a2a_overlap", self.moe_a2a_overlap)
        check_bool("moe_shared_expert_overlap", self.moe_shared_expert_overlap)
        if check_number("expert_imbalance", self.expert_imbalance, minimum=1) > self.expert_parallel:
            raise InputError(f"expert_imbalance must be at most expert_parallel = {self.expert_parallel} (the busiest "
                             f"device receives at most every routed token); got {self.expert_imbalance!r}")


@dataclass(frozen=True, kw_only=True)
class KernelConfig:
    """Which kernels a layer runs, where they keep other bytes for the backward than the paper counts.

    The default is the paper's accounting. The other choices are what
    :func:`sappkit.torch.measure_layers` finds PyTorch and transformers keeping
    (``tests/torch/test_analytic.py`` checks each against a measurement).
    """

    attention: Literal["paper", "eager", "math", "flash", "fa2", "fa3", "cudnn"] = "paper"
    """``paper``: softmax output (and dropout mask and output) in the activation dtype, K and V at their own
    heads. ``eager`` (transformers' eager attention): K and V repeated to every query head, an fp32 softmax,
    and its cast to the activation dtype (or, with dropout, the dropout's mask and output). ``math`` (SDPA's
    math backend, which computes in fp32): Q, K and V as fp32 copies with K and V repeated, softmax (and
    dropout) in fp32. ``flash`` (flash, memory-efficient and cuDNN kernels; PyTorch's CPU flash kernel): no
    memory per (query, key) pair, an fp32 log-sum-exp per head and token; the output is the projection's input;
    its time at the matmul efficiency of its size. ``fa2`` (FlashAttention-2, PyTorch SDPA's flash backend),
    ``fa3`` (FlashAttention-3) and ``cudnn`` (cuDNN's fused attention, Transformer Engine's ``FusedAttention``):
    ``flash``'s memory, each at the device's sourced fraction of the peak forward and backward
    (:meth:`~sappkit.hardware.DeviceConfig.attention_efficiency`; a device without one prices it as ``flash``)."""
    norm: Literal["paper", "hf"] = "paper"
    """``paper``: a norm keeps its input. ``hf`` (transformers' eager RMSNorm): an fp32 copy of its input (the
    input itself in fp32), the normalised input in the activation dtype (for the weight's gradient) and an
    fp32 reciprocal RMS per token."""
    fused_mlp: bool = True
    """A gated MLP's activation and product run as one kernel keeping the gate and up outputs (Megatron's
    fused SwiGLU: ``3ef`` per token with the down projection's input); False: separate ops, which also keep
    the activation's output (``4ef``)."""
    fused_elementwise: bool = True
    """The norms, a gated MLP's activation and the rotary embedding each run as one kernel (Transformer
    Engine's and Megatron-LM's fused kernels, or ``torch.compile``'s); False: as PyTorch's eager ops, one kernel
    per ATen op, each reading and writing its tensors (torchtitan without ``torch.compile``): the bytes
    :data:`sappkit.layers.ops.EAGER_BYTES` gives instead of the fused kernels' (time only; the memory kept is
    ``norm`` and ``fused_mlp``'s)."""
    moe: Literal["paper", "hf"] = "paper"
    """``paper``: a MoE layer keeps what the module docstring of :mod:`sappkit.layers.estimate` says. ``hf``
    (transformers' loop over experts) also keeps per routed token the weighted expert output (``index_add_``'s
    source), its fp32 routing weight and two int64 indices, and per token the router's top-k indices (int64),
    values (fp32) and their fp32 sum."""
    dropout_mask: Literal["bool", "dtype"] = "bool"
    """``bool``: dropout keeps a 1-byte mask (CUDA's fused dropout, the paper); ``dtype``: it keeps its scaled
    noise in the dtype it runs in (PyTorch's CPU dropout)."""

    @property
    def fused_attention(self) -> bool:
        """Whether the attention is one fused kernel (``flash`` and the named kernels: :data:`FUSED_ATTENTION`)."""
        return self.attention in FUSED_ATTENTION

    def __post_init__(self):
        check_choice("attention", self.attention, ATTENTION_KERNELS)
        check_choice("norm", self.norm, ("paper", "hf"))
        check_choice("moe", self.moe, ("paper", "hf"))
        check_choice("dropout_mask", self.dropout_mask, ("bool", "dtype"))
        for name in ("fused_mlp", "fused_elementwise"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be a bool; got {getattr(self, name)!r}")


def fp8_recipe_of(dtype: str, recipe) -> str | None:
    """The FP8 recipe a ``dtype`` runs: ``recipe`` (default ``delayed``) for ``fp8``, None for the others (which
    refuse a recipe)."""
    if dtype != "fp8":
        if recipe is not None:
            raise InputError(f"fp8_recipe is an FP8 setting; set dtype='fp8' to use it (got dtype={dtype!r}, "
                             f"fp8_recipe={recipe!r})")
        return None
    return "delayed" if recipe is None else check_choice("fp8_recipe", recipe, FP8_RECIPES)
