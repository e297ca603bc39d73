"""Context parallelism as trainers run it: ``ring`` (Megatron's p2p, load-balanced causal chunks, one kernel per
step at its block's size, the softmax merges), ``allgather`` (Llama 3's) and ``a2a`` (Ulysses), each checked
against its closed form by hand; all-gather's gathered keys and values in the search's and evaluate_strategy's
memory alike."""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from sappkit import InputError, Strategy, TransformerConfig, estimate_layers, evaluate_strategy
from sappkit.hardware import Cluster
from sappkit.hardware.collectives import collective_ms
from sappkit.layers import KernelConfig
from sappkit.layers.comm import layer_comm
from sappkit.layers.ops import BACKWARD, FORWARD, layer_ops
from sappkit.strategy.compiled import DEFAULT_KERNELS, compile_shape
from sappkit.strategy.search import search_strategies

LLAMA = TransformerConfig(layers=4, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_size=14336,
                          seq_length=8192, vocab_size=32000, gated_mlp=True)
#: Nodes of 2 H100s: a CP group of 4 crosses nodes (the card's 50 GB/s), so the kinds' traffic differs in time.
SLOW = Cluster.preset("dgx-h100", devices_per_node=2)
FLASH = KernelConfig(attention="flash")
C, B = 4, 1


def _parallel(kind):
    return Strategy(context_parallel=C, data_parallel=2, cp_kind=kind).parallel


def _op(ops, name, phase):
    return next(op for op in ops if op.name == name and op.phase == phase)


def _core(ops):
    return tuple(sum(op.time_ms for op in ops if op.core and op.phase == phase) for phase in (FORWARD, BACKWARD))


def test_ring_runs_one_kernel_per_step_at_its_block_size_and_merges_the_partial_softmaxes():
    device, ops = SLOW.device, layer_ops(LLAMA, False, _parallel("ring"), SLOW.device, FLASH)
    heads, queries, block = 32 * B, 8192 / C, 8192 / C
    step_flops = 2 * heads * queries * block * 256 / 2  # causal: half of a step's (query, key) pairs
    step_bytes = 2 * heads * (queries * 512 + block * 256)
    attention = _op(ops, "attention", FORWARD)
    assert attention.flops == pytest.approx(2 * heads * queries * 8192 * 256 / 2)  # the same work as one kernel
    assert attention.time_ms == pytest.approx(C * device.matmul_ms(step_flops, step_bytes), rel=1e-12)
    assert _op(ops, "attention", BACKWARD).time_ms == pytest.approx(
        C * device.matmul_ms(2.5 * step_flops, step_bytes), rel=1e-12)
    merge = _op(ops, "softmax_merge", FORWARD)
    assert merge.nbytes == 3 * (C - 1) * 4 * heads * queries * (128 + 1)  # fp32 output and LSE: 2 reads, 1 write
    assert _op(ops, "softmax_merge", BACKWARD).nbytes == 3 * (C - 1) * 4 * heads * queries * 128
    one = layer_ops(LLAMA, False, Strategy(context_parallel=C, data_parallel=2, cp_kind="allgather").parallel,
                    device, FLASH)
    assert _op(one, "attention", FORWARD).time_ms == pytest.approx(device.matmul_ms(
        C * step_flops, 2 * heads * (queries * 512 + 8192 * 256)), rel=1e-12)
    assert not [op for op in one if op.name == "softmax_merge"]


def test_each_ring_step_exposes_what_its_transfer_outlasts_its_block():
    ops = layer_ops(LLAMA, False, _parallel("ring"), SLOW.device, FLASH)
    core = _core(ops)
    comm = layer_comm(LLAMA, False, _parallel("ring"), SLOW, core)
    share = 2 * 8192 / C * 8 * 256  # bf16 keys and values of the local tokens, 8 KV heads of 128 + 128
    link = SLOW.nic_link(C, 1)
    for factor, window, exposed in zip((1, 2), core, comm.cp):
        step = collective_ms("send_recv", factor * share, C, link)
        assert exposed == pytest.approx((C - 1) * max(0.0, step - window / C), rel=1e-12)
    assert comm.cp[1] > 0


