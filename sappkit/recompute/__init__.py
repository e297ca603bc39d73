"""Recompute chooser: for a fixed partition, the fastest recompute per layer that fits every stage.

A per-stage multiple-choice knapsack over the layers' options, with the
end-of-warm-up working set, an FSDP second peak and offload to the host.
"""

from .choice import RecomputeChoice
from .chooser import choose_recompute, sweep_recompute
from .offload import HostLink
from .partition import Partition

__all__ = ["Partition", "HostLink", "RecomputeChoice", "choose_recompute", "sweep_recompute"]
