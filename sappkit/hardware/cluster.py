"""A cluster as data: nodes of devices, the links inside and between nodes, and how ranks are laid out.

**Rank layout** (Megatron-LM's ``RankGenerator``): ranks are numbered along
the dimensions of ``rank_order``, the first innermost (default
``tp-cp-ep-dp-pp``: tensor parallel on neighbouring ranks, then context,
expert, data and pipeline parallel). A dimension's group is ``n`` ranks
``stride`` apart, the stride being the product of the sizes of the
dimensions before it. Dense layers use the sizes ``tp = t``, ``cp``,
``ep = 1``, ``dp``, ``pp = p``; MoE layers (Megatron-Core's expert grid over
the same ranks) ``tp = etp``, ``cp = 1``, ``ep``, ``dp = t·cp·dp / (etp·ep)``
(the expert data parallel), ``pp = p``.

**Links.** A group inside one node (``n · stride <= devices_per_node``)
runs on the intra-node link. A group spanning nodes runs its ring through
the network cards of its members: with ``k`` members per node the ring
reaches ``min(intra, k · inter)`` per rank (each member's card carries one
ring channel; NCCL spreads a collective over a node's cards this way),
at the inter-node latency. Point-to-point traffic that leaves the node (an
all-to-all's, a context-parallel ring step's) goes through each device's own
card (rail-optimised nodes: ~50 GB/s per H100 on a DGX H100), so it is
bounded by that card (:meth:`Cluster.nic_link`, :meth:`Cluster.all_to_all_ms`).
Each link reaches its ``*_efficiency`` of the datasheet bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from .._check import check_int, check_number
from ..errors import InputError
from .collectives import Link
from .device import DeviceConfig
from .tables import read

__all__ = ["Cluster", "RANK_DIMENSIONS", "DEFAULT_RANK_ORDER", "GroupSizes"]

#: The parallel dimensions a rank order lists.
RANK_DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
#: Megatron-LM's default order, innermost first.
DEFAULT_RANK_ORDER = "tp-cp-ep-dp-pp"


@dataclass(frozen=True)
class GroupSizes:
    """The sizes of the rank dimensions of one decomposition (dense or expert), in :data:`RANK_DIMENSIONS` order."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    pp: int = 1


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Nodes of one kind of device, their links, and the order ranks are laid out in.

    Examples
    --------
    >>> gpu = DeviceConfig(tflops=300.0)
    >>> nodes = Cluster(device=gpu, devices_per_node=8, intra_node_gbs=300.0, inter_node_gbs=25.0)
    >>> nodes.link(8, 1).gbs, nodes.link(4, 8).gbs, nodes.link(16, 1).gbs
    (300.0, 25.0, 200.0)
    >>> nodes.group(GroupSizes(tp=8, dp=4), "dp")
    (4, Link(gbs=25.0, latency_us=10.0))
    """

    device: DeviceConfig
    """The kind of device every rank is."""
    devices_per_node: int = 8
    """Devices in one node (one fast-link domain)."""
    intra_node_gbs: float = 300.0
    """Bandwidth between two devices of a node, GB/s per device and direction (datasheet)."""
    inter_node_gbs: float = 25.0
    """Network bandwidth of one device (its share of the node's cards), GB/s per direction (datasheet)."""
    latency_us: float = 5.0
    """Latency of one ring step inside a node, µs."""
    inter_latency_us: float = 10.0
    """Latency of one ring step across nodes, µs."""
    intra_efficiency: float = 1.0
    """Fraction of ``intra_node_gbs`` a collective reaches, in (0, 1]."""
    inter_efficiency: float = 1.0
    """Fraction of ``inter_node_gbs`` a collective reaches, in (0, 1]."""
    nodes: int | None = None
    """Nodes in the cluster; None: as many as a strategy needs."""
    rank_order: str = DEFAULT_RANK_ORDER
    """The rank dimensions innermost first, e.g. ``"tp-cp-ep-dp-pp"`` (every one of :data:`RANK_DIMENSIONS`)."""
    name: str = "custom"
    """The preset's name (``"dgx-h100"``) or ``"custom"``."""
    FILE_KIND: ClassVar[str] = "cluster"
    """What a hardware file of a cluster says in its ``kind`` (:mod:`sappkit.hardware.tables`)."""

    def __post_init__(self):
        if not isinstance(self.device, DeviceConfig):
            raise InputError(f"device must be a DeviceConfig; got {type(self.device).__name__}")
        check_int("devices_per_node", self.devices_per_node, minimum=1)
        for field in ("intra_node_gbs", "inter_node_gbs"):
            check_number(field, getattr(self, field), minimum=0, strict=True)
        for field in ("latency_us", "inter_latency_us"):
            check_number(field, getattr(self, field), minimum=0)
        for field in ("intra_efficiency", "inter_efficiency"):
            if not 0 < check_number(field, getattr(self, field)) <= 1:
                raise InputError(f"{field} must be in (0, 1]; got {getattr(self, field)!r}")
        if self.nodes is not None:
            check_int("nodes", self.nodes, minimum=1)
        order = self.rank_order.split("-") if isinstance(self.rank_order, str) else None
        if order is None or sorted(order) != sorted(RANK_DIMENSIONS):
            raise InputError(f"rank_order must name each of {', '.join(RANK_DIMENSIONS)} once, joined by '-' "
                             f"(innermost first, e.g. {DEFAULT_RANK_ORDER!r}); got {self.rank_order!r}")
        if not (isinstance(self.name, str) and self.name):
            raise InputError(f"name must be a non-empty string; got {self.name!r}")

    @classmethod
    def of(cls, device: DeviceConfig) -> Cluster:
        """A cluster of one node whose devices talk over the device's own ``link_gbs`` (no calibrated losses)."""
        return cls(device=device, devices_per_node=2**20, intra_node_gbs=device.link_gbs,
                   inter_node_gbs=device.link_gbs, name=f"{device.name} nodes")

    @classmethod
    def preset(cls, name, /, **overrides) -> Cluster:
        """A cluster preset by name (:data:`sappkit.hardware.CLUSTER_PRESETS`) or a hardware file (``.toml``,
        :mod:`sappkit.hardware.tables`), any field overridden (``device``: a device, a preset name or a file).

        Examples
        --------
        >>> Cluster.preset("dgx-a100", nodes=4).devices
        32
        """
        return read(cls, name, overrides)

    @property
    def devices(self) -> int | None:
        """All the cluster's devices (None when ``nodes`` is)."""
        return None if self.nodes is None else self.nodes * self.devices_per_node

    def replace(self, **fields) -> Cluster:
        """A copy with ``fields`` changed (a device preset name is looked up)."""
        if isinstance(fields.get("device"), str):
            fields["device"] = DeviceConfig.preset(fields["device"])
        return replace(self, **fields)

    def link(self, ranks: int, stride: int) -> Link:
        """The link a group of ``ranks`` ranks ``stride`` apart runs its collectives on."""
        node = self.devices_per_node
        intra = Link(self.intra_node_gbs * self.intra_efficiency, self.latency_us)
        if ranks * stride <= node:
            return intra
        per_node = max(1, node // stride) if stride < node else 1
        inter = self.inter_node_gbs * self.inter_efficiency
        return Link(min(intra.gbs, per_node * inter), self.inter_latency_us)

    def nic_link(self, ranks: int, stride: int) -> Link:
        """The link a point-to-point exchange of a group (an all-to-all's, a ring's step) runs at: the intra-node
        link inside a node, else each device's own network card (rail-optimised: a device's off-node bytes go
        through its card alone, so ``k`` members on a node do not add up as a ring's channels do)."""
        intra = Link(self.intra_node_gbs * self.intra_efficiency, self.latency_us)
        if ranks * stride <= self.devices_per_node:
            return intra
        return Link(min(intra.gbs, self.inter_node_gbs * self.inter_efficiency), self.inter_latency_us)

    def members_per_node(self, ranks: int, stride: int) -> int:
        """How many of a group's ``ranks`` (``stride`` apart) share a node."""
        node = self.devices_per_node
        return min(ranks, max(1, node // stride)) if stride < node else 1

    def all_to_all_ms(self, sizes: GroupSizes, dimension: str, nbytes: float) -> float:
        """An all-to-all of ``nbytes`` per rank over ``dimension``'s group, ms, hierarchical: of its ``n``
        members, the ``k - 1`` on the node receive ``(k - 1) / n`` of the bytes over the intra-node link while the
        ``n - k`` off it receive the rest through each device's own card (:meth:`nic_link`), both at once; one
        latency per peer."""
        ranks, stride = self.group_stride(sizes, dimension)
        if ranks == 1 or nbytes == 0:
            return 0.0
        k = self.members_per_node(ranks, stride)
        intra, nic = self.link(k, stride), self.nic_link(ranks, stride)
        inside = (k - 1) / ranks * nbytes / (intra.gbs * 1e6)
        outside = (ranks - k) / ranks * nbytes / (nic.gbs * 1e6)
        return max(inside, outside) + (ranks - 1) * nic.latency_us * 1e-3

    def group_stride(self, sizes: GroupSizes, dimension: str) -> tuple[int, int]:
        """The ranks of ``dimension``'s group under ``sizes`` and the stride between them."""
        stride = 1
        for name in self.rank_order.split("-"):
            if name == dimension:
                return getattr(sizes, name), stride
            stride *= getattr(sizes, name)
        raise InputError(f"dimension must be one of {', '.join(RANK_DIMENSIONS)}; got {dimension!r}")

    def group(self, sizes: GroupSizes, dimension: str) -> tuple[int, Link]:
        """The ranks of ``dimension``'s group under ``sizes`` and the link its collectives run on."""
        ranks, stride = self.group_stride(sizes, dimension)
        return ranks, self.link(ranks, stride)
