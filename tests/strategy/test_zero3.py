"""ZeRO 3 priced: per-micro-batch weight gathers (forward, and backward again when resharding) and gradient
reduce-scatters, each overlapped with its layer's compute as far as that lasts, slowing it by the SMs it takes."""

import pytest

from sappkit import Strategy, TransformerConfig, evaluate_strategy
from sappkit.hardware import Cluster, DeviceConfig
from sappkit.hardware.collectives import collective_ms

GPT = TransformerConfig(layers=8, hidden_size=2048, num_heads=16, ffn_size=8192, seq_length=2048, vocab_size=32000)
#: One node of 8 H100s on NVLink, and the same with a slow network between nodes of 2 (gathers outlast compute).
FAST = Cluster.preset("dgx-h100")
SLOW = Cluster.preset("dgx-h100", devices_per_node=2, inter_node_gbs=1.0)


def _priced(cluster, **fields):
    strategy = Strategy(data_parallel=8, **fields)
    return evaluate_strategy(GPT, strategy, cluster=cluster, global_batch=32, recompute="none")


def _body(result, column):
    frame = result.layers.frame
    return float(frame.loc[(frame["kind"] == "layer") & (frame["option"] == "none"), column].iloc[0])


@pytest.mark.parametrize("cluster", [FAST, SLOW])
@pytest.mark.parametrize("reshard", [True, False])
def test_a_layers_times_add_its_gathers_and_reduce_scatters_as_far_as_its_compute_does_not_hide_them(cluster,
                                                                                                   reshard):
    base, sharded = _priced(cluster, zero=1), _priced(cluster, zero=3, reshard_after_forward=reshard)
    params = 12 * 2048**2 + 2 * 2048  # attention 4h², MLP 8h², two norms
    ranks, link = 8, cluster.link(8, 1)
    gather = collective_ms("all_gather", 2 * params, ranks, link)
    scatter = collective_ms("reduce_scatter", 4 * params, ranks, link)
    share = cluster.device.comm_sm_share
    forward, backward = _body(base, "forward_time"), _body(base, "backward_time")
    b_comm = (gather if reshard else 0.0) + scatter
    f_exposed, f_slow = max(0.0, gather - forward), share * min(gather, forward)
    b_exposed, b_slow = max(0.0, b_comm - backward), share * min(b_comm, backward)
    assert _body(sharded, "forward_time") == pytest.approx(forward + f_exposed + f_slow, rel=1e-12)
    assert _body(sharded, "backward_time") == pytest.approx(backward + b_exposed + b_slow, rel=1e-12)
    exposed = sharded.layers.breakdown.query("kind == 'layer' and option == 'none'")["zero_comm_ms"].iloc[0]
    assert exposed == pytest.approx(f_exposed + b_exposed, rel=1e-12)
    assert exposed > 0 if cluster is SLOW else exposed < 0.1 * (gather + scatter)


def test_the_zero_stages_price_differently_where_their_work_differs():
    steps = {zero: _priced(SLOW, zero=zero).step_time for zero in (0, 1, 2, 3)}
    assert steps[1] == steps[2]  # the same reduce-scatter and gather per step; only memory differs
    assert steps[0] != steps[1] and steps[3] > steps[1]
    kept, resharded = _priced(SLOW, zero=3, reshard_after_forward=False), _priced(SLOW, zero=3)
    assert kept.step_time < resharded.step_time  # one gather per micro-batch fewer
    assert kept.peak_memory_mb > resharded.peak_memory_mb or kept.stages["param_mb"].iloc[0] > \
        resharded.stages["param_mb"].iloc[0]


def test_zero3_moves_its_step_end_reduction_into_the_backward():
    sharded = _priced(FAST, zero=3)
    assert sharded.breakdown["dp_comm_ms"].iloc[0] == sharded.breakdown["dp_overlapped_ms"].iloc[0] == 0.0
    parts = sharded.step_breakdown()
    assert parts.sum() == pytest.approx(sharded.step_time, rel=1e-12)


def test_a_collective_that_takes_no_sms_slows_no_compute():
    device = DeviceConfig.preset("h100-sxm", comm_sm_share=0.0)
    cluster = FAST.replace(device=device)
    base, sharded = _priced(cluster, zero=1), _priced(cluster, zero=3)
    gather = collective_ms("all_gather", 2 * (12 * 2048**2 + 2 * 2048), 8, cluster.link(8, 1))
    forward = _body(base, "forward_time")
    assert _body(sharded, "forward_time") == pytest.approx(max(forward, gather), rel=1e-12)
