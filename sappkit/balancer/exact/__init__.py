"""The exact searches: the proven-optimal placement for the ``sapp`` objective (levels 0 and 1), or proof
that none fits; where none of them applies, or a budget stops it, the integer program (:mod:`..ilp`) runs.

:func:`search` and :func:`least_memory` pick the search that covers a set-up (:mod:`.route`).
"""

from .cells import Cache
from .result import SearchResult
from .route import least_memory, search, why_not_applicable

__all__ = ["Cache", "SearchResult", "why_not_applicable", "search", "least_memory"]
