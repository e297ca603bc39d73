"""Memory fit and dry-run planner speed: the issue asks for milliseconds.

Targets (sappkit's own): a fit of the bundled dry runs under 50 ms (it drives
the notebook's dashboard, through :func:`sappkit.widgets.fit.refit`), a plan
for 16 stages and 96 layers under 100 ms; the other rows give the
neighbouring sizes and the readers.
"""

from __future__ import annotations

from ..demo import bundled
from ..memfit.dryruns import read_dryrun_csv, read_dryrun_yaml
from ..memfit.fit import fit_memory
from ..memfit.planner import plan_dryruns
from ..widgets.fit import refit
from . import median_seconds, row

_OPTIONS = ("none", "selective", "comm", "both", "full")


def measure(quick: bool) -> list[dict]:
    repeats = 3 if quick else 15
    rows = []
    for name, target in (("llama2_70b", 50.0), ("deepseek_v3", None), ("vlm", None))[: 1 if quick else 3]:
        observed = read_dryrun_csv(bundled(f"{name}_dryruns.csv"))
        seconds = median_seconds(lambda: fit_memory(observed), repeats=repeats)
        fit = fit_memory(observed)
        rows.append(row("fit_memory", f"{name}_dryruns.csv", seconds, target,
                        f"{len(fit.params)} parameters from {len(fit.observations)} rows"))
    observed = read_dryrun_csv(bundled("llama2_70b_dryruns.csv"))
    seconds = median_seconds(lambda: refit(observed, options=("none", "selective", "full")), repeats=repeats)
    rows.append(row("refit", "dashboard callback, 3 of 5 options", seconds, None, "llama2_70b_dryruns.csv"))
    seconds = median_seconds(lambda: read_dryrun_yaml(bundled("llama2_70b_dryrun.yaml")), repeats=repeats)
    rows.append(row("read_dryrun_yaml", "llama2_70b_dryrun.yaml", seconds, None, "16 stages, one round"))
    cases = ((16, 96, _OPTIONS, 100.0), (16, 96, ("none", "selective", "full"), None), (4, 32, _OPTIONS, None),
             (32, 128, _OPTIONS, None))
    for p, layers, options, target in cases[:1] if quick else cases:
        seconds = median_seconds(lambda: plan_dryruns(p, layers, options), repeats=repeats)
        plan = plan_dryruns(p, layers, options)
        rows.append(row("plan_dryruns", f"p={p} layers={layers} {len(options)} options", seconds, target,
                        f"{plan.runs} run(s), condition number {plan.condition_number:.3g}"))
    return rows
