"""``EAGER_BYTES`` and ``MEGATRON_EAGER_BYTES`` counted again on PyTorch: the bytes each ATen op of an eager
RMSNorm, SwiGLU and rotary embedding, and of Megatron-Core's clamp before its fused GPT-OSS activation and its
experts' second bias, reads and writes, per element, forward and backward.

The ops are torchtitan's (``torchtitan/models/norms.py``'s ``RMSNorm``, the Llama feed-forward's
``silu(w1(x)) * w3(x)`` and ``apply_rotary_emb``'s complex product), run under a dispatch mode that adds up
every op's input and output tensors; views move nothing. The per-token parts (a norm's mean, the rotary
frequencies) are below half a byte per element at these sizes.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from sappkit.layers.ops import EAGER_BYTES, MEGATRON_EAGER_BYTES

TOKENS, HIDDEN, HEADS, HEAD_DIM = 64, 512, 64, 32
#: ATen ops that return a view of their input (no kernel, no bytes).
VIEWS = {"view", "_unsafe_view", "expand", "unsqueeze", "reshape", "t", "detach", "as_strided", "alias",
         "transpose", "slice", "view_as_complex", "view_as_real", "_reshape_alias", "split", "split_with_sizes",
         "narrow"}


class _Bytes(TorchDispatchMode):
    """Adds up the bytes of every non-view op's tensor inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ not in VIEWS:
            tensors = [a for a in tree_flatten((args, kwargs, out))[0] if isinstance(a, torch.Tensor)]
            self.total += sum(t.numel() * t.element_size() for t in tensors)
        return out


def rms_norm(x, weight, eps=1e-6):
    y = x.float()
    return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def swiglu(gate, up):
    return torch.nn.functional.silu(gate) * up


def rope(q, freqs):
    rotated = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2)) * freqs
    return torch.view_as_real(rotated).flatten(3).type_as(q)


def clamp_halves(y, limit=7.0):
    """``weighted_bias_quick_geglu_impl``'s first step (``megatron/core/fusions/fused_bias_geglu.py``): the gate
    half clamped from above, the linear half both ways, the two joined again for the fused kernel."""
    gate, linear = y.chunk(2, -1)
    return torch.cat((gate.clamp(max=limit), linear.clamp(min=-limit, max=limit)), -1)


def expert_bias(output, biases, probs, tokens_per_expert):
    """``TEGroupedMLP._apply_bias`` (``megatron/core/transformer/moe/experts.py``): each expert's rows plus its
    bias scaled by each row's routing probability, the experts' rows joined again."""
    parts = zip(torch.split(output, tokens_per_expert), biases, torch.split(probs, tokens_per_expert))
    return torch.cat([rows + bias * p for rows, bias, p in parts]).to(output.dtype)


def _per_element(function, inputs, elements: int) -> tuple[float, float]:
    leaves = [t.detach().clone().requires_grad_(not t.is_complex()) for t in inputs]
    with _Bytes() as forward:
        output = function(*leaves)
    gradient = torch.ones_like(output)
    with _Bytes() as backward:
        output.backward(gradient)
    return forward.total / elements, backward.total / elements


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_the_eager_ops_move_the_bytes_the_pricing_charges(dtype):
    expected = EAGER_BYTES[dtype.itemsize]
    x = torch.randn(TOKENS, HIDDEN, dtype=dtype)
    freqs = torch.polar(torch.ones(1, TOKENS, 1, HEAD_DIM // 2), torch.randn(1, TOKENS, 1, HEAD_DIM // 2))
    measured = {
        "norm": _per_element(rms_norm, [x, torch.ones(HIDDEN, dtype=dtype)], TOKENS * HIDDEN),
        "swiglu": _per_element(swiglu, [x, torch.randn_like(x)], TOKENS * HIDDEN),
        "rope": _per_element(rope, [torch.randn(1, TOKENS, HEADS, HEAD_DIM, dtype=dtype), freqs],
                             TOKENS * HEADS * HEAD_DIM),
    }
    for op, counted in measured.items():
        assert counted == pytest.approx(expected[op], abs=0.5), op


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_megatrons_eager_moe_ops_move_the_bytes_the_pricing_charges(dtype):
    """Per element of each half (the clamp) and of the experts' output (the bias: 4 experts of 256 rows, 1,024
    wide, so the per-expert bias gradients' sums are below half a byte per element)."""
    expected = MEGATRON_EAGER_BYTES[dtype.itemsize]
    rows, width, experts = 1024, 1024, 4
    biases = [torch.randn(width, dtype=dtype, requires_grad=True) for _ in range(experts)]
    measured = {
        "clamp": _per_element(clamp_halves, [8 * torch.randn(TOKENS, 2 * HIDDEN, dtype=dtype)], TOKENS * HIDDEN),
        "expert_bias": _per_element(lambda out, probs: expert_bias(out, biases, probs, [rows // experts] * experts),
                                    [torch.randn(rows, width, dtype=dtype), torch.rand(rows, 1, dtype=dtype)],
                                    rows * width),
    }
    for op, counted in measured.items():
        assert counted == pytest.approx(expected[op], abs=0.5), op
