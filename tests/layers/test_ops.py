"""A layer's ops and communication: the roofline against the paper's FLOP count, the collectives by hand."""

import pytest

from sappkit import DeviceConfig, KernelConfig, ParallelConfig, TransformerConfig, estimate_layers
from sappkit.columns import SAPP_OPTIONS
from sappkit.hardware import Cluster, GroupSizes, collective_ms
from sappkit.layers.comm import boundary_ms, grad_sync_parts, layer_comm, zero3_comm_ms
from sappkit.layers.ops import BACKWARD, EAGER_BYTES, FORWARD, layer_ops, tail_ops

GPT = TransformerConfig(layers=4, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=512, vocab_size=8000)
LLAMA = TransformerConfig(layers=4, hidden_size=1024, num_heads=16, num_kv_heads=4, ffn_size=2816, seq_length=512,
                          vocab_size=8000, gated_mlp=True, dropout=False)
MOE = TransformerConfig(layers=4, dense_layers=1, hidden_size=512, num_heads=8, ffn_size=2048, experts=8, top_k=2,
                        shared_experts=1, expert_ffn_size=512, seq_length=256, vocab_size=8000, gated_mlp=True)
# Memory, links and kernels cost nothing: only the matmuls' FLOPs at a flat efficiency remain, as in the paper.
FLOPS_ONLY = DeviceConfig(tflops=100.0, mfu=0.5, hbm_gbs=1e15, link_gbs=1e15)
FREE_LINKS = Cluster(device=FLOPS_ONLY, intra_node_gbs=1e15, inter_node_gbs=1e15, latency_us=0, inter_latency_us=0)


@pytest.mark.parametrize("model", [GPT, LLAMA, MOE], ids=["gpt", "llama", "moe"])
@pytest.mark.parametrize("tensor_parallel", [1, 2])
def test_the_roofline_of_free_memory_is_the_papers_flop_count(model, tensor_parallel):
    parallel = ParallelConfig(tensor_parallel=tensor_parallel, micro_batch_size=2, data_parallel=2,
                              expert_parallel=2 if model.experts else 1)
    roofline = estimate_layers(model, parallel=parallel, cluster=FREE_LINKS).frame
    paper = estimate_layers(model, parallel=parallel, device=FLOPS_ONLY, time_model="flops").frame
    body = roofline["role"] == "body"
    for column in ("forward_time", "backward_time"):
        assert roofline.loc[body, column].to_numpy() == pytest.approx(paper.loc[body, column].to_numpy(), rel=1e-6)
    # The tail is the LM head's matmul, the head no matmul at all.
    assert roofline.iloc[-1].forward_time == pytest.approx(paper.iloc[-1].forward_time, rel=1e-6)
    assert roofline.iloc[0].forward_time == pytest.approx(0.0, abs=1e-6)


def test_backward_matmuls_are_twice_the_forward_and_selective_reruns_the_core():
    ops = layer_ops(GPT, False, ParallelConfig(micro_batch_size=2), FLOPS_ONLY, KernelConfig())
    forward = sum(op.flops for op in ops if op.phase == FORWARD and op.matmul)
    backward = sum(op.flops for op in ops if op.phase == BACKWARD and op.matmul)
    assert backward == 2 * forward
    core = sum(op.flops for op in ops if op.phase == FORWARD and op.core)
    s, b, h = 512, 2, 1024
    assert core == 2 * 2 * b * s * s * h  # QK^T and PV over every (query, key) pair
    assert forward == 24 * b * s * h**2 + core


def test_flash_attention_halves_the_causal_pairs_and_keeps_the_memory_ops_out():
    paper = layer_ops(GPT, False, ParallelConfig(), FLOPS_ONLY, KernelConfig())
    flash = layer_ops(GPT, False, ParallelConfig(), FLOPS_ONLY, KernelConfig(attention="flash"))
    core = [op for op in flash if op.core]
    assert [op.name for op in core] == ["attention", "attention"]
    assert core[0].flops == sum(op.flops for op in paper if op.core and op.phase == FORWARD) / 2
    assert core[1].flops == 2.5 * core[0].flops
    assert {op.name for op in paper if op.core} == {"scores", "softmax", "attention_dropout", "context"}


