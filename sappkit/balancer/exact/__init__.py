"""The exact searches: the proven-optimal placement for the ``sapp`` objective (levels 0 and 1), or proof
that none fits; where none of them applies, or a budget stops it, the integer program (:mod:`..ilp`) runs.

:func:`search` and :func:`least_memory` pick the search that covers a set-up (:mod:`.route`).
"""

from .cells import Cache
from .route import SearchResult, applicable, least_memory, search

__all__ = ["Cache", "SearchResult", "applicable", "search", "least_memory"]
