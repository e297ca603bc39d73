"""Notebook execution time: every ``notebooks/*.ipynb`` run top to bottom as ``sappkit report`` and nbval run them.

DESIGN.md's target is all notebooks executed in under 90 s in CI. Each run
starts a fresh kernel (included in the time, as in nbval); one row per
notebook, then the total. Each notebook runs once with ``--quick``, else
three times (median).
"""

from __future__ import annotations

import statistics
import time

from ..report import default_notebooks, execute_notebook
from . import row

TARGET_TOTAL_MS = 90_000.0


def measure(quick: bool) -> list[dict]:
    notebooks = default_notebooks()
    repeats = 1 if quick else 3
    rows, total = [], 0.0
    for path in notebooks:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            nb = execute_notebook(path)
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        total += seconds
        code_cells = sum(cell.cell_type == "code" for cell in nb.cells)
        rows.append(row("notebook", path.name, seconds, None, f"{code_cells} code cells, kernel start included"))
    rows.append(row("notebooks", "all, executed one after another", total, TARGET_TOTAL_MS,
                    f"{len(notebooks)} notebooks, sum of medians over {repeats} run(s)"))
    return rows
