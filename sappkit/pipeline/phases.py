"""The phases of an op in a step order: a forward, a whole backward, or the backward's two halves.

A whole backward is an input-gradient pass and a weight-gradient pass run as
one; schedules that split it run the input pass (which the stage before
waits for) and the weight pass (which only fills bubbles) apart.
"""

__all__ = ["FORWARD", "BACKWARD", "BACKWARD_INPUT", "BACKWARD_WEIGHT", "HOLDS"]

FORWARD = 0
BACKWARD = 1
BACKWARD_INPUT = 2
BACKWARD_WEIGHT = 3
#: How each phase changes the units a cell holds: a forward takes one, the pass ending its backward frees it.
HOLDS = (1, -1, 0, -1)
