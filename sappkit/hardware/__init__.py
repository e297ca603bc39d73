"""Devices and clusters as data: sourced presets, size-dependent matmul efficiency, collectives' cost on a link.

A :class:`DeviceConfig` prices one kernel by the compute or memory roofline;
a :class:`Cluster` says which link a group of ranks runs its collectives on
(Megatron-LM's rank order) and :func:`collective_ms` what a collective costs
there. Presets by name: ``DeviceConfig.preset("h100-sxm")``,
``Cluster.preset("dgx-h100", nodes=16)``; presets and users' own hardware are
files (:func:`load`, :func:`write`, :mod:`sappkit.hardware.tables`).
"""

from .cluster import DEFAULT_RANK_ORDER, RANK_DIMENSIONS, Cluster, GroupSizes
from .collectives import COLLECTIVES, Link, collective_ms, overlap_ms
from .device import DTYPES, DeviceConfig
from .files import CLUSTER_PRESETS, DEVICE_PRESETS, load, write

__all__ = ["DeviceConfig", "DTYPES", "Cluster", "GroupSizes", "RANK_DIMENSIONS", "DEFAULT_RANK_ORDER", "Link",
           "COLLECTIVES", "collective_ms", "overlap_ms", "DEVICE_PRESETS", "CLUSTER_PRESETS",
           "load", "write"]