def test_allgather_gathers_the_keys_and_values_and_reduce_scatters_their_gradients_exposed():
    comm = layer_comm(LLAMA, False, _parallel("allgather"), SLOW, (1.0, 1.0))
    gathered = 2 * 8192 * 8 * 256  # every rank's keys and values
    ranks, link = C, SLOW.link(C, 1)
    assert comm.cp == (collective_ms("all_gather", gathered, ranks, link),
                       collective_ms("reduce_scatter", gathered, ranks, link))


def test_ulysses_exchanges_queries_keys_values_and_the_output_by_all_to_all():
    parallel = _parallel("a2a")
    comm = layer_comm(LLAMA, False, parallel, SLOW, (1.0, 1.0))
    n = 8192 / C
    qkv, out = 2 * n * (32 * 128 + 8 * 256), 2 * n * 32 * 128
    # 4 ranks on nodes of 2: one peer on the node (NVLink), two through the card, at once; one latency per peer
    nic = SLOW.inter_node_gbs * SLOW.inter_efficiency * 1e6
    a2a = [max(1 / 4 * b / (SLOW.intra_node_gbs * SLOW.intra_efficiency * 1e6), 2 / 4 * b / nic)
           + 3 * SLOW.inter_latency_us * 1e-3 for b in (qkv, out)]
    assert comm.cp[0] == comm.cp[1] == pytest.approx(sum(a2a), rel=1e-12)
    ops = layer_ops(LLAMA, False, parallel, SLOW.device, FLASH)
    attention = _op(ops, "attention", FORWARD)  # 32/4 heads over the whole sequence
    assert attention.flops == pytest.approx(2 * 8 * 8192 * 8192 * 256 / 2)
    assert attention.nbytes == pytest.approx(2 * 8 * (8192 * 512 + 8192 * 256))


def test_the_kinds_price_differently_and_ulysses_needs_the_heads_to_split():
    steps = {kind: evaluate_strategy(LLAMA, Strategy(context_parallel=C, data_parallel=2, cp_kind=kind),
                                     cluster=SLOW, global_batch=8, recompute="none").step_time
             for kind in ("ring", "allgather", "a2a")}
    assert len(set(steps.values())) == 3
    alone = [evaluate_strategy(LLAMA, Strategy(data_parallel=8, cp_kind=kind), cluster=SLOW, global_batch=8,
                               recompute="none").step_time for kind in ("ring", "a2a")]
    assert alone[0] == alone[1]  # cp 1: nothing to split
    wide = Strategy(tensor_parallel=2, context_parallel=32, data_parallel=1, cp_kind="a2a")
    with pytest.raises(InputError) as caught:
        evaluate_strategy(LLAMA, wide, cluster=Cluster.preset("dgx-h100"), global_batch=8, recompute="none")
    assert str(caught.value) == (
        "strategy t2 p1 v1 dp1 cp32 ep1 b1 1f1b zero1 cp-a2a breaks the 'heads' rule: context_parallel * "
        "tensor_parallel = 64 does not divide num_heads=32 (all-to-all context parallelism splits whole heads "
        "over cp * t)")


def test_the_named_attention_kernels_run_at_their_sourced_share_of_the_peak():
    device = Cluster.preset("dgx-h100").device
    parallel = Strategy(data_parallel=8).parallel
    flops = 2 * 32 * 8192 * 8192 * 256 / 2  # one causal kernel over the whole sequence, b = 1
    times = {}
    for kernel, forward, backward in (("fa2", 0.374, 0.321), ("fa3", 0.653, 0.565), ("cudnn", 0.606, 0.524)):
        ops = layer_ops(LLAMA, False, parallel, device, KernelConfig(attention=kernel))
        for phase, share, factor in ((FORWARD, forward, 1.0), (BACKWARD, backward, 2.5)):
            expected = factor * flops / (989.4e9 * share) + 5e-3  # the peak in FLOP/ms, and the kernel cost
            assert _op(ops, "attention", phase).time_ms == pytest.approx(expected, rel=1e-12)
        times[kernel] = evaluate_strategy(LLAMA, Strategy(data_parallel=8), cluster=Cluster.preset("dgx-h100"),
                                          global_batch=8, recompute="none",
                                          kernels=KernelConfig(attention=kernel)).step_time
    assert times["fa2"] > times["cudnn"] > times["fa3"]
    plain = layer_ops(LLAMA, False, parallel, SLOW.device.__class__(), KernelConfig(attention="fa3"))
    generic = layer_ops(LLAMA, False, parallel, SLOW.device.__class__(), FLASH)  # a device without the data
    assert _op(plain, "attention", FORWARD).time_ms == _op(generic, "attention", FORWARD).time_ms


