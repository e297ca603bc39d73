"""Ranks laid out as Megatron orders them; a group inside a node uses its fast link, one across nodes the cards."""

import tomllib

import pytest

from sappkit import InputError
from sappkit.hardware import CLUSTER_PRESETS, Cluster, DeviceConfig, GroupSizes, Link, collective_ms

GPU = DeviceConfig(tflops=100.0)
NODES = Cluster(device=GPU, devices_per_node=8, intra_node_gbs=300.0, inter_node_gbs=25.0, latency_us=2.0,
                inter_latency_us=8.0)


def _ranks(cluster, sizes, dimension):
    """The rank groups of ``dimension`` by brute force: every rank's coordinates in the order."""
    order = cluster.rank_order.split("-")
    total = 1
    for name in order:
        total *= getattr(sizes, name)
    groups = {}
    for rank in range(total):
        left, coordinates = rank, {}
        for name in order:
            coordinates[name] = left % getattr(sizes, name)
            left //= getattr(sizes, name)
        key = tuple(v for k, v in coordinates.items() if k != dimension)
        groups.setdefault(key, []).append(rank)
    return list(groups.values())


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "tp-dp-cp-ep-pp", "dp-tp-cp-ep-pp", "tp-pp-dp-cp-ep"])
@pytest.mark.parametrize("dimension", ["tp", "cp", "dp", "pp"])
def test_a_group_stays_in_a_node_exactly_when_brute_force_says_so(order, dimension):
    cluster = Cluster(device=GPU, devices_per_node=8, intra_node_gbs=300.0, inter_node_gbs=25.0, rank_order=order)
    sizes = GroupSizes(tp=4, cp=2, dp=4, pp=2)
    ranks, link = cluster.group(sizes, dimension)
    groups = _ranks(cluster, sizes, dimension)
    assert ranks == len(groups[0]) == getattr(sizes, dimension)
    inside = all(len({rank // 8 for rank in group}) == 1 for group in groups)
    assert (link.gbs == 300.0) == inside
    if not inside:  # each member's card carries a ring channel: members per node x the card's bandwidth
        per_node = max(sum(1 for rank in groups[0] if rank // 8 == node) for node in {r // 8 for r in groups[0]})
        assert link.gbs == min(300.0, per_node * 25.0)


def test_tensor_parallel_is_innermost_by_default():
    sizes = GroupSizes(tp=8, cp=1, dp=4, pp=4)
    assert NODES.group(sizes, "tp") == (8, Link(300.0, 2.0))
    assert NODES.group(sizes, "dp") == (4, Link(25.0, 8.0))
    assert NODES.group(GroupSizes(tp=2, dp=4), "dp") == (4, Link(300.0, 2.0))
    assert NODES.group(GroupSizes(tp=2, dp=8), "dp") == (8, Link(100.0, 8.0))


def test_collectives_follow_the_ring_factors():
    link = Link(gbs=100.0, latency_us=0.0)
    one_gb = 1e9
    assert collective_ms("all_reduce", one_gb, 8, link) == pytest.approx(2 * 7 / 8 * 10)
    for kind in ("reduce_scatter", "all_gather", "all_to_all"):
        assert collective_ms(kind, one_gb, 8, link) == pytest.approx(7 / 8 * 10)
    assert collective_ms("send_recv", one_gb, 2, link) == pytest.approx(10)
    # An all-reduce is a reduce-scatter and an all-gather.
    assert collective_ms("all_reduce", one_gb, 8, Link(100.0, 5.0)) == pytest.approx(
        collective_ms("reduce_scatter", one_gb, 8, Link(100.0, 5.0))
        + collective_ms("all_gather", one_gb, 8, Link(100.0, 5.0)))


@pytest.mark.parametrize("name", sorted(CLUSTER_PRESETS))
def test_cluster_presets_cite_their_sources_and_take_overrides(name):
    cluster = Cluster.preset(name, nodes=2)
    assert cluster.name == name and cluster.devices == 2 * cluster.devices_per_node
    source = tomllib.loads(CLUSTER_PRESETS[name].read_text())["source"]
    assert "datasheet" in source or "Gitee" in source
    assert Cluster.preset(name, device="b200").device.name == "b200"
    assert cluster.replace(inter_node_gbs=1.0).inter_node_gbs == 1.0


@pytest.mark.parametrize("call, message", [
    (lambda: Cluster(device=GPU, rank_order="tp-dp-pp"),
     "rank_order must name each of tp, cp, ep, dp, pp once, joined by '-' (innermost first, e.g. "
     "'tp-cp-ep-dp-pp'); got 'tp-dp-pp'"),
    (lambda: Cluster(device="h100"), "device must be a DeviceConfig; got str"),
    (lambda: Cluster(device=GPU, devices_per_node=0), "devices_per_node must be an int >= 1; got 0"),
    (lambda: Cluster(device=GPU, inter_efficiency=2.0), "inter_efficiency must be in (0, 1]; got 2.0"),
    (lambda: Cluster.preset("dgx-z"), "cluster must be one of 'atlas-800t-a2', 'dgx-a100', 'dgx-b200', "
                                      "'dgx-h100', 'grand-teton-h100', 'whitefiber-h200' or a hardware file (.toml); "
                                      "got 'dgx-z'"),
    (lambda: NODES.group(GroupSizes(), "xp"), "dimension must be one of tp, cp, ep, dp, pp; got 'xp'"),
    (lambda: collective_ms("broadcast", 1.0, 2, Link(1.0, 0.0)),
     "kind must be one of 'all_reduce', 'reduce_scatter', 'all_gather', 'all_to_all', 'send_recv'; "
     "got 'broadcast'"),
])
def test_bad_clusters_are_refused_by_name(call, message):
    with pytest.raises(InputError) as error:
        call()
    assert str(error.value) == message


def test_off_node_point_to_point_traffic_goes_through_each_devices_own_card():
    nodes = Cluster(device=DeviceConfig(), devices_per_node=8, intra_node_gbs=450.0, inter_node_gbs=50.0,
                    latency_us=5.0, inter_latency_us=10.0)
    # a ring of 16 ranks, 8 per node: its collectives reach min(intra, 8 x 50) per rank, its point-to-point steps
    # that cross a node only the device's own 50 GB/s
    assert nodes.link(16, 1).gbs == 400.0 and nodes.nic_link(16, 1) == Link(50.0, 10.0)
    assert nodes.nic_link(8, 1) == Link(450.0, 5.0)
    sizes = GroupSizes(ep=32)
    # 32 ranks, 8 per node: 7/32 of the bytes over NVLink, 24/32 through the card at once; 31 latencies
    expected = max(7 / 32 * 1e9 / 450e6, 24 / 32 * 1e9 / 50e6) + 31 * 10e-3
    assert nodes.all_to_all_ms(sizes, "ep", 1e9) == pytest.approx(expected, rel=1e-12)
    inside = GroupSizes(ep=8)
    assert nodes.all_to_all_ms(inside, "ep", 1e9) == pytest.approx(7 / 8 * 1e9 / 450e6 + 7 * 5e-3, rel=1e-12)
    assert nodes.all_to_all_ms(GroupSizes(), "ep", 1e9) == 0.0
