"""``sappkit bench``: one table of every performance target the README's "Performance" states.

Each module here measures one model and exposes ``measure(quick: bool) ->
list[dict]`` with rows of :data:`COLUMNS`. It is a benchmark, not a test:
a miss is reported, never raised. ``quick`` runs fewer cases and repeats,
and leaves out the modules of :data:`SLOW` unless they are asked for by
name, so that the whole quick table takes under a minute of CPU (27 to 42 s measured, docs/performance.md).

Wall times on a shared machine say little alone, so every row also gives
``cpu_s``: the CPU seconds (user + system) that every process spent on the
row's work (this one, the process pool's workers and the notebooks' kernels,
whether still running or already exited; :func:`cpu_seconds`), measured from
the previous row (or its module's start) to this one, warm-up and every
repeat included unless the module states its own; and ``load``, the
machine's one-minute load average when the row was made. A target is of CPU
time per call, for the same reason (:func:`row`).
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable
from importlib import import_module

import pandas as pd

__all__ = ["COLUMNS", "MODULES", "SLOW", "median_seconds", "row", "run", "cpu_seconds"]

COLUMNS = ("benchmark", "case", "median_ms", "cpu_s", "target_ms", "passed", "load", "detail")
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
    "startup",
    "inputs",
)
#: Modules that take minutes however few their cases (every notebook executed): left out of a quick run.
SLOW = ("notebooks", "search", "inputs")


#: The median CPU milliseconds per call that the latest :func:`median_seconds` measured, until a row takes it.
_call_cpu_ms: list[float | None] = [None]


def median_seconds(function: Callable[[], object], *, repeats: int = 5) -> float:
    """Median wall time of ``function()`` over ``repeats`` calls after one warm-up call.

    It also measures each call's CPU (this process's, :func:`time.process_time`) and keeps the median for the
    next :func:`row`, whose target it is compared with."""
    function()
    times, cpus = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        function()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    _call_cpu_ms[0] = 1000 * statistics.median(cpus)
    return statistics.median(times)


def cpu_seconds() -> float:
    """CPU seconds so far of this process and of every process under it: those exited and waited for (their
    rusage) and those still running, read from ``/proc/<pid>/stat`` (Linux; elsewhere only the exited ones)."""
    own, exited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + exited.ru_utime + exited.ru_stime + _live_children_seconds()


def _live_children_seconds() -> float:
    """user + system CPU seconds of the running descendants of this process, from ``/proc``."""
    parents, ticks = {}, {}
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return 0.0
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()  # the command name may hold spaces
        except OSError:  # gone since the listing
            continue
        parents[int(pid)] = int(fields[1])
        ticks[int(pid)] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    under, found = {os.getpid()}, True
    while found:
        found = False
        for pid, parent in parents.items():
            if parent in under and pid not in under:
                under.add(pid)
                found = True
    return sum(ticks[pid] for pid in under - {os.getpid()}) / os.sysconf("SC_CLK_TCK")


#: CPU seconds of every process when the last row was made (reset by :func:`run` per module).
_last_cpu = [0.0]


def row(benchmark: str, case: str, seconds: float, target_ms: float | None, detail: str = "",
        cpu_s: float | None = None, cpu_ms: float | None = None) -> dict:
    """One table row; ``passed`` is None when the benchmark has no target; ``cpu_s`` (default: every process's
    CPU since the previous row, module docstring) is the module's own when it measures one.

    ``target_ms`` is compared with ``cpu_ms``, the CPU milliseconds one call costs (by default the median the
    latest :func:`median_seconds` measured), since a loaded machine's wall time measures its load; the detail
    says so. Without one it is compared with ``median_ms``: the step rows measure it in CPU, the search's on
    a process pool in wall time (its target is the pool's speed-up)."""
    median_ms = 1000 * seconds
    if cpu_ms is None:
        cpu_ms, _call_cpu_ms[0] = _call_cpu_ms[0], None
    measured = median_ms if cpu_ms is None else cpu_ms
    passed = None if target_ms is None else measured < target_ms
    if cpu_ms is not None and target_ms is not None:
        detail = f"{detail}; target on CPU: {cpu_ms:,.1f} ms of CPU against {target_ms:,.0f}"
    now = cpu_seconds()
    spent = now - _last_cpu[0] if cpu_s is None else cpu_s
    _last_cpu[0] = now
    return dict(benchmark=benchmark, case=case, median_ms=round(median_ms, 2), cpu_s=round(spent, 2),
                target_ms=target_ms, passed=passed, load=round(os.getloadavg()[0], 1), detail=detail)


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
        _last_cpu[0], _call_cpu_ms[0] = cpu_seconds(), None
        rows.extend(import_module(f".{name}", __name__).measure(quick))
    return pd.DataFrame(rows, columns=list(COLUMNS))
