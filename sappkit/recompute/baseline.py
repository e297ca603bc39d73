"""What the recompute chooser's time saved is measured against: the baseline a user would otherwise run.

The partition's configured options where they fit every stage at the device
capacity (as the original tool measures it); else every layer at the fastest
single option on offer that fits every stage (what a runtime running one
recompute for all would use: ``selective`` everywhere where it fits, not
``full``); else, where no single option fits, every layer at its most
recomputed option on offer (the least activation memory).

Where the configured options fit but a single option that fits every stage
runs faster (every layer ``full`` configured, ``selective`` fitting), the
configured recompute stays the baseline, as the original tool measures it,
and :attr:`Baseline.fastest_single` names that option: a choice is then
stated against both.
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
    fastest_single : str or None
        For the configured baseline: the fastest single option that fits
        every stage where it runs faster than the configured options (their
        stage times summed), else None.
    """

    name: str
    options: tuple[str, ...]
    text: str
    fastest_single: str | None = None


def baseline_of(pricing) -> Baseline:
    """The baseline of a :class:`~sappkit.recompute.pricing.Pricing` at its capacity (module docstring)."""
    configured = tuple(pricing.body[CONFIGURED])
    as_configured = "the configured recompute" + (f", every layer {_uniform(configured)}," if _uniform(configured)
                                                  else "")
    kinds = list(pricing.body[KIND])
    single = [option for option in pricing.offered[kinds[0]] if all(option in pricing.offered[k] for k in kinds)]
    fitting = [(pricing._stage_values([option] * len(kinds))[TIME].sum(), option) for option in single
               if _fits(pricing, (option,) * len(kinds))]
    time, fastest = min(fitting) if fitting else (float("inf"), None)
    if _fits(pricing, configured):
        faster = time < pricing._stage_values(configured)[TIME].sum() * (1 - 1e-12)  # float noise is no faster
        return Baseline("configured", configured, as_configured.rstrip(","), fastest if faster else None)
    if fastest is not None:
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
