"""``objective="step"`` against a long randomised search on random instances (the README's 0.5 % target).

The cases (:mod:`sappkit.bench.step_cases`): 17 bench cases against a 30-second reference search, 40
held-out ones (every combination of tight and loose memory, 96 and 192 layers, ``v`` = 1 and 2, 2 and 5
options, in turn) against a 60-second one, and 30 interleaved stress cases (six families of fixed ``p``,
``m`` and ``v``, five each) against a 30-second one (120 s for three of them, and for those searched again
since: each row names its search's stored seconds). The reference searches
(:mod:`sappkit.bench.step_reference`) are stored in the bundled ``step_references.json`` (``python
data/make_step_references.py`` wrote it in about 70 CPU minutes); a case not stored there is searched live. For each case the row gives the ``step``
plan's simulated step time (its status and gap) against

- the stored reference plan, simulated again (the row says so when its step time no longer matches the
  stored one: the instances or the simulator changed, and the file must be written again);
- the ``sapp`` optimum and the fastest even plan that fits (:func:`sappkit.even_plan`), simulated.

``passed``: the ``step`` plan at most 0.5 % slower than the reference and no slower than the ``sapp``
optimum or an even plan that fits. Times are **CPU seconds** of the process (the solve is single-threaded
numpy; the machine may be shared, and CPU time does not count what others run), the solve's in
``median_ms``; two rows give the held-out solves' median and worst (targets 1 s and 3 s), the first also
how many one-chunk (1F1B) plans of all the cases are proven optimal; one row per stress family gives its
cases' mean and worst excess over their references, their mean proven gap and median solve, and two rows
the stress solves' median and worst. ``--quick`` runs the first two cases of each set.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from ..balancer.optimise import balance
from ..balancer.plan import make_plan
from ..balancer.setup import BalanceSetup
from . import row
from .step_cases import QUICK_CASES, STRESS_FAMILIES, Case, step_cases, stress_label
from .step_reference import reference_starts, search_case, search_seconds, stored_references

__all__ = ["measure", "compare", "TOLERANCE"]

#: The step plan may be this much slower than the reference.
TOLERANCE = 0.005


def _simulated(setup: BalanceSetup, counts: np.ndarray, label: str) -> float:
    return make_plan(setup, counts, status="evaluated", gap=None, solve_seconds=0.0, method=label).simulate().step_time


def compare(case: Case, stored: dict | None) -> dict:
    """The ``step`` plan of ``case`` against its reference (``stored``, else searched now), the ``sapp``
    optimum and the fastest even plan that fits: step times in ms, the solve's CPU seconds, the plan."""
    start = time.process_time()
    plan = balance(case.table, objective="step", **case.pipeline)
    solve = time.process_time() - start
    setup, sapp, even = reference_starts(case)
    found = dict(plan=plan, solve_s=solve, step_ms=plan.step_time if plan.has_plan else np.nan,
                 sapp_ms=_simulated(setup, sapp, "sapp"),
                 even_ms=min((p.simulate().step_time for p in even), default=np.inf),
                 live=stored is None)
    stored = search_case(case) if stored is None else stored
    found["reference_ms"] = _simulated(setup, np.reshape(stored["counts"], stored["shape"]), "reference")
    found["stale"] = not np.isclose(found["reference_ms"], stored["step_time_ms"], rtol=1e-9)
    return found


def _shown(benchmark: str) -> str:
    """A case's row benchmark, short enough for 100 columns: its set and memory (``"balance step stress
    tight"``), the pipeline being in the row's case."""
    if ", " not in benchmark:
        return benchmark
    kind, memory = benchmark.split(", ")[1].split()[:2]
    return f"balance step {kind} {memory}"


def _case_row(case: Case, stored: dict | None) -> dict:
    """One case's row (module docstring); ``family`` keeps the case's whole benchmark for the summaries."""
    result = _measured_row(case, stored)
    result["family"], result["benchmark"] = case.benchmark, _shown(case.benchmark)
    return result


