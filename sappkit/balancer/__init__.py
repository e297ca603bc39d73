"""The balancer: how many layers, under which recompute, go on each stage and chunk.

Minimises the step time under a memory limit, by an exact combinatorial
search with an integer program (PuLP) as fall-back, and for the simulated
step time itself a local search on its exact value; plans, hand-written
offsets, memory sweeps and plan comparisons.
"""

from .optimise import balance
from .plan import Plan, plan_from_offsets
from .ilp.solver import SolverOptions
from .views import compare_plans, even_plan, sweep_memory

__all__ = ["SolverOptions", "Plan", "plan_from_offsets", "balance", "sweep_memory", "compare_plans", "even_plan"]
