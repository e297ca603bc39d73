"""One more recomputed layer: every distinct plan one more fully recomputed layer reaches.

Starting from a per-layer recompute choice, what each such plan frees on
its stage and what it costs in time.
"""

from .analysis import RecomputeAnalysis, alternatives
from .result import Alternatives

__all__ = ["RecomputeAnalysis", "alternatives", "Alternatives"]
