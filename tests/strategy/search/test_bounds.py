"""The search's bounds are bounds: the schedule properties they stand on hold on the orders, and no evaluated or
balanced placement beats them on memory or time, under any recompute option."""

import numpy as np
import pandas as pd
import pulp
import pytest

from sappkit import TransformerConfig
from sappkit.balancer import balance, even_plan
from sappkit.columns import BACKWARD_TIME, BODY, FORWARD_TIME, KIND, OPTION, PARAM_MB, SAPP_OPTIONS
from sappkit.errors import InputError
from sappkit.hardware import Cluster
from sappkit.pipeline.events import step_plan
from sappkit.pipeline.memory_events import memory_events
from sappkit.pipeline.phases import BACKWARD, BACKWARD_INPUT, FORWARD
from sappkit.pipeline.schedules import check_pipeline, in_flight_counts
from sappkit.strategy.search.bounds import DRAINED, SIMULTANEOUS, _least_time, flight_counts
from sappkit.strategy.search.space import SEARCHED_SCHEDULES, enumerate_strategies
from sappkit.strategy.search.shapes import SHAPE_DIMENSIONS
from sappkit.strategy.config import Strategy
from sappkit.strategy.search.tasks import STRATEGY_FIELDS, Setting, _held, balanced_pass, bound, price, strategy_of
from sappkit.strategy.step import price_plan, price_single_stage
from sappkit.layers.comm import boundary_ms

GPT = TransformerConfig(layers=12, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048, vocab_size=51200)
MOE = TransformerConfig(layers=8, dense_layers=2, hidden_size=1024, num_heads=8, ffn_size=4096, experts=8, top_k=2,
                        expert_ffn_size=1024, seq_length=2048, vocab_size=32000, gated_mlp=True, dropout=False)


def _shapes():
    """Pipeline shapes of every searched schedule on a grid, as the search lays them out."""
    for schedule in SEARCHED_SCHEDULES:
        for p in range(2, 7):
            for v in range(1, 4):
                for m in range(1, 3 * p + 1):
                    try:
                        check_pipeline(schedule, p, m, v)
                    except InputError:
                        continue
                    yield schedule, p, v, m


def test_every_stage_starts_with_the_first_forward_through_its_chunk0_cell():
    for schedule, p, v, m in _shapes():
        plan = step_plan(schedule, p, m, v, 1, False)
        starts = np.cumsum([0] + [len(ops) for ops in plan.stage_ops])[:-1]
        assert (plan.phase[starts] == FORWARD).all() and (plan.position[starts] == np.arange(p)).all()


def test_drained_schedules_end_each_stage_with_a_gradient_of_its_chunk0_cell():
    for schedule, p, v, m in _shapes():
        plan = step_plan(schedule, p, m, v, 1, False)
        ends = np.cumsum([len(ops) for ops in plan.stage_ops]) - 1
        drained = np.isin(plan.phase[ends], (BACKWARD, BACKWARD_INPUT)) & (plan.position[ends] == np.arange(p))
        assert drained.all() or schedule not in DRAINED, (schedule, p, v, m)


def test_simultaneous_schedules_hold_every_cells_count_at_one_event():
    for schedule, p, v, m in _shapes():
        if schedule not in SIMULTANEOUS:
            continue
        counts = in_flight_counts(schedule, p, m, v)
        for s, events in enumerate(memory_events(schedule, p, m, v)):
            assert (events.held >= counts[:, s]).all(axis=1).any(), (schedule, p, v, m, s)


def test_zero_bubble_interleaved_cells_hold_at_least_what_the_bounds_count():
    for schedule, p, v, m in _shapes():
        if schedule == "zb_interleaved":
            assert (in_flight_counts(schedule, p, m, v) >= flight_counts(schedule, p, v, m)).all(), (p, v, m)


def test_the_knapsack_dual_never_exceeds_the_linear_program(rng):
    for _ in range(30):
        kinds, options = rng.integers(1, 4), 5
        tau, mu = rng.uniform(1, 10, (1, kinds, options)), rng.uniform(1, 10, (1, kinds, options))
        counts = rng.integers(1, 6, kinds).astype(float)
        budget = np.array([float((mu.min(axis=2) * counts).sum() + rng.uniform(0, 20))])
        problem = pulp.LpProblem("knapsack", pulp.LpMinimize)
        n = {(k, o): problem.add_variable(f"n_{k}_{o}", 0) for k in range(kinds) for o in range(options)}
        problem += pulp.lpSum(tau[0, k, o] * x for (k, o), x in n.items())
        problem += pulp.lpSum(mu[0, k, o] * x for (k, o), x in n.items()) <= budget[0]
        for k in range(kinds):
            problem += pulp.lpSum(n[k, o] for o in range(options)) == counts[k]
        problem.solve(pulp.HiGHS(msg=False))
        dual = _least_time(0.0, tau, mu, counts, budget)[0]
        assert dual == pytest.approx(pulp.value(problem.objective), rel=1e-6)


