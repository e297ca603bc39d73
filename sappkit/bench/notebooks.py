"""Notebook execution time: every ``notebooks/*.ipynb`` run top to bottom as ``sappkit report`` and nbval run them.

The target (docs/performance.md) is all notebooks executed in under
:data:`TARGET_TOTAL_CPU_MS` of CPU, this process and the kernels together: a
target of CPU, since their wall time on two loaded cores measures the load
(all seven took 95 CPU seconds at a load of 2, 174 CPU seconds and 607 s of wall
time at a load of 9). A row's
``cpu_s`` is one run's CPU (the median run's). Each run starts a fresh kernel
(included in the time, as in nbval); one row per notebook, then the total.
Each notebook runs once with ``--quick``, else three times (median). A row's
note gives the longest time any cell waited beyond the kernel's work on it
(:func:`sappkit.report.execution.idle_waits`; the messages' way there and
back, or a stall).
"""

from __future__ import annotations

import statistics
import time

from ..report.execution import execute_notebook, idle_waits
from ..report import default_notebooks
from . import cpu_seconds, row

#: All notebooks' CPU, this process and the kernels, ms.
TARGET_TOTAL_CPU_MS = 200_000.0


def measure(quick: bool) -> list[dict]:
    notebooks = default_notebooks()
    repeats = 1 if quick else 3
    rows, total, total_cpu = [], 0.0, 0.0
    for path in notebooks:
        times, cpus, waited = [], [], 0.0
        for _ in range(repeats):
            start, cpu = time.perf_counter(), cpu_seconds()
            nb = execute_notebook(path)
            times.append(time.perf_counter() - start)
            cpus.append(cpu_seconds() - cpu)
            waited = max([waited, *idle_waits(nb).values()])
        seconds, cpu = statistics.median(times), statistics.median(cpus)
        total, total_cpu = total + seconds, total_cpu + cpu
        code_cells = sum(cell.cell_type == "code" for cell in nb.cells)
        rows.append(row("notebook", path.name, seconds, None, f"{code_cells} code cells, kernel start included, "
                                                              f"longest idle wait {waited:.2f} s", cpu_s=cpu))
    rows.append(row("notebooks", "all, executed one after another", total, TARGET_TOTAL_CPU_MS,
                    f"{len(notebooks)} notebooks, sum of medians over {repeats} run(s)", cpu_s=total_cpu,
                    cpu_ms=1000 * total_cpu))
    return rows