#: Small enough to search exhaustively; 4 KV heads of 64, 8,192 tokens.
SMALL = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, num_kv_heads=4, ffn_size=4096, seq_length=8192,
                          vocab_size=32000)
#: All-gather CP's backward at t = 2, c = 2, b = 1 in bf16 (sappkit.layers.cp_memory):
#: e·s·b·(a_kv/t)·((d + d_v)(3 + 1/2c) + max(d, d_v)) = 2·8192·2·(128·3.25 + 64) bytes = 15 MB.
GATHERED_MB = 2 * 8192 * 2 * (128 * 3.25 + 64) / 2**20


def test_the_search_and_evaluate_strategy_charge_allgathers_keys_and_values_alike():
    with ThreadPoolExecutor(1) as pool:
        found = search_strategies(SMALL, executor=pool, cluster="dgx-a100", devices=8, global_batch=16,
                                  memory_mb=20000, progress=False, balance_top=2, prune=False, schedules=["1f1b"],
                                  dims={"pipeline_parallel": [1, 2], "tensor_parallel": [2], "context_parallel": [2],
                                        "micro_batch_size": [1], "zero": [1, 3], "sequence_parallel": [True],
                                        "cp_kind": ["ring", "allgather"]})
    priced = found.frame[found.frame["status"].isin(["evaluated", "balanced"])]
    assert set(priced["cp_kind"]) == {"ring", "allgather"} and set(priced["pipeline_parallel"]) == {1, 2}
    peaks = {}
    for index, row in priced.iterrows():
        strategy = found.strategy(index)
        result = evaluate_strategy(SMALL, strategy, cluster="dgx-a100", global_batch=16, memory_mb=20000,
                                   recompute=row["recompute"], placement="balanced" if row["status"] == "balanced"
                                   else "even")
        assert row["peak_memory_mb"] == result.peak_memory_mb
        peaks[row["label"]] = result.peak_memory_mb
    # no pipeline, ZeRO 1: the peak is a layer's backward, the gathered keys and values on top of ring's
    ring = "t2 p1 v1 dp2 cp2 ep1 b1 1f1b zero1"
    assert peaks[f"{ring} cp-allgather"] - peaks[ring] == pytest.approx(GATHERED_MB, rel=1e-9)


def test_a_strategys_table_holds_the_estimates_working_sets_under_zero_3():
    strategy = Strategy(tensor_parallel=2, context_parallel=2, data_parallel=2, zero=3, cp_kind="allgather")
    cluster = Cluster.preset("dgx-a100")
    ring = compile_shape((SMALL,), replace(strategy, cp_kind="ring").parallel, cluster, options=("none",))
    compiled = compile_shape((SMALL,), strategy.parallel, cluster, options=("none",))
    table = compiled.table(strategy.parallel, cluster).frame
    estimate = estimate_layers(SMALL, parallel=strategy.parallel, cluster=cluster, options=("none",),
                               kernels=DEFAULT_KERNELS).frame
    times = ["forward_time", "backward_time"]  # the table's hold ZeRO 3's per-micro-batch gathers; the estimate's not
    assert table.drop(columns=times).equals(estimate.drop(columns=times))
    layer = table["role"] == "body"
    fsdp = ring.table(replace(strategy, cp_kind="ring").parallel, cluster).frame
    assert fsdp["working_mb"][layer].iloc[0] > 0
    for column in ("working_mb", "first_working_mb"):
        assert (table[column][layer] - fsdp[column][layer]).tolist() == pytest.approx([GATHERED_MB], rel=1e-9)
        assert (table[column][~layer] == fsdp[column][~layer]).all()  # the embedding and the LM head gather none
