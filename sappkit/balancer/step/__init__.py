"""The ``step`` objective: a placement's exact simulated step time (:mod:`.steptime`), a local search on it
with stage exchanges, started from the ``sapp`` optimum, and a proven lower bound that gives its gap.
"""

from .bound import step_lower_bound
from .local_search import improve
from .steptime import step_timer

__all__ = ["improve", "step_lower_bound", "step_timer"]
