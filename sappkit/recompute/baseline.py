"""What the recompute chooser's time saved is measured against: the baseline a user would otherwise run.

The partition's configured options where they fit every stage at the device
capacity (as the original tool measures it); else every layer at the fastest
single option on offer that fits every stage (what a runtime running one
recompute for all would use: ``selective`` everywhere where it fits, not
``full``); else, where no single option fits, every layer at its most
recomputed option on offer (the least activation memory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..columns import KIND, MEMORY_MB, TIME
from .partition import CONFIGURED

__all__ = ["Baseline", "baseline_of"]


@dataclass(frozen=True)
class Baseline:
    """What time saved is measured against: each body layer's option, and that in words.

    Attributes
    ----------
    name : {"configured", "fastest single", "most recomputed"}
        The partition's configured options (they fit); else every layer at
        the fastest single option on offer that fits every stage (what a
        runtime would otherwise run); else, when none does, every layer at its
        most recomputed option on offer.
    options : tuple of str
        Each body layer's option, model order.
    text : str
        The baseline in words, to follow "against ... with": ``the configured
        recompute (every layer full)``, ``every layer at full (the configured
        none does not fit)``.
    """

    name: str
    options: tuple[str, ...]
    text: str


def baseline_of(pricing) -> Baseline:
    """The baseline of a :class:`~sappkit.recompute.pricing.Pricing` at its capacity (module docstring)."""
    configured = tuple(pricing.body[CONFIGURED])
    as_configured = "the configured recompute" + (f", every layer {_uniform(configured)}," if _uniform(configured)
                                                  else "")
    if _fits(pricing, configured):
        return Baseline("configured", configured, as_configured.rstrip(","))
    kinds = list(pricing.body[KIND])
    single = [option for option in pricing.offered[kinds[0]] if all(option in pricing.offered[k] for k in kinds)]
    fitting = [(pricing._stage_values([option] * len(kinds))[TIME].sum(), option) for option in single
               if _fits(pricing, (option,) * len(kinds))]
    if fitting:
        fastest = min(fitting)[1]
        return Baseline("fastest single", (fastest,) * len(kinds),
                        f"every layer at {fastest}, the fastest single option that fits ({as_configured} does not "
                        "fit)")
    most = tuple(pricing.most_recomputed[kind] for kind in kinds)
    every = _uniform(most)
    return Baseline("most recomputed", most, (f"every layer at {every}" if every else
                                              "every layer at its most recomputed option")
                    + f" ({as_configured} does not fit)")


def _fits(pricing, options: Sequence[str]) -> bool:
    return bool((pricing._stage_values(options)[MEMORY_MB] <= pricing.memory_mb).all())


def _uniform(options: Sequence[str]) -> str | None:
    """The option every layer runs, or None when they differ."""
    distinct = set(options)
    return distinct.pop() if len(distinct) == 1 else None
