"""MoE layers as trainers run them (Megatron-Core's all-to-all dispatcher), each cost checked by hand."""

import dataclasses

import pytest

from sappkit import DeviceConfig, InputError, KernelConfig, ParallelConfig, TransformerConfig
from sappkit.hardware import Cluster, collective_ms
from sappkit.layers.comm import expert_sizes, grad_sync_parts, layer_comm
from sappkit.layers.ops import BACKWARD, FORWARD, layer_ops

FLOPS_ONLY = DeviceConfig(tflops=100.0, mfu=0.5, hbm_gbs=1e15, link_gbs=1e15)


def _cluster():
    return Cluster(device=FLOPS_ONLY, devices_per_node=8, intra_node_gbs=100.0, inter_node_gbs=10.0, latency_us=0,
                   inter_latency_us=0)


@pytest.mark.parametrize("expert_parallel, stride", [(8, 8), (4, 4), (1, 1)])
def test_expert_gradients_reduce_over_ranks_etp_ep_apart(expert_parallel, stride):
    """64 ranks, EP innermost (``tp-cp-ep-dp-pp``): the expert data-parallel group of ``64 / ep`` ranks lies ``ep``
    apart, so EP 8 reduces across 8 nodes through the cards, EP 4 over pairs of nodes."""
    cluster = _cluster()
    parallel = ParallelConfig(data_parallel=64, expert_parallel=expert_parallel)
    ranks = 64 // expert_parallel
    reduce, gather = grad_sync_parts(0.0, 1e6, parallel, cluster)
    link = cluster.link(ranks, stride)
    assert reduce == pytest.approx(collective_ms("reduce_scatter", 4e6, ranks, link))
    assert gather == pytest.approx(collective_ms("all_gather", 2e6, ranks, link))
    if expert_parallel == 8:  # one member per node: one card, 10 GB/s, not the node's 100
        assert link.gbs == 10.0


MOE = TransformerConfig(layers=4, dense_layers=1, hidden_size=512, num_heads=8, ffn_size=2048, experts=8, top_k=2,
                        shared_experts=1, expert_ffn_size=512, seq_length=256, vocab_size=8000, gated_mlp=True)
ROUTED = 2 * 256 * 2 * 512  # bytes of the token copies one rank sends: e · n · top_k · h (t = 1, b = 1)


def _op(ops, name, phase=FORWARD):
    return next(op for op in ops if op.name == name and op.phase == phase)


def test_expert_tensor_parallel_gathers_after_the_dispatch_and_scatters_before_the_combine():
    """Megatron-Core's all-to-all dispatcher with etp 2 over 8 ranks (ep 4): the all-to-all of what a rank sends,
    then the gather of twice that over the etp pair, and the reduce-scatter back, each direction."""
    cluster = _cluster()
    parallel = ParallelConfig(data_parallel=8, expert_parallel=4, expert_tensor_parallel=2)
    a2a = cluster.all_to_all_ms(expert_sizes(parallel), "ep", ROUTED)
    pair = cluster.link(2, 1)
    etp = collective_ms("all_gather", 2 * ROUTED, 2, pair) + collective_ms("reduce_scatter", 2 * ROUTED, 2, pair)
    assert etp > 0
    expected = 2 * a2a + etp
    assert layer_comm(MOE, True, parallel, cluster, (0.0, 0.0)).ep == pytest.approx((expected, expected))
    one = ParallelConfig(data_parallel=8, expert_parallel=4)
    assert layer_comm(MOE, True, one, cluster, (0.0, 0.0)).ep == pytest.approx((2 * a2a,) * 2)


def test_expert_imbalance_scales_the_busiest_devices_expert_work_and_dispatch():
    cluster = _cluster()
    balanced, skewed = (ParallelConfig(data_parallel=4, expert_parallel=4, expert_imbalance=k) for k in (1.0, 1.5))
    ops = {k: layer_ops(MOE, True, p, FLOPS_ONLY, KernelConfig()) for k, p in ((1.0, balanced), (1.5, skewed))}
    for name in ("experts_act", "sort_tokens", "unsort_tokens"):
        assert _op(ops[1.5], name).nbytes == pytest.approx(1.5 * _op(ops[1.0], name).nbytes)
    for name in ("experts_fc1", "experts_fc2"):
        assert _op(ops[1.5], name).flops == pytest.approx(1.5 * _op(ops[1.0], name).flops)
    for name in ("router", "router_topk", "permute", "unpermute", "qkv"):  # the sending side stays balanced
        assert _op(ops[1.5], name).nbytes == _op(ops[1.0], name).nbytes
    a2a = cluster.all_to_all_ms(expert_sizes(balanced), "ep", 1.5 * ROUTED)
    assert layer_comm(MOE, True, skewed, cluster, (0.0, 0.0)).ep == pytest.approx((2 * a2a,) * 2)


