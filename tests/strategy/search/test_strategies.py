"""search_strategies: the pruned search finds what pricing every strategy finds, on any executor, and says why
it left each strategy out."""

from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, TransformerConfig
from sappkit.hardware import Cluster
from sappkit.strategy.search import engine, search_strategies
from sappkit.strategy.search.space import SEARCHED_SCHEDULES
from sappkit.strategy.search.tasks import BALANCED_CHUNKS

GPT = TransformerConfig(layers=12, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048, vocab_size=51200)
MOE = TransformerConfig(layers=8, dense_layers=2, hidden_size=1024, num_heads=8, ffn_size=4096, experts=8, top_k=2,
                        expert_ffn_size=1024, seq_length=2048, vocab_size=32000, gated_mlp=True, dropout=False)
#: Small instances (every schedule, pipelines only, memory tight enough that recompute and pruning matter).
CASES = {
    "gpt-quick": dict(model=GPT, devices=16, memory_mb=2500.0,
                      dims=dict(tensor_parallel=[2], pipeline_parallel=[2, 4], context_parallel=[1],
                                micro_batch_size=[1, 4], zero=[1], virtual_stages=[1, 2])),
    "gpt-64": dict(model=GPT, devices=64, memory_mb=2500.0,
                   dims=dict(tensor_parallel=[1, 2], pipeline_parallel=[4, 8], context_parallel=[1],
                             micro_batch_size=[1, 4], zero=[1, 3], virtual_stages=[1, 2])),
    # the settings searched since issue 33: ZeRO 3 with and without resharding, the CP kinds, TP overlap, and more
    # chunks than 4 (12 layers: p = 2, v = 6)
    "gpt-settings": dict(model=GPT, devices=16, memory_mb=2500.0,
                         dims=dict(tensor_parallel=[2], pipeline_parallel=[2], context_parallel=[2],
                                   micro_batch_size=[1], zero=[3], sequence_parallel=[True],
                                   virtual_stages=[1, 2, 6])),
    "moe-16": dict(model=MOE, devices=16, memory_mb=3000.0,
                   dims=dict(tensor_parallel=[1], pipeline_parallel=[2, 4], context_parallel=[1],
                             micro_batch_size=[1], zero=[1, 3], expert_parallel=[1, 2], virtual_stages=[1, 2])),
}
KEYS = ["label", "status", "placement", "recompute", "step_ms", "peak_memory_mb", "even_step_ms"]


def _search(case, executor, **options):
    settings = {**CASES[case], **options}
    return search_strategies(settings.pop("model"), cluster="dgx-a100", global_batch=64, balance_top=4,
                             progress=False,
                             executor=executor, **settings)


@pytest.fixture(scope="module", params=[pytest.param(case, marks=() if case in ("gpt-quick", "gpt-settings")
                                                    else pytest.mark.slow)
                                        for case in sorted(CASES)])
def searched(request):
    """(the pruned search on one thread, every strategy priced on a process pool) of one case. The pruned search
    prices rounds of 4, so that on these small instances, as on large ones, most strategies meet a threshold
    before they are priced and the bounds decide what is left out."""
    with ThreadPoolExecutor(1) as pool, pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "ROUND", 4)
        pruned = _search(request.param, pool)
    with ProcessPoolExecutor(2) as pool:
        exhaustive = _search(request.param, pool, prune=False)
    return pruned, exhaustive


def test_the_search_finds_the_exhaustive_best_and_balances_the_same_strategies(searched):
    pruned, exhaustive = searched
    assert set(pruned.frame["schedule"]) == set(SEARCHED_SCHEDULES)
    assert pruned.best["label"] == exhaustive.best["label"]
    assert pruned.best["step_ms"] == exhaustive.best["step_ms"]
    balanced = pruned.frame.index[pruned.frame["status"] == "balanced"]
    assert set(balanced) == set(exhaustive.frame.index[exhaustive.frame["status"] == "balanced"])
    # the top cheap passes are balanced but for the plans without a pipeline or of more chunks than the balanced
    # pass balances (they keep their even placement)
    cheap = pruned.frame[pruned.frame["status"].isin(("balanced", "evaluated"))]
    top = cheap.sort_values("even_step_ms", kind="stable").head(pruned.top)
    assert len(balanced) == int(((top["pipeline_parallel"] > 1) & (top["virtual_stages"] <= BALANCED_CHUNKS)).sum())
    both = pruned.frame.index[pruned.frame["status"].isin(("balanced", "evaluated", "infeasible"))]
    pd.testing.assert_frame_equal(pruned.frame.loc[both, KEYS], exhaustive.frame.loc[both, KEYS])
    assert pruned.threshold_ms == exhaustive.threshold_ms


