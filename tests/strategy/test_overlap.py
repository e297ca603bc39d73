"""Overlap as a model: tensor-parallel communication overlap (Megatron's ``--tp-comm-overlap``, torchtitan's async
TP), each sequence-parallel all-gather and reduce-scatter hidden under the matmul it feeds or follows, exposing what
outlasts that matmul and slowing it by the SMs the collective takes; and the data-parallel gradient reduction per
bucket under the last backward. Each checked against the closed form by hand."""

import math

import pytest

from sappkit import InputError, Strategy, TransformerConfig, evaluate_strategy
from sappkit.hardware import Cluster
from sappkit.hardware.collectives import collective_ms
from sappkit.layers import KernelConfig
from sappkit.layers.comm import grad_sync_parts
from sappkit.layers.ops import BACKWARD, FORWARD, layer_ops
from sappkit.strategy.step import bucket_count

GPT = TransformerConfig(layers=4, hidden_size=4096, num_heads=32, ffn_size=16384, seq_length=4096,
                        vocab_size=32000)
#: NVLink as shipped (the collectives hide under their matmuls), and a slow one (some outlast theirs).
FAST = Cluster.preset("dgx-h100")
SLOW = Cluster.preset("dgx-h100", intra_node_gbs=20.0)


def _priced(cluster, **fields):
    strategy = Strategy(tensor_parallel=4, data_parallel=2, **fields)
    return evaluate_strategy(GPT, strategy, cluster=cluster, global_batch=8, recompute="none")


def _body(result):
    frame = result.layers.breakdown
    return frame[(frame["kind"] == "layer") & (frame["option"] == "none")].iloc[0]


def _closed_form(cluster):
    """(exposed, slowdown) of one layer, forward and backward together, by hand."""
    parallel = Strategy(tensor_parallel=4, data_parallel=2).parallel
    ops = layer_ops(GPT, False, parallel, cluster.device, KernelConfig(attention="flash"))
    gemm = {(op.name, op.phase): 0.0 for op in ops}
    for op in ops:
        gemm[(op.name, op.phase)] += op.time_ms
    activation = 2 * 4096 * 4096  # bf16, s·b tokens of h
    link = cluster.link(4, 1)
    gather = collective_ms("all_gather", activation, 4, link)
    scatter = collective_ms("reduce_scatter", activation, 4, link)
    share = cluster.device.comm_sm_share
    exposed = slowdown = 0.0
    for first, last in (("qkv", "out"), ("fc1", "fc2")):
        for comm, window in ((gather, gemm[(first, FORWARD)]), (scatter, gemm[(last, FORWARD)]),
                             (gather, gemm[(last, BACKWARD)]), (scatter, gemm[(first, BACKWARD)])):
            exposed += max(0.0, comm - window)
            slowdown += share * min(comm, window)
    return exposed, slowdown, 2 * 2 * (gather + scatter)


@pytest.mark.parametrize("cluster", [FAST, SLOW])
def test_tp_overlap_exposes_what_outlasts_each_matmul_and_slows_it_by_the_sm_share(cluster):
    plain, overlapped = _body(_priced(cluster)), _body(_priced(cluster, tp_comm_overlap=True))
    exposed, slowdown, total = _closed_form(cluster)
    assert plain["tp_comm_ms"] == pytest.approx(total, rel=1e-12)
    assert overlapped["tp_comm_ms"] == pytest.approx(exposed, rel=1e-12)
    assert overlapped["compute_ms"] == pytest.approx(plain["compute_ms"] + slowdown, rel=1e-12)
    if cluster is FAST:  # NVLink: nearly all hidden
        assert 0.0 <= exposed < 0.05 * total
    else:  # the slow link: some collectives outlast their matmuls, others hide
        assert 0.0 < exposed < total


def test_tp_overlap_changes_the_step_where_the_work_differs():
    for cluster in (FAST, SLOW):
        plain, overlapped = _priced(cluster), _priced(cluster, tp_comm_overlap=True)
        assert overlapped.step_time < plain.step_time
        assert overlapped.strategy.label.endswith("zero1 tp-overlap")
    one = dict(tensor_parallel=1, data_parallel=8)  # no tensor-parallel group: nothing to overlap
    alone = [evaluate_strategy(GPT, Strategy(**one, tp_comm_overlap=flag), cluster=FAST, global_batch=8,
                               recompute="none").step_time for flag in (False, True)]
    assert alone[0] == alone[1]


def test_tp_overlap_needs_sequence_parallelism():
    with pytest.raises(InputError) as caught:
        _priced(FAST, tp_comm_overlap=True, sequence_parallel=False)
    assert str(caught.value) == (
        "strategy t4 p1 v1 dp2 cp1 ep1 b1 1f1b zero1 no-sp tp-overlap breaks the 'sequence' rule: "
        "tp_comm_overlap needs sequence_parallel (Megatron overlaps the sequence-parallel all-gathers and "
        "reduce-scatters with their matmuls)")


def test_the_gradient_reduction_runs_per_bucket_under_the_last_backward_and_exposes_the_rest():
    slow = Cluster.preset("dgx-h100", devices_per_node=1, inter_node_gbs=2.0)  # dp over the network
    strategy = Strategy(data_parallel=8)
    result = evaluate_strategy(GPT, strategy, cluster=slow, global_batch=16, recompute="none")
    frame = result.layers.frame
    rows = frame[(frame["role"] != "body") | (frame["option"] == "none")]
    counts = rows["count"].to_numpy()
    forward, backward = (float((rows[c] * counts).sum()) for c in ("forward_time", "backward_time"))
    busy = 2 * (forward + backward)  # two micro-batches
    parts = result.layers.breakdown.set_index(["kind", "option"])
    dense = sum(parts.loc[(kind, option), "params"] * count
                for kind, option, count in zip(rows["kind"], rows["option"], counts))
    reduce, _ = grad_sync_parts(dense, 0.0, strategy.parallel, slow)
    k = bucket_count(dense, strategy.parallel)
    assert k == math.ceil(dense / 4e7) > 1
    free = 0.0
    for j in range(k):  # bucket j ready (j + 1)/k into the last backward, each a k-th of the reduction
        free = max(free, busy - backward + (j + 1) / k * backward) + reduce / k
    tail = max(0.0, free - busy)
    expected = tail + slow.device.comm_sm_share * (reduce - tail)
    assert result.breakdown["dp_comm_ms"].iloc[0] == pytest.approx(expected, rel=1e-9)
    assert 0.0 < tail < reduce  # the last bucket at least is exposed, the others hide
    blocking = evaluate_strategy(GPT, Strategy(data_parallel=8, overlap_grad_reduce=False), cluster=slow,
                                 global_batch=16, recompute="none")
    assert blocking.breakdown["dp_comm_ms"].iloc[0] == pytest.approx(reduce, rel=1e-9)