def test_router_scores_and_the_sort_by_local_expert_are_memory_bound_ops():
    parallel = ParallelConfig(data_parallel=4, expert_parallel=4)
    ops = layer_ops(MOE, True, parallel, FLOPS_ONLY, KernelConfig())
    assert _op(ops, "router_topk").nbytes == (2 + 8) * 256 * 8  # (e + 8) bytes per token and expert
    assert _op(ops, "sort_tokens", BACKWARD).nbytes == 2 * 2 * (256 * 2) * 512  # 2e·h per received copy
    one_each = ParallelConfig(data_parallel=8, expert_parallel=8)  # one local expert: nothing to sort
    assert not {"sort_tokens", "unsort_tokens"} & {op.name for op in layer_ops(MOE, True, one_each, FLOPS_ONLY,
                                                                                KernelConfig())}


@pytest.mark.parametrize("a2a, shared", [(True, False), (False, True)])
def test_the_moe_overlaps_hide_the_dispatch_as_far_as_their_window_lasts(a2a, shared):
    """A dispatch of ``c`` ms per direction under a window of ``w``: ``max(0, c − w) + σ·min(c, w)``."""
    cluster = _cluster()
    plain = ParallelConfig(data_parallel=4, expert_parallel=4)
    c = layer_comm(MOE, True, plain, cluster, (0.0, 0.0)).ep[0]
    sigma = cluster.device.comm_sm_share
    overlapped = ParallelConfig(data_parallel=4, expert_parallel=4, moe_a2a_overlap=a2a,
                                moe_shared_expert_overlap=shared)
    forward, backward = layer_comm(MOE, True, overlapped, cluster, (0.0, 0.0), (c / 2, 3 * c), c / 4).ep
    if a2a:  # the forward's under the paired backward (3c, all hidden), the backward's under the forward (c/2)
        assert (forward, backward) == pytest.approx((sigma * c, c / 2 + sigma * c / 2))
    else:  # the forward's under the shared experts' forward (c/4); the backward's stays exposed
        assert (forward, backward) == pytest.approx((3 * c / 4 + sigma * c / 4, c))


@pytest.mark.parametrize("fields, message", [
    ({"expert_parallel": 2, "expert_imbalance": 3.0},
     "expert_imbalance must be at most expert_parallel = 2 (the busiest device receives at most every routed "
     "token); got 3.0"),
    ({"expert_imbalance": 0.5}, "expert_imbalance must be a finite number >= 1; got 0.5"),
    ({"moe_a2a_overlap": "yes"}, "moe_a2a_overlap must be a bool; got 'yes'"),
])
def test_bad_moe_settings_are_refused_by_name(fields, message):
    with pytest.raises(InputError) as error:
        ParallelConfig(data_parallel=4, **fields)
    assert str(error.value) == message


def test_expert_gemms_lose_efficiency_with_few_tokens_per_expert():
    """``η · M / (M + M½)``: each of 4 ranks sends 256 tokens · top 2 and receives as many, for its 2 experts: 256
    tokens each, at half the efficiency when ``M½ = 256``."""
    plain = DeviceConfig(tflops=100.0, mfu=0.5, hbm_gbs=1e15)
    halved = DeviceConfig(tflops=100.0, mfu=0.5, hbm_gbs=1e15, expert_half_tokens=256.0)
    assert halved.matmul_ms(1e9, 0.0, tokens=256) == pytest.approx(2 * plain.matmul_ms(1e9, 0.0))
    assert halved.matmul_ms(1e9, 0.0) == plain.matmul_ms(1e9, 0.0)  # a dense GEMM is not an expert's
    parallel = ParallelConfig(data_parallel=4, expert_parallel=4)
    ops = {device: layer_ops(MOE, True, parallel, device, KernelConfig()) for device in (plain, halved)}
    for name in ("experts_fc1", "experts_fc2"):
        for phase in (FORWARD, BACKWARD):
            times = [sum(op.time_ms for op in ops[d] if op.name == name and op.phase == phase) for d in (plain, halved)]
            assert times[1] == pytest.approx(2 * times[0])
    assert _op(ops[halved], "qkv").time_ms == _op(ops[plain], "qkv").time_ms