def test_memory_bound_ops_move_the_documented_bytes():
    gpu = DeviceConfig(tflops=1e6, hbm_gbs=1.0)  # 1 byte per ns: times are bytes / 1e6 ms
    ops = {(op.name, op.phase): op for op in layer_ops(GPT, False, ParallelConfig(), gpu, KernelConfig())}
    n, h, e = 512, 1024, 2
    assert ops["norm1", FORWARD].nbytes == 2 * e * n * h and ops["norm1", BACKWARD].nbytes == 3 * e * n * h
    assert ops["softmax", FORWARD].nbytes == 2 * e * 16 * n * n
    assert ops["dropout_add2", FORWARD].nbytes == n * h * (3 * e + 1)
    assert ops["act", BACKWARD].nbytes == 3 * e * n * 4 * h
    assert ops["norm1", FORWARD].time_ms == pytest.approx(2 * e * n * h / 1e6)


def _cluster(**fields):
    return Cluster(device=FLOPS_ONLY, devices_per_node=8, intra_node_gbs=100.0, inter_node_gbs=10.0, latency_us=0,
                   inter_latency_us=0, **fields)


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_tensor_parallel_communication_is_two_all_reduces_or_their_halves(sequence_parallel):
    cluster = _cluster()
    parallel = ParallelConfig(tensor_parallel=4, sequence_parallel=sequence_parallel, micro_batch_size=2)
    comm = layer_comm(GPT, False, parallel, cluster, (1.0, 2.0))
    activation = 2 * 512 * 2 * 1024
    _, link = cluster.group(GroupSizes(tp=4), "tp")
    all_reduce = collective_ms("all_reduce", activation, 4, link)
    assert comm.tp == pytest.approx((2 * all_reduce, 2 * all_reduce))  # RS + AG = AR on a ring
    assert comm.regather == (pytest.approx(2 * all_reduce / 2) if sequence_parallel else 0.0)
    table = estimate_layers(GPT, parallel=parallel, cluster=cluster)
    breakdown = table.breakdown.set_index(["kind", "option"])
    assert breakdown.loc[("layer", "full"), "tp_comm_ms"] == pytest.approx(6 * all_reduce)
    assert breakdown.loc[("layer", "none"), "tp_comm_ms"] == pytest.approx(4 * all_reduce)


def test_context_parallel_charges_what_the_ring_does_not_hide():
    cluster = _cluster()
    parallel = ParallelConfig(context_parallel=4, micro_batch_size=1)
    block = 2 * 512 / 4 * 16 * (64 + 64)  # this rank's keys and values
    step = collective_ms("send_recv", block, 4, cluster.group(GroupSizes(cp=4), "cp")[1])
    assert layer_comm(GPT, False, parallel, cluster, (0.0, 0.0)).cp == pytest.approx((3 * step, 3 * 2 * step))
    assert layer_comm(GPT, False, parallel, cluster, (4 * step, 8 * step)).cp == (0.0, 0.0)


def test_expert_dispatch_and_the_pipeline_boundary():
    cluster = _cluster()
    parallel = ParallelConfig(data_parallel=4, expert_parallel=4, micro_batch_size=1)
    routed = 2 * 256 * 2 * 512
    all_to_all = collective_ms("all_to_all", routed, 4, cluster.link(4, 1))
    assert layer_comm(MOE, True, parallel, cluster, (0.0, 0.0)).ep == pytest.approx((2 * all_to_all,) * 2)
    assert layer_comm(MOE, False, parallel, cluster, (0.0, 0.0)).ep == (0.0, 0.0)
    # A stage boundary: each tensor rank sends its slice of the activation to the next stage's node.
    two = ParallelConfig(tensor_parallel=8, data_parallel=2)
    assert boundary_ms(GPT, two, cluster, stages=2) == pytest.approx(2 * 512 * 1024 / 8 / 10e6)
    assert boundary_ms(GPT, two, cluster, stages=1) == 0.0


@pytest.mark.parametrize("zero, dtype, kinds", [(0, "bf16", ("all_reduce",)), (1, "bf16", ("reduce_scatter",)),
                                                (0, "fp16", ("all_reduce",)), (3, "bf16", ())])
