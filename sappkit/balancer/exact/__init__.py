"""The exact searches: the proven-optimal placement for the ``sapp`` objective (levels 0 and 1), or proof
that none fits; where none applies, or a budget stops one, the integer program (:mod:`..ilp`) runs.

:func:`search` and :func:`least_memory` pick the search that covers a set-up (:mod:`.route`):

- **one body kind** (:mod:`.enumeration`): per stage, every product of its cells' Pareto-front mixes under a
  cap on the stage value, then a DP over stages on the layer total. It alone keeps every distinct mix where a
  chunk's memory falls as it holds more (DualPipeV's second chunk under SAPP's overhead, without the working
  set), and it proves what the boundary search leaves open past its budgets;
- **several kinds on one chunk** (:mod:`.segments`): a stage holds one run of the model, so the DP's state is
  the model position and a run may span any number of kind boundaries;
- **one or two kinds on more chunks** (:mod:`.boundary`): a stage's cells lie far apart in model order, so the
  DP carries where the first kind ends, with state (before or after that cell, layers of each kind); it prices
  a cell's layer count at the least backward cap that fits, which needs memory that never falls as a cell
  holds more.

Why three and not one DP over stages: a state that covers all three cases is the boundary search's with one
boundary per pair of adjacent kinds (its tables grow with the layer count to the power of the kinds) plus the
enumeration's distinct mixes where memory is not monotone. Where two searches cover a case they prove the
same optimum, so the route is a matter of speed on ``sappkit bench --only balance``: on one chunk the boundary
search also answers one or two kinds, but the run DP is 2-5 times faster on two kinds, and on one kind the
boundary search is faster on the bundled models yet slower on the 96-layer grid than the enumeration.
"""

from .cells import Cache
from .result import SearchResult
from .route import least_memory, search, why_not_applicable

__all__ = ["Cache", "SearchResult", "why_not_applicable", "search", "least_memory"]
