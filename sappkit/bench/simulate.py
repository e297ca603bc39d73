"""Simulator speed: one simulated step of the bundled Llama-2-70B-class model, evenly placed.

The README's target is p = 16, v = 3, m = 64 under 50 ms (the original tool's
simulator steps p = 16, v = 1, m = 64 in about 15 ms); the other rows give
the neighbouring schedules and the glue that builds the costs.
"""

from __future__ import annotations

from ..demo import DEMO_LAYERS, bundled
from ..layers import read_layers_json
from ..pipeline.costs import cell_costs, even_assignment
from ..pipeline.simulator import simulate
from . import median_seconds, row

#: (schedule, stages, chunks, micro-batches, target in ms or None).
_CASES = (
    ("interleaved", 16, 3, 64, 50.0),
    ("1f1b", 16, 1, 64, None),
    ("dualpipev", 16, 2, 64, None),
    ("interleaved", 16, 2, 16, None),
)


def measure(quick: bool) -> list[dict]:
    layers = read_layers_json(bundled(DEMO_LAYERS))
    repeats = 3 if quick else 15
    rows = []
    for schedule, p, v, m, target in _CASES[:2] if quick else _CASES:
        assignment = even_assignment(layers, stages=p, chunks=v, schedule=schedule, option="selective")
        costs = cell_costs(layers, assignment, stages=p, chunks=v, schedule=schedule)
        seconds = median_seconds(lambda: simulate(costs, schedule=schedule, micro_batches=m), repeats=repeats)
        ops = 2 * p * v * m
        rows.append(row("simulate", f"{schedule} p={p} v={v} m={m}", seconds, target, f"{ops} ops"))
    assignment = even_assignment(layers, stages=16, chunks=3, schedule="interleaved", option="selective")
    seconds = median_seconds(lambda: cell_costs(layers, assignment, stages=16, chunks=3, schedule="interleaved"),
                             repeats=repeats)
    rows.append(row("cell_costs", "llama2_70b p=16 v=3", seconds, None, f"{len(assignment)} assignment rows"))
    return rows
