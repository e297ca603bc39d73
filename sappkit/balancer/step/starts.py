"""Where the step objective's searches start: placements that fit, each with a label the plan reports.

- the ``sapp`` optimum (or the integer program's incumbent, or the exact search's placement unproven: the
  step objective asks for no proof of it);
- the fastest **even plan that fits**: the even partition with every layer on one option
  (:func:`sappkit.even_assignment`), of the options all body kinds share; so the step plan is never slower
  than the even plan a user would try first;
- with several chunks and at least ``2 p`` micro-batches, the placement whose busiest stage does the least
  work (:mod:`.least_work`), under a cap of the ``sapp`` optimum's busiest stage. It models the steady
  state, which fewer micro-batches leave short, while the stage listings it needs grow with the layers a
  stage holds.

A start that does not fit is left out.
"""

from __future__ import annotations

import numpy as np

from ...pipeline.costs import even_assignment
from ..evaluate import counts_from_assignment
from ..exact.cells import Cache
from ..setup import BalanceSetup
from .least_work import least_work
from .moves import valid
from .steptime import StepTimer

__all__ = ["start_placements"]


def start_placements(setup: BalanceSetup, timer: StepTimer, sapp: np.ndarray, sapp_label: str,
                     cache: Cache) -> dict[str, np.ndarray]:
    """The labelled starts of the module docstring that fit, the ``sapp`` optimum first."""
    starts = {sapp_label: np.asarray(sapp, dtype=int)}
    if setup.chunks > 1 and setup.slices >= 2 * setup.stages:
        work = (np.tensordot(setup.forward + setup.backward, starts[sapp_label], axes=(0, 0))
                + setup.fixed_forward + setup.fixed_backward).sum(axis=0).max()
        counts = least_work(setup, cache, float(work))
        if counts is not None and valid(setup, counts[None])[0]:
            starts["least busiest-stage work"] = counts
    shared = [option for kind, option in setup.items if kind == setup.kinds[0]
              and all((other, option) in setup.items for other in setup.kinds)]
    even = {option: counts_from_assignment(setup, even_assignment(setup.layers, stages=setup.stages,
                                                                  chunks=setup.chunks, schedule=setup.schedule,
                                                                  option=option)) for option in shared}
    even = {option: counts for option, counts in even.items() if valid(setup, counts[None])[0]}
    if even:
        option = min(even, key=lambda key: timer.time(even[key]))
        starts[f"even plan ({option})"] = even[option]
    return starts
