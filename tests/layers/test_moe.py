"""MoE layers as trainers run them: the expert grid's gradient group, checked by hand."""

import pytest

from sappkit import DeviceConfig, ParallelConfig
from sappkit.hardware import Cluster, collective_ms
from sappkit.layers.comm import grad_sync_parts

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
