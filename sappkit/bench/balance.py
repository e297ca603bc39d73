"""``sappkit bench`` rows for the ILP balancer: the README's grid against SAPP's pipeline balancer's
formulation, and the bundled models' ``sapp`` and ``step`` plans.

The grid: a 96-layer, 5-option decoder (a GPT-3-175B-class table from
:func:`sappkit.estimate_layers`: hidden 12288, 96 heads, FFN 49152,
sequence 2048, TP 8 with sequence parallelism, ZeRO-1 over DP 8, bf16,
3000 MB per-stage constant), ``p = 16``, ``v`` in {1, 2, 3}, ``m`` in
{16, 64} (with ``--quick`` two of them), a 32000 MB device (an even
placement without recompute needs about 46 GB on stage 0, with full
recompute about 14 GB), objective ``sapp`` (level 1). Target: every sappkit
case proven optimal in under a second (:func:`sappkit.balance`, the whole
call).

The baseline is SAPP's pipeline balancer's integer program re-expressed here: integer
layer counts per (option, chunk, stage) without upper bounds, SAPP's
``v^2`` stage-time constraints per stage (``F(f) + B(b) + head/tail``),
its ``MAX_STAGE``/``MAX_LAST`` pair when ``m = p``, an unbounded integer
overhead per stage, and its memory rows. (With one body kind SAPP adds
no frontier or consistency rows.) It is solved by CBC with a time limit
(90 s, 2 s with ``--quick``), as SAPP solves it.

The bundled models (:data:`BUNDLED`: Llama-2-70B-class, DeepSeek-V3-class,
the vision-language model) on their intended stages, and the Llama table
deepened to 192 layers (its five options) on 8 and 16 stages of 80 GB
devices, ``v`` in {1, 2, 3}, ``m`` in {p, 2p, 4p} (with ``--quick``: Llama,
``m = 2p``, ``v`` in {1, 2}):
per case the ``sapp`` plan (solve time against the 1 s target, status,
simulated step time) and the ``step`` plan (solve time, status, simulated
step time and its difference from the ``sapp`` plan's, the proven lower
bound and its gap, how it was found). Each solve is timed once.
"""

from __future__ import annotations

import time

import pulp

from ..balancer.optimise import balance
from ..balancer.setup import BalanceSetup, make_setup
from ..balancer.ilp.solver import SolverOptions, solve
from ..demo import bundled
from ..columns import BODY, COUNT, ROLE
from ..layers import LayerTable, read_layers_json
from ..layers.configs import DeviceConfig, ParallelConfig, TransformerConfig
from ..layers.estimate import estimate_layers
from ..layers.units import format_time
from . import median_seconds, row

__all__ = ["measure", "bench_layers", "sapp_problem", "LIMIT_MB", "BUNDLED"]

LIMIT_MB = 32000.0
_TARGET_MS = 1000.0
#: The models of the second grid: (label, bundled file, body layers (None: as bundled), stages, device memory
#: in MB).
BUNDLED = (("llama2_70b", "llama2_70b.json", None, 16, 58000.0),
           ("deepseek_v3", "deepseek_v3.json", None, 16, 60000.0), ("vlm", "vlm.json", None, 8, 60000.0),
           ("llama2_70b x192", "llama2_70b.json", 192, 8, 80000.0),
           ("llama2_70b x192", "llama2_70b.json", 192, 16, 80000.0))


def bench_layers():
    """The 96-layer, 5-option table of the grid (module docstring)."""
    return estimate_layers(
        TransformerConfig(layers=96, hidden_size=12288, num_heads=96, ffn_size=49152, vocab_size=50257,
                          seq_length=2048, name="decoder"),
        parallel=ParallelConfig(micro_batch_size=1, tensor_parallel=8, sequence_parallel=True, data_parallel=8,
                                zero=1, dtype="bf16"),
        device=DeviceConfig(tflops=300.0, mfu=0.4, link_gbs=50.0, hbm_gbs=1600.0), const_mb=3000.0)


def sapp_problem(setup: BalanceSetup) -> tuple[pulp.LpProblem, dict]:
    """SAPP's pipeline balancer's formulation of a one-body-kind instance, objective ``sapp`` (module
    docstring), and its layer variables."""
    p, v, m = setup.stages, setup.chunks, setup.slices
    problem = pulp.LpProblem("sapp_solver", pulp.LpMinimize)
    items = range(len(setup.items))
    x = {(i, c, s): problem.add_variable(f"x_{i}_{c}_{s}", 0, None, cat="Integer")
         for i in items for c in range(v) for s in range(p)}

    def cell(values, c, s):
        return pulp.lpSum(float(values[i]) * x[i, c, s] for i in items)

    problem += pulp.lpSum(x.values()) == int(setup.counts[0])
    for c, s in setup.cells:
        if (c, s) not in setup.reserved:
            problem += pulp.lpSum(x[i, c, s] for i in items) >= 1
    total = problem.add_variable("total", 0, None)
    problem += total >= pulp.lpSum(cell(setup.forward + setup.backward, c, s) for c in range(v) for s in range(p))
    fixed_f, fixed_b = setup.fixed_forward, setup.fixed_backward
    for s in range(p):
        overhead = 0
        if v > 1 and m != p:
            overhead = problem.add_variable(f"overhead_{s}", 0, None, cat="Integer")
            problem += overhead >= pulp.lpSum(f * (cell(setup.activation, a, s) - cell(setup.activation, b, s))
                                              for f, a, b in setup.overhead_terms(s))
        fixed = sum(f.param_mb + f.activation_mb * setup.in_flight[f.chunk, f.stage] for f in setup.fixed
                    if f.stage == s)
        problem += setup.memory_mb >= pulp.lpSum(cell(setup.param, c, s) + float(setup.in_flight[c, s])
                                                 * cell(setup.activation, c, s) for c in range(v)) \
            + overhead + float(fixed) + setup.const_mb
    goal = problem.add_variable("pipeline_total_time", 0, None)
    problem += goal
    if setup.bottleneck_split:
        first = problem.add_variable("max_stage", 0, None)
        last = problem.add_variable("max_last_chunk", 0, None)
        for s in range(p):
            for c in range(v - 1):
                problem += first >= cell(setup.backward, c, s) + float(fixed_b[c, s])
            problem += last >= cell(setup.backward, v - 1, s) + float(fixed_b[v - 1, s] + fixed_f[v - 1, s]) \
                + float(setup.last_chunk_factors[s]) / m * cell(setup.forward, v - 1, s)
        problem += last >= first
        problem += goal >= first + last
    else:
        stage_time = problem.add_variable("max_stage_time", 0, None)
        for s in range(p):
            for f in range(v):
                for b in range(v):
                    problem += stage_time >= cell(setup.forward, f, s) + cell(setup.backward, b, s) \
                        + float(fixed_f[f, s] + fixed_b[b, s])
        problem += goal >= stage_time
    return problem, x