def test_gradients_reduce_in_the_trainers_dtype_and_zero_gathers_weights(zero, dtype, kinds):
    """Once per step; ZeRO 3 reduces and gathers per micro-batch instead (:func:`zero3_comm_ms`)."""
    cluster = _cluster()
    parallel = ParallelConfig(data_parallel=4, zero=zero, dtype=dtype)
    link = cluster.link(4, 1)
    grad = 2 if dtype == "fp16" else 4
    reduce, gather = grad_sync_parts(1e6, 0.0, parallel, cluster)
    assert reduce == pytest.approx(sum(collective_ms(kind, grad * 1e6, 4, link) for kind in kinds))
    assert gather == (pytest.approx(collective_ms("all_gather", 2e6, 4, link)) if zero in (1, 2) else 0.0)


@pytest.mark.parametrize("reshard", [True, False])
def test_zero3_gathers_per_micro_batch_forward_and_when_resharding_backward(reshard):
    cluster = _cluster()
    link = cluster.link(4, 1)
    parallel = ParallelConfig(data_parallel=4, zero=3, reshard_after_forward=reshard)
    gather, scatter = collective_ms("all_gather", 2e6, 4, link), collective_ms("reduce_scatter", 4e6, 4, link)
    assert zero3_comm_ms(1e6, 0.0, parallel, cluster) == (gather, (gather if reshard else 0.0) + scatter)
    assert zero3_comm_ms(1e6, 0.0, ParallelConfig(data_parallel=4, zero=2), cluster) == (0.0, 0.0)


def test_more_recompute_costs_more_backward_on_every_dimension():
    parallel = ParallelConfig(tensor_parallel=2, context_parallel=2, data_parallel=2, expert_parallel=2)
    table = estimate_layers(MOE, parallel=parallel, cluster="dgx-a100")
    for kind in table.body_kinds:
        backward = table.rows(kind)["backward_time"]
        assert backward["none"] < backward["selective"] < backward["full"]
        assert backward["comm"] < backward["both"] < backward["full"]
    breakdown = table.breakdown.set_index(["kind", "option"])
    assert (breakdown["recompute_ms"].xs("none", level="option") == 0).all()
    sums = breakdown[["compute_ms", "tp_comm_ms", "cp_comm_ms", "ep_comm_ms"]].sum(axis=1)
    times = table.frame.set_index(["kind", "option"])[["forward_time", "backward_time"]].sum(axis=1)
    assert sums.to_numpy() == pytest.approx(times.loc[sums.index].to_numpy())
    assert set(breakdown.index.get_level_values("option")) == set(SAPP_OPTIONS)


@pytest.mark.parametrize("model", [LLAMA, MOE], ids=["llama", "moe"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_eager_elementwise_ops_move_the_counted_bytes_and_leave_the_rest(model, dtype):
    parallel = ParallelConfig(tensor_parallel=2, sequence_parallel=True, micro_batch_size=2, dtype=dtype,
                              data_parallel=2, expert_parallel=2 if model.experts else 1)
    e = 2 if dtype == "bf16" else 4
    n, h, t, moe = 2 * model.seq_length, model.hidden_size, 2, bool(model.experts)
    ops = {fused: {(op.name, op.phase): op.nbytes for op in layer_ops(model, moe, parallel, FLOPS_ONLY,
                                                                        KernelConfig(fused_elementwise=fused))}
           for fused in (True, False)}
    eager = EAGER_BYTES[e]
    rotated = n * (model.num_heads + model.num_kv_heads) * model.head_dim / t
    act = "experts_act" if moe else "act"
    for phase, i in ((FORWARD, 0), (BACKWARD, 1)):
        assert ops[False][("norm1", phase)] == pytest.approx(n * h / t * eager["norm"][i])
        assert ops[False][("rope", phase)] == pytest.approx(rotated * eager["rope"][i])
        fused_act = (3 * e, 5 * e)[i]
        assert ops[False][(act, phase)] == pytest.approx(ops[True][(act, phase)] / fused_act * eager["swiglu"][i])
    assert set(ops[False]) - set(ops[True]) == {("rope", FORWARD), ("rope", BACKWARD)}
    changed = {"norm1", "norm2", "rope", act, "shared_act"}
    assert {key: b for key, b in ops[False].items() if key[0] not in changed} == \
        {key: b for key, b in ops[True].items() if key[0] not in changed}
    tails = [{op.name: op.nbytes for op in tail_ops(model, parallel, FLOPS_ONLY, KernelConfig(fused_elementwise=f))
              if op.phase == FORWARD} for f in (True, False)]
    assert tails[1]["final_norm"] == pytest.approx(n * h / t * eager["norm"][0])
    assert tails[0]["final_norm"] == pytest.approx(2 * e * n * h / t)

