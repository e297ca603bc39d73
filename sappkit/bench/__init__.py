"""``sappkit bench``: one table of every performance target the README's "Performance" states.

Each module here measures one model and exposes ``measure(quick: bool) ->
list[dict]`` with rows of :data:`COLUMNS`. It is a benchmark, not a test:
a miss is reported, never raised. ``quick`` runs fewer cases and repeats,
and leaves out the modules of :data:`SLOW` unless they are asked for by
name, so that the whole quick table takes well under a minute.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from importlib import import_module

import pandas as pd

__all__ = ["COLUMNS", "MODULES", "SLOW", "median_seconds", "row", "run"]

COLUMNS = ("benchmark", "case", "median_ms", "target_ms", "passed", "detail")
#: Bench modules under ``sappkit.bench``, in the order the table lists them.
MODULES = (
    "simulate",
    "alternatives",
    "recompute",
    "notebooks",
    "fit",
    "balance",
    "step",
    "strategy",
    "search",
)
#: Modules that take minutes however few their cases (every notebook executed): left out of a quick run.
SLOW = ("notebooks", "search")


def median_seconds(function: Callable[[], object], *, repeats: int = 5) -> float:
    """Median wall time of ``function()`` over ``repeats`` calls after one warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(benchmark: str, case: str, seconds: float, target_ms: float | None, detail: str = "") -> dict:
    """One table row; ``passed`` is None when the benchmark has no target."""
    median_ms = 1000 * seconds
    passed = None if target_ms is None else median_ms < target_ms
    return dict(benchmark=benchmark, case=case, median_ms=round(median_ms, 2),
                target_ms=target_ms, passed=passed, detail=detail)


def run(*, quick: bool = False, only: tuple[str, ...] = (),
        progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Measure every bench module (or those named in ``only``) and return the table.

    ``progress`` is told, before each module, which one starts (e.g. a line on stderr).
    """
    names = [name for name in MODULES if name in only] if only else list(MODULES)
    rows = []
    for number, name in enumerate(names, start=1):
        skipped = quick and not only and name in SLOW
        if progress is not None:
            progress(f"bench {number}/{len(names)}: {name}" + (" (not run with --quick)" if skipped else ""))
        if skipped:
            rows.append(dict(benchmark=name, case="not run with --quick", median_ms=float("nan"), target_ms=None,
                             passed=None, detail=f"sappkit bench --only {name} runs it"))
            continue
        rows.extend(import_module(f".{name}", __name__).measure(quick))
    return pd.DataFrame(rows, columns=list(COLUMNS))
