"""The pipeline model: micro-batches in flight per schedule, cell costs and stage memory, the step simulator.

Answers what a placement costs per stage and how a schedule actually runs
it (timeline, memory over time, step time, bubbles).
"""

from .costs import cell_costs, even_assignment, stage_memory
from .schedules import forward_in_backward, in_flight
from .simulator import Simulation, simulate

__all__ = ["in_flight", "forward_in_backward", "even_assignment", "cell_costs", "stage_memory", "simulate",
           "Simulation"]