def _grid(quick: bool):
    for chunks, micro_batches in ((1, 16), (3, 64)) if quick else ((v, m) for v in (1, 2, 3) for m in (16, 64)):
        yield "sapp", chunks, micro_batches


def _bundled_cases(quick: bool):
    """(label, file, body layers, stages, memory limit, chunks, micro-batches) of the bundled-model grid."""
    for label, name, depth, p, limit in BUNDLED:
        for v in (1, 2, 3):
            for m in (p, 2 * p, 4 * p):
                if not quick or (label == "llama2_70b" and m == 2 * p and v < 3):
                    yield label, name, depth, p, limit, v, m


def _model(name: str, depth: int | None) -> LayerTable:
    """A bundled layer table, its one body kind deepened to ``depth`` layers when given."""
    layers = read_layers_json(bundled(name))
    if depth is None:
        return layers
    frame = layers.frame.copy()
    frame.loc[frame[ROLE] == BODY, COUNT] = depth
    return LayerTable(frame, time_unit=layers.time_unit)


def measure(quick: bool) -> list[dict]:
    """The grid against SAPP's formulation (module docstring), then ``sapp`` against ``step`` on every bundled model."""
    return _sapp_grid(quick) + _bundled(quick)


def _sapp_grid(quick: bool) -> list[dict]:
    """One row per grid case for sappkit, one for SAPP's formulation under CBC."""
    layers = bench_layers()
    limit = 2.0 if quick else 90.0
    rows = []
    for objective, chunks, micro_batches in _grid(quick):
        pipeline = dict(stages=16, micro_batches=micro_batches, chunks=chunks, memory_mb=LIMIT_MB,
                        objective=objective)
        case = f"{objective} v={chunks} m={micro_batches}"
        plan = balance(layers, **pipeline)
        seconds = median_seconds(lambda: balance(layers, **pipeline), repeats=1 if quick else 3)
        setup = make_setup(layers, **pipeline)
        rows.append(row("balance", case, seconds, _TARGET_MS, f"{plan.status}, objective "
                                                              f"{format_time(plan.objective, layers.time_unit)}, "
                                                              f"{plan.method}"))
        problem, _ = sapp_problem(setup)
        result = solve(problem, SolverOptions(solver="cbc", time_limit=limit))
        worse = "" if result.objective is None else f", {result.objective / plan.objective - 1:+.1%} vs optimum"
        gap = "" if result.gap is None else f", gap {result.gap:.1%}"
        objective_text = "none" if result.objective is None else format_time(result.objective, layers.time_unit)
        rows.append(row("balance, SAPP's ILP (cbc)", case, result.seconds, None,
                        f"{result.status}, objective {objective_text}{gap}{worse}"))
    return rows


def _bundled(quick: bool) -> list[dict]:
    """Per bundled model and schedule: the ``sapp`` plan and the ``step`` plan, solve time and simulated step."""
    rows = []
    for label, name, depth, p, limit, v, m in _bundled_cases(quick):
        layers = _model(name, depth)
        case = f"{label} p={p} v={v} m={m} {limit:g} MB"
        plans = {}
        for objective in ("sapp", "step"):
            start, cpu = time.perf_counter(), time.process_time()
            plans[objective] = balance(layers, stages=p, chunks=v, micro_batches=m, memory_mb=limit,
                                       objective=objective)
            plans[objective] = (plans[objective], time.perf_counter() - start, 1000 * (time.process_time() - cpu))
        (sapp, sapp_seconds, sapp_cpu_ms), (step, step_seconds, _) = plans["sapp"], plans["step"]
        if not sapp.has_plan:
            rows.append(row("balance bundled sapp", case, sapp_seconds, _TARGET_MS, f"{sapp.status}: {sapp.message}",
                            cpu_ms=sapp_cpu_ms))
            continue
        sapp_time = sapp.simulate().step_time
        rows.append(row("balance bundled sapp", case, sapp_seconds, _TARGET_MS,
                        f"{sapp.status}, simulated step {sapp_time:.1f}, {sapp.method}", cpu_ms=sapp_cpu_ms))
        bound = "" if step.lower_bound is None else f", lower bound {step.lower_bound:.1f} (gap {step.gap:.1%})"
        rows.append(row("balance bundled step", case, step_seconds, None,
                        f"{step.status}, simulated step {step.step_time:.1f} "
                        f"({step.step_time / sapp_time - 1:+.2%} vs sapp){bound}, {step.method}"))
    return rows