def test_an_fp8_expert_gemm_loses_the_same_fixed_time_as_a_16_bit_one():
    """The expert loss is a fixed time per GEMM, ``M½ / rate``: FP8 at 2000 · 0.45 against 1000 · 0.6 TFLOP/s
    computes 1.5 times the tokens in it, so its half-point is 1.5 · 256 tokens, and at 384 tokens an FP8 expert
    GEMM takes twice its dense time."""
    common = dict(tflops=1000.0, fp8_tflops=2000.0, mfu=0.6, fp8_mfu=0.45, hbm_gbs=1e15, kernel_us=0.0)
    plain, halved = DeviceConfig(**common), DeviceConfig(**common, expert_half_tokens=256.0)
    assert halved.expert_tokens_half("fp8") == pytest.approx(384.0)
    assert halved.matmul_ms(1e9, 0.0, "fp8", tokens=384) == pytest.approx(2 * plain.matmul_ms(1e9, 0.0, "fp8"))
    lost = [halved.matmul_ms(1e9, 0.0, dtype, tokens=64) - plain.matmul_ms(1e9, 0.0, dtype) for dtype in
            ("bf16", "fp8")]
    assert lost[1] == pytest.approx(lost[0])  # the same time lost per GEMM, whichever its dtype


def test_gpt_oss_clamps_and_expert_biases_are_eager_memory_bound_ops():
    """GPT-OSS's clamped gated activation and its experts' second bias (``MEGATRON_EAGER_BYTES``): each rank of 4
    sends 256 tokens · top 2 copies (e = 2) and the busiest receives 1.5 times as many (``expert_imbalance``),
    512 wide: the clamps move 16 and 30 bytes per element of each half, the bias 12 and 16 per element of the
    512-wide output, at the device's memory roofline; nothing else changes (the dense layer and the shared
    expert run no such ops)."""
    device = DeviceConfig(tflops=100.0, mfu=0.5, hbm_gbs=1000.0, hbm_efficiency=0.5, kernel_us=0.0)
    gpt_oss = dataclasses.replace(MOE, expert_clamp=True, expert_bias=True)
    parallel = ParallelConfig(data_parallel=4, expert_parallel=4, expert_imbalance=1.5)
    plain, priced = (layer_ops(model, True, parallel, device, KernelConfig()) for model in (MOE, gpt_oss))
    received = 1.5 * 256 * 2 * 512  # copies · width, per half (the expert width is 512, so is h)
    for name, (forward, backward) in (("experts_clamp", (16, 30)), ("experts_bias", (12, 16))):
        for phase, per_element in ((FORWARD, forward), (BACKWARD, backward)):
            op = _op(priced, name, phase)
            assert op.nbytes == per_element * received
            assert op.time_ms == pytest.approx(per_element * received / (1000e9 * 0.5) * 1e3)
    assert [op for op in priced if op.name not in ("experts_clamp", "experts_bias")] == plain
    assert layer_ops(gpt_oss, False, parallel, device, KernelConfig()) == layer_ops(MOE, False, parallel, device,
                                                                                    KernelConfig())


@pytest.mark.parametrize("fields, message", [
    ({"gated_mlp": False, "expert_clamp": True},
     "expert_clamp clamps the two halves of a gated MLP; set gated_mlp=True to use it"),
    ({"experts": 0, "top_k": 0, "shared_experts": 0, "dense_layers": 0, "expert_ffn_size": None,
      "expert_bias": True},
     "expert_bias and expert_clamp are MoE settings (the routed experts' biases and clamp); set experts > 0 to use "
     "them (got expert_bias=True, expert_clamp=False)"),
    ({"expert_bias": "yes"}, "expert_bias must be a bool; got 'yes'"),
])
def test_bad_gpt_oss_settings_are_refused_by_name(fields, message):
    with pytest.raises(InputError) as error:
        dataclasses.replace(MOE, **fields)
    assert str(error.value) == message
