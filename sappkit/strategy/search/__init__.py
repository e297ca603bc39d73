"""The strategy search: which parallel strategy to run, over every one a trainer accepts, on any executor.

In the order data flows: the strategies and the trainers' rules (``space``),
a shape's compiled table and its summary (``shapes``), closed-form bounds on
any placement (``bounds``) and on the even placement (``even_bounds``), what
the workers run (``tasks``), the branch and bound on an executor
(``engine``), the result (``result``) and :func:`search_strategies`
(``strategies``).
"""

from .result import StrategySearch
from .space import enumerate_strategies
from .strategies import search_strategies

__all__ = ["search_strategies", "StrategySearch", "enumerate_strategies"]
