"""The fifth question: which parallel strategy to run at all (t, p, v, dp, cp, ep, micro-batch, schedule, ZeRO).

A :class:`Strategy` names one; the models above price and search them.
"""

from .config import Strategy

__all__ = ["Strategy"]
