"""The fifth question: which parallel strategy to run at all (t, p, v, dp, cp, ep, micro-batch, schedule, ZeRO).

A :class:`Strategy` names one; :func:`evaluate_strategy` prices it end to end
(the layer table compiled once per shape, the placement, the simulated step
and what it cannot overlap); :func:`validate` holds the performance model
against published runs; :func:`search_strategies` (the ``search`` room)
searches every strategy a trainer accepts for the fastest.
"""

from .compiled import CompiledShape, compile_shape
from .config import Strategy
from .evaluate import PLACEMENTS, evaluate_strategy
from .result import StrategyEvaluation
from .search import StrategySearch, search_strategies
from .validation import Validation, published_runs, validate

__all__ = ["Strategy", "evaluate_strategy", "StrategyEvaluation", "PLACEMENTS", "compile_shape", "CompiledShape",
           "validate", "Validation", "published_runs", "search_strategies", "StrategySearch"]