def _priced_strategies(model, devices, memory_mb, per_schedule):
    """``per_schedule`` strategies of every schedule with their bounds, each priced evenly under every option and
    balanced."""
    cluster = Cluster.preset("dgx-a100")
    setting = Setting(models=(model,), cluster=cluster, global_batch=32, memory_mb=memory_mb, dtype="bf16")
    space = enumerate_strategies([model], devices=devices, devices_per_node=8, global_batch=32,
                                 dims=dict(micro_batch_size=[1, 2], zero=[1, 3], context_parallel=[1, 2],
                                           expert_parallel=[1, 2] if model.experts else [1]))
    accepted = space[space["rule"].isna()]
    chosen = pd.concat([group.sample(min(len(group), per_schedule), random_state=1)
                        for _, group in accepted.groupby("schedule")])
    shapes = {shape: price(setting, shape) for shape in
              {tuple(row) for row in chosen[list(SHAPE_DIMENSIONS)].itertuples(index=False)}}
    ids = {shape: i for i, shape in enumerate(shapes)}
    chosen = chosen.assign(shape=[ids[tuple(row)] for row in chosen[list(SHAPE_DIMENSIONS)].itertuples(index=False)])
    costs = {ids[s]: (s, priced.costs, priced.compiled.layers.const_mb) for s, priced in shapes.items()}
    found = bound(setting, costs, chosen)
    for i, (index, row) in enumerate(chosen.iterrows()):
        task_row = (index, *(row[key] for key in STRATEGY_FIELDS))
        priced = shapes[tuple(row[list(SHAPE_DIMENSIONS)])]
        strategy = strategy_of(task_row, "bf16")
        layers = priced.compiled.table(strategy.parallel, cluster)
        even = [_even(setting, strategy, layers, option) for option in SAPP_OPTIONS]
        piped = strategy.pipeline_parallel > 1
        balanced = balanced_pass(setting, priced, task_row) if piped else None
        # the balancer's least-memory placement over every option: the memory no placement goes below
        least = balance(layers, stages=strategy.pipeline_parallel, micro_batches=strategy.micro_batches(32),
                        memory_mb=1.0, chunks=strategy.virtual_stages, schedule=strategy.schedule).memory_needed_mb \
            if piped else min(peak for peak, _, _ in even)
        yield found.memory_mb[i], found.time_ms[i], found.even_ms[i], even, balanced, least


def _even(setting, strategy, layers, option):
    """(peak memory, step, fits) of the even placement under ``option``."""
    m = strategy.micro_batches(setting.global_batch)
    if strategy.pipeline_parallel == 1:
        result = price_single_stage(layers, strategy, setting.cluster, micro_batches=m, option=option,
                                    memory_mb=setting.memory_mb)
        peak = float(result.stages["memory_mb"].max())
        return peak, result.step_time, peak <= setting.memory_mb
    plan = even_plan(layers, option=option, stages=strategy.pipeline_parallel, micro_batches=m,
                     memory_mb=setting.memory_mb, chunks=strategy.virtual_stages, schedule=strategy.schedule)
    p2p = boundary_ms(setting.models[-1], strategy.parallel, setting.cluster, strategy.pipeline_parallel)
    return float(plan.stages["memory_mb"].max()), price_plan(plan, layers, strategy, setting.cluster,
                                                            p2p_ms=p2p).step_time, plan.fits


@pytest.mark.parametrize("model, devices, memory_mb, per_schedule", [
    (GPT, 16, 5000.0, 1),
    pytest.param(GPT, 16, 5000.0, 3, marks=pytest.mark.slow),
    pytest.param(MOE, 8, 4000.0, 3, marks=pytest.mark.slow),
], ids=["gpt-quick", "gpt", "moe"])
def test_no_placement_beats_the_bounds(model, devices, memory_mb, per_schedule):
    checked = 0
    for memory, time, even_bounds, even, balanced, least in _priced_strategies(model, devices, memory_mb,
                                                                               per_schedule):
        assert memory <= least * (1 + 1e-9)
        for (peak, step, fits), even_bound in zip(even, even_bounds):
            assert memory <= peak * (1 + 1e-9)
            if fits:
                assert time <= step * (1 + 1e-9) and even_bound <= step * (1 + 1e-9)
                checked += 1
        if balanced is not None and np.isfinite(balanced.step_ms):
            assert memory <= balanced.peak_memory_mb * (1 + 1e-9) and time <= balanced.step_ms * (1 + 1e-9)
    assert checked >= 7 * per_schedule


@pytest.mark.parametrize("zero, reshard", [(1, True), (3, True), (3, False)])
@pytest.mark.parametrize("model, ep", [(GPT, 1), (MOE, 2)], ids=["gpt", "moe"])
def test_the_bounds_read_the_strategys_own_table(model, ep, zero, reshard):
    """The times and the parameter memory the bounds read at a (dp, ZeRO, resharding) are those of the strategy's
    own table, ZeRO 3's per-micro-batch gathers (with resharding, again in the backward) and the weights kept
    gathered without resharding included."""
    cluster = Cluster.preset("dgx-a100")
    setting = Setting(models=(model,), cluster=cluster, global_batch=32, memory_mb=1e5, dtype="bf16")
    shape = (2, 1, ep, 1, 2, True, False, "ring")
    priced = price(setting, shape)
    summary, params, ends = _held(setting, shape, priced.costs, 16, zero, reshard)
    strategy = Strategy(tensor_parallel=2, data_parallel=16, expert_parallel=ep, micro_batch_size=2, zero=zero,
                        reshard_after_forward=reshard)
    table = priced.compiled.table(strategy.parallel, cluster)
    kinds = list(table.body_kinds)
    for _, row in table.frame[table.frame["role"] == BODY].iterrows():
        at = kinds.index(row[KIND]), SAPP_OPTIONS.index(row[OPTION])
        assert (summary.forward[at], summary.backward[at]) == (row[FORWARD_TIME], row[BACKWARD_TIME])
        assert params[at[0]] == pytest.approx(row[PARAM_MB], rel=1e-12)
    for end, mb, row in ((summary.head, ends[0], table.head), (summary.tail, ends[1], table.tail)):
        assert end[:2] == (row[FORWARD_TIME], row[BACKWARD_TIME])
        assert mb - end[3] == pytest.approx(row[PARAM_MB], rel=1e-12)
    # ZeRO 3's gathers outrun the compute on these links: the times grow, the more with resharding
    assert (summary.backward > priced.costs.backward).any() == (zero == 3)
