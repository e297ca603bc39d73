"""What an exact search proves: a lower bound on the objective, and the placement it found with its value."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..evaluate import evaluate
from ..setup import BalanceSetup

__all__ = ["SearchResult", "SearchTimeout", "found"]


class SearchTimeout(Exception):
    """The exact search ran past its deadline (``Cache.deadline``)."""


@dataclass(frozen=True)
class SearchResult:
    """What the exact search proved: a lower bound, and a placement when it found one."""

    proven: bool
    """``counts`` is optimal (or, with ``counts`` None, no placement fits)."""
    counts: np.ndarray | None
    upper: float | None
    lower: float


def found(setup: BalanceSetup, counts: np.ndarray, lower: float) -> SearchResult:
    """The result of a placement ``counts`` a search found with the lower bound ``lower``: proven where its
    ``sapp`` objective meets the bound, none where it does not fit after all."""
    evaluation = evaluate(setup, counts)
    if not evaluation.fits:
        return SearchResult(False, None, None, lower)
    upper = evaluation.sapp
    return SearchResult(bool(upper <= lower + 1e-9 * max(1.0, abs(lower))), counts, upper, float(lower))
