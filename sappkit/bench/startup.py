"""Start-up: what a command costs before it does anything, each run in a fresh interpreter.

``sappkit --help`` lists the commands without importing them, and a command
imports only its own models (``sappkit/cli.py``), so the light calls should
not pay for pandas and every model. Each case runs ``python -m sappkit ...``
three times (once with ``--quick``); ``median_ms`` is the median wall time,
``cpu_s`` the median run's CPU (the child's, read from its rusage once it
exits). The target of ``sappkit --help``, :data:`TARGET_HELP_MS`, is of CPU.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from . import cpu_seconds, row

#: (case, arguments) run as ``python -m sappkit ARGUMENTS``.
CASES = (("sappkit --help", ["--help"]),
         ("sappkit report --help", ["report", "--help"]),
         ("sappkit balance --help", ["balance", "--help"]))
#: The most CPU a light call (``--help``) may cost: an interpreter's start and the parser.
TARGET_HELP_MS = 500.0


def measure(quick: bool) -> list[dict]:
    rows = []
    for case, arguments in CASES:
        times, cpus = [], []
        for _ in range(1 if quick else 3):
            start, cpu = time.perf_counter(), cpu_seconds()
            subprocess.run([sys.executable, "-m", "sappkit", *arguments], check=True, capture_output=True)
            times.append(time.perf_counter() - start)
            cpus.append(cpu_seconds() - cpu)
        target = TARGET_HELP_MS if arguments == ["--help"] else None
        rows.append(row("start-up", case, statistics.median(times), target, "a fresh interpreter, imports "
                        "included", cpu_s=statistics.median(cpus), cpu_ms=1000 * statistics.median(cpus)))
    return rows