def _measured_row(case: Case, stored: dict | None) -> dict:
    p = case.pipeline
    label = (f"p={p['stages']} v={p['chunks']} m={p['micro_batches']} L={int(case.table['count'].iloc[1])} "
             f"{int((case.table.role == 'body').sum())} options {p['memory_mb']} MB")
    found = compare(case, stored)
    plan, step = found["plan"], found["step_ms"]
    if not plan.has_plan:
        return row(case.benchmark, label, found["solve_s"], None, f"{plan.status}: {plan.message}")
    reference = found["reference_ms"]
    source = "searched now" if found["live"] else "stored" + (", STALE: rewrite it" if found["stale"] else "")
    result = row(case.benchmark, label, found["solve_s"], None,
                 f"step {step:.1f} ({plan.status}, gap {plan.gap:.1%}); {search_seconds(case, stored):g} s search "
                 f"{reference:.1f} "
                 f"({source}, {step / reference - 1:+.2%}); sapp {step / found['sapp_ms'] - 1:+.2%}; "
                 f"even {step / found['even_ms'] - 1:+.2%}; {plan.method}")
    result["excess"], result["gap"] = step / reference - 1, plan.gap
    result["passed"] = bool(step <= reference * (1 + TOLERANCE) and not found["stale"]
                            and step <= min(found["sapp_ms"], found["even_ms"]) * (1 + 1e-9))
    return result


def measure(quick: bool) -> list[dict]:
    """One row per case (module docstring), then the held-out solves' median and worst CPU time."""
    stored = stored_references()
    rows = [_case_row(case, stored.get(case.index)) for case in step_cases()
            if not quick or case.index in QUICK_CASES]
    held_out = [r["median_ms"] / 1000 for r in rows if "held-out" in r["family"]]
    one_chunk = [r for r in rows if " v=1 " in r["case"]]
    proven = sum("(optimal, gap" in r["detail"] for r in one_chunk)
    if held_out:
        rows.append(row("balance step held-out solves", f"median of {len(held_out)}", statistics.median(held_out),
                        1000.0, f"CPU time of balance(objective='step'); 1F1B plans of all cases proven optimal: "
                                f"{proven} of {len(one_chunk)}"))
        rows.append(row("balance step held-out solves", f"worst of {len(held_out)}", max(held_out), 3000.0,
                        "CPU time of balance(objective='step')"))
    return rows + _stress_rows([r for r in rows if ", stress " in r.get("family", "")])


def _stress_rows(rows: list[dict]) -> list[dict]:
    """Per stress family its cases' mean and worst excess over their references, mean proven gap and median
    solve; then every stress case's median and worst solve (targets 1 s and 3 s)."""
    summary = []
    for family in STRESS_FAMILIES:
        found = [r for r in rows if r["family"].endswith(stress_label(family)) and "excess" in r]
        if not found:
            continue
        excess = [r["excess"] for r in found]
        gaps = [r["gap"] for r in found if r["gap"] is not None]
        solves = [r["median_ms"] / 1000 for r in found]
        summary.append(row("balance step stress family", stress_label(family)[len("stress "):],
                           statistics.median(solves), None,
                           f"{len(found)} cases: vs reference mean {statistics.mean(excess):+.2%}, worst "
                           f"{max(excess):+.2%}; mean gap {statistics.mean(gaps):.1%}; worst solve "
                           f"{max(solves):.2f} s"))
    solves = [r["median_ms"] / 1000 for r in rows]
    if solves:
        summary.append(row("balance step stress solves", f"median of {len(solves)}", statistics.median(solves),
                           1000.0, "CPU time of balance(objective='step')"))
        summary.append(row("balance step stress solves", f"worst of {len(solves)}", max(solves), 3000.0,
                           "CPU time of balance(objective='step')"))
    return summary