def test_no_pruned_strategy_beats_the_result(searched):
    pruned, exhaustive = searched
    left_out = pruned.frame.index[pruned.frame["status"].isin(("pruned_time", "pruned_memory"))]
    assert len(left_out) >= 10
    cheap = exhaustive.frame.loc[left_out, "even_step_ms"].fillna(np.inf)
    assert (cheap >= pruned.threshold_ms).all() and (cheap >= pruned.best["step_ms"]).all()
    memory = pruned.frame.index[pruned.frame["status"] == "pruned_memory"]
    assert exhaustive.frame.loc[memory, "step_ms"].isna().all()


@pytest.mark.slow
def test_the_result_does_not_depend_on_the_executor():
    with ProcessPoolExecutor(2) as pool:
        pooled = _search("moe-16", pool)
    with ThreadPoolExecutor(3) as pool:
        threaded = _search("moe-16", pool)
    pd.testing.assert_frame_equal(pooled.frame, threaded.frame)


@pytest.mark.slow
def test_a_dask_local_cluster_gives_the_same_result():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        on_dask = _search("gpt-64", client.get_executor(), dims=dict(CASES["gpt-64"]["dims"], zero=[1]))
    with ThreadPoolExecutor(1) as pool:
        local = _search("gpt-64", pool, dims=dict(CASES["gpt-64"]["dims"], zero=[1]))
    pd.testing.assert_frame_equal(on_dask.frame, local.frame)


@pytest.mark.parametrize("options, message", [
    (dict(devices=0), "devices must be an int >= 1; got 0"),
    (dict(global_batch=-1), "global_batch must be an int >= 1; got -1"),
    (dict(objective="memory"), "objective must be one of 'throughput'; got 'memory'"),
    (dict(balance_top=0), "balance_top must be an int >= 1; got 0"),
    (dict(device="h300"), "device must be one of 'a100-40g', 'a100-80g', 'ascend-910b', 'b200', "
                          "'h100-96g-500w', 'h100-sxm', 'h200' or a hardware file (.toml); got 'h300'"),
    (dict(memory_mb=0), "memory_mb must be a finite number > 0; got 0"),
    (dict(executor="dask"), "executor must be a concurrent.futures.Executor (e.g. dask.distributed.Client("
                            "...).get_executor()); got 'dask'"),
    (dict(cluster=5), "cluster must be a sappkit.hardware.Cluster, a preset name or a hardware file (.toml); got int"),
    (dict(device=5), "device must be a sappkit.hardware.DeviceConfig, a preset name or a hardware file (.toml); got 5"),
    (dict(devices=64, cluster=Cluster.preset("dgx-a100", nodes=4)),
     "devices must be <= the cluster's 32 (4 nodes of 8); got 64"),
])
def test_bad_arguments_are_refused_by_name(options, message):
    arguments = {**dict(cluster="dgx-a100", devices=16, global_batch=64, progress=False), **options}
    with pytest.raises(InputError) as error:
        search_strategies(GPT, **arguments)
    assert str(error.value) == message


def test_a_search_that_finds_nothing_says_so():
    with ThreadPoolExecutor(1) as pool:
        nothing = search_strategies(GPT, cluster="dgx-a100", devices=16, global_batch=64, memory_mb=10.0,
                                    dims={"pipeline_parallel": [2], "zero": [1], "micro_batch_size": [1]},
                                    executor=pool, progress=False)
    assert nothing.best is None
    assert repr(nothing) == f"StrategySearch({len(nothing.frame):,} strategies, no strategy fits)"
    assert set(nothing.frame["status"]) <= {"pruned_memory", "rejected"}
    assert nothing.why_nothing_ranks() == ("no strategy fits the device: all 828 the trainers accept need more "
                                           "than 10 MB")
    assert nothing.why_nothing_ranks() in nothing.describe()
    with pytest.raises(InputError, match="^no strategy fits the device: there is no best row$"):
        nothing.plan()
    with ThreadPoolExecutor(1) as pool, pytest.raises(InputError) as caught:  # none laid out: said, not "fits"
        search_strategies(GPT, cluster="dgx-a100", devices=16, global_batch=64, executor=pool,
                          dims={"tensor_parallel": [3]}, progress=False)
    assert str(caught.value) == ("no strategy was laid out: no t * cp * p * dp of the searched values makes 16 "
                                 "devices (dims={'tensor_parallel': [3]}); search other values")
