"""The integer program: any objective and constraint the balancer states, solved by PuLP (HiGHS or CBC),
for the cases the exact searches do not cover or do not prove, and the step objective's lower bound.
"""

from .program import BalanceModel
from .solver import SolverOptions, Status, solve

__all__ = ["BalanceModel", "SolverOptions", "Status", "solve"]
