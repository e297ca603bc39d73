"""Which exact search answers a set-up (the room's docstring, :mod:`sappkit.balancer.exact`, says which
covers which case), and its answer as a :class:`~sappkit.balancer.exact.result.SearchResult`."""

from __future__ import annotations

import numpy as np

from ..setup import BalanceSetup
from . import enumeration, segments
from .boundary import search as boundary_search
from .cells import Cache
from .result import SearchResult, SearchTimeout, found

__all__ = ["why_not_applicable", "search", "least_memory"]


def why_not_applicable(setup: BalanceSetup) -> str:
    """Why no exact search applies to ``setup`` ('' when one does: then :func:`search` answers it)."""
    if len(setup.kinds) == 1:
        return enumeration.why_not_applicable(setup)
    return (segments.why_not_applicable(setup) if setup.chunks == 1
            else boundary_search.why_not_applicable(setup))


def search(setup: BalanceSetup, *, cache: Cache | None = None, prove: bool = True) -> SearchResult | None:
    """Bounds (and usually the proven optimum) of ``setup``'s objective; None when no search applies or the
    one that does stops past its budgets or the cache's deadline.

    ``proven`` with ``counts`` None means no placement fits ``setup.memory_mb``. With ``prove=False`` a
    placement the boundary search found but did not prove is the answer, without the enumeration that might
    prove it.
    """
    if why_not_applicable(setup):
        return None
    cache = (cache if cache is not None else Cache()).bind(setup)
    try:
        return _search(setup, cache, prove)
    except SearchTimeout:
        return None


def _search(setup: BalanceSetup, cache: Cache, prove: bool) -> SearchResult | None:
    if setup.chunks > 1 and not boundary_search.why_not_applicable(setup):
        bounded = _bounded(setup, boundary_search.search(setup, cache))
        if len(setup.kinds) != 1 or (bounded is not None and (bounded.proven or
                                                             (not prove and bounded.counts is not None))):
            return bounded
        # one kind: the enumeration may prove what the boundary search's budgets left open
        enumerated = enumeration.search(setup, cache)
        return enumerated if bounded is None or (enumerated is not None and enumerated.proven) else bounded
    if len(setup.kinds) != 1:
        counts, value = segments.search(setup, cache)
        return SearchResult(True, None, None, np.inf) if counts is None else found(setup, counts, value)
    return enumeration.search(setup, cache)


def _bounded(setup: BalanceSetup, answer) -> SearchResult | None:
    """:func:`~sappkit.balancer.exact.boundary.search.search`'s answer as a result."""
    if answer is None:
        return None
    proven, counts, _, lower = answer
    return SearchResult(proven, None, None, lower) if counts is None else found(setup, counts, lower)


def least_memory(setup: BalanceSetup, *, cache: Cache | None = None) -> np.ndarray | None:
    """The placement whose largest stage memory is least, time ignored; None when no search applies or the one
    that does stops past its budgets or the cache's deadline."""
    if why_not_applicable(setup):
        return None
    cache = (cache if cache is not None else Cache()).bind(setup)
    try:
        if len(setup.kinds) == 1:
            return enumeration.least_memory(setup, cache)
        return (segments.least_memory(setup, cache)[0] if setup.chunks == 1
                else boundary_search.least_memory(setup, cache))
    except SearchTimeout:
        return None
