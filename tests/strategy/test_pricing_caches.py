"""What the fast pricing of one strategy reads once per layer table equals what the table's frame says, and
pricing strategies in any order gives each the numbers it gets alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sappkit import Strategy, evaluate_strategy
from sappkit.balancer.setup import _item_columns, make_setup
from sappkit.columns import ACTIVATION_MB, BACKWARD_TIME, BODY, FORWARD_TIME, KIND, MEMORY_ONCE_MB, OPTION, ROLE
from sappkit.models import get
from sappkit.strategy import compiled
from sappkit.strategy.evaluate import resolve_cluster
from sappkit.strategy.step import _breakdown_rows

STRATEGIES = [Strategy(tensor_parallel=8, pipeline_parallel=4, virtual_stages=5, data_parallel=32,
                       schedule="interleaved"),
              Strategy(tensor_parallel=8, pipeline_parallel=8, data_parallel=16, micro_batch_size=2),
              Strategy(tensor_parallel=4, pipeline_parallel=4, virtual_stages=2, data_parallel=64,
                       schedule="zb_interleaved", overlap_p2p_comm=False),
              Strategy(tensor_parallel=8, pipeline_parallel=4, virtual_stages=2, data_parallel=32, schedule="dualpipev",
                       zero=3)]


def _priced(strategy: Strategy, recompute: str) -> tuple:
    result = evaluate_strategy(get("llama3-70b"), strategy, cluster="dgx-h100", global_batch=1024,
                               recompute=recompute)
    return result.step_time, result.stages, result.breakdown, result.plan.assignment, result.plan.stages


def _assert_same(first: tuple, second: tuple) -> None:
    assert first[0] == second[0]
    for a, b in zip(first[1:], second[1:]):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_pricing_strategies_in_any_order_gives_each_what_it_gets_alone():
    cases = [(s, r) for s in STRATEGIES for r in ("selective", "full")]
    alone = {}
    for strategy, recompute in cases:  # each on empty caches: its tables made and read for it
        for cache in (compiled, _item_columns, _breakdown_rows):
            getattr(cache, "clear_cache", getattr(cache, "cache_clear", None))()
        alone[(strategy, recompute)] = _priced(strategy, recompute)
    order = np.random.default_rng(0).permutation(len(cases * 2))
    for i in order:  # every case twice, its table shared with the others of its shape
        strategy, recompute = (cases * 2)[i]
        _assert_same(_priced(strategy, recompute), alone[(strategy, recompute)])


@pytest.mark.parametrize("strategy", STRATEGIES[:2], ids=["interleaved", "1f1b"])
def test_a_setups_item_columns_are_the_tables_rows(strategy):
    models = (get("llama3-70b"),)
    cluster = resolve_cluster("dgx-h100")
    table = compiled.compile_shape(models, strategy.parallel, cluster, options=("none", "selective", "full"))\
        .table(strategy.parallel, cluster)
    for _ in range(2):  # read, then reused
        setup = make_setup(table, stages=strategy.pipeline_parallel, micro_batches=32, memory_mb=8e4,
                           chunks=strategy.virtual_stages, schedule=strategy.schedule)
        frame = table.frame[table.frame[ROLE] == BODY]
        assert list(setup.items) == list(zip(frame[KIND], frame[OPTION]))
        for i, (kind, option) in enumerate(setup.items):
            row = frame[(frame[KIND] == kind) & (frame[OPTION] == option)].iloc[0]
            fastest = frame.loc[frame[KIND] == kind, BACKWARD_TIME].min()
            assert (setup.forward[i], setup.backward[i], setup.recompute[i], setup.activation[i], setup.once[i]) == (
                row[FORWARD_TIME], row[BACKWARD_TIME], row[BACKWARD_TIME] - fastest, row[ACTIVATION_MB],
                row[MEMORY_ONCE_MB])
            assert setup.working[i] == table.working_set_mb(kind, option)
            assert setup.param[i] == table.param_mb(kind)
        assert setup.counts.tolist() == [table.count(kind) for kind in setup.kinds]
        with pytest.raises(ValueError):  # shared by every setup of the table: nobody writes into it
            setup.forward[0] = 0.0
