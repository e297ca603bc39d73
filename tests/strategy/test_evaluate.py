"""evaluate_strategy: the simulated pipeline, then what it cannot overlap, cross-checked against the simulator."""

import numpy as np
import pytest

import sappkit
from sappkit import InputError, Strategy, TransformerConfig, evaluate_strategy, model_flops
from sappkit.hardware import Cluster
from sappkit.layers import KernelConfig
from sappkit.layers.comm import boundary_ms, grad_sync_parts, optimizer_ms
from sappkit.pipeline.schedules import model_order
from sappkit.strategy import compiled
from sappkit.strategy.step import STEP_COLUMNS

GPT = TransformerConfig(layers=16, hidden_size=2048, num_heads=16, ffn_size=8192, seq_length=2048, vocab_size=51200)
MOE = TransformerConfig(layers=8, dense_layers=1, hidden_size=1024, num_heads=8, ffn_size=4096, experts=8, top_k=2,
                        expert_ffn_size=1024, seq_length=2048, vocab_size=32000, gated_mlp=True, dropout=False)
CLUSTER = Cluster.preset("dgx-a100")


def _evaluate(strategy, **options):
    """Priced with materialised attention (the paper's kernels), whose memory these tests' limits are set for."""
    return evaluate_strategy(GPT, strategy, **{"cluster": CLUSTER, "global_batch": 64, "recompute": "selective",
                                               "kernels": KernelConfig(), **options})


@pytest.mark.parametrize("strategy", [
    Strategy(tensor_parallel=2, pipeline_parallel=4, data_parallel=2),
    Strategy(tensor_parallel=2, pipeline_parallel=2, virtual_stages=2, data_parallel=4, schedule="interleaved"),
    Strategy(tensor_parallel=1, pipeline_parallel=4, virtual_stages=2, data_parallel=2, schedule="zbv"),
    Strategy(tensor_parallel=4, data_parallel=4),
], ids=["1f1b", "interleaved", "zbv", "no-pipeline"])
def test_each_stage_breakdown_adds_up_to_the_step(strategy):
    result = _evaluate(strategy)
    parts = result.breakdown[list(STEP_COLUMNS[:-2])].sum(axis=1)
    assert parts.to_numpy() == pytest.approx(result.breakdown["step_ms"].to_numpy())
    assert (result.breakdown[list(STEP_COLUMNS)] >= -1e-9).all().all()
    assert result.breakdown["step_ms"].iloc[0] == result.step_time
    assert result.step_breakdown().sum() == pytest.approx(result.step_time)


@pytest.mark.parametrize("strategy", [
    Strategy(tensor_parallel=2, pipeline_parallel=4, data_parallel=2, zero=0, overlap_grad_reduce=False),
    Strategy(tensor_parallel=2, pipeline_parallel=2, virtual_stages=2, data_parallel=4, schedule="interleaved",
             zero=0, overlap_grad_reduce=False),
], ids=["1f1b", "interleaved"])
def test_without_overlap_the_step_is_the_simulators_stage_ends_plus_reduce_and_optimizer(strategy):
    result = _evaluate(strategy)
    plan = result.plan
    p2p = boundary_ms(GPT, strategy.parallel, CLUSTER, strategy.pipeline_parallel)
    simulation = plan.simulate(p2p_time=p2p)
    ends = simulation.timeline.groupby("stage")["end"].max()
    busy = result.breakdown[["compute_ms", "tp_comm_ms", "cp_comm_ms", "ep_comm_ms"]].sum(axis=1)
    assert busy.to_numpy() == pytest.approx(simulation.stages["busy_time"].to_numpy())
    # Each stage's parameters from the plan's cells, reduced (all-reduce, ZeRO 0) after its last op.
    per_kind = result.layers.breakdown.drop_duplicates("kind").set_index("kind")["params"]
    finish = []
    for stage, end in ends.items():
        cells = plan.assignment[plan.assignment["stage"] == stage]
        params = float((cells["layers"] * per_kind.loc[cells["kind"]].to_numpy()).sum())
        params += per_kind["embedding"] * (stage == 0) + per_kind["lm_head"] * (stage == ends.index[-1])
        chunks = [float((cells[cells["chunk"] == c]["layers"] * per_kind.loc[cells[cells["chunk"] == c]["kind"]]
                         .to_numpy()).sum()) for c in range(strategy.virtual_stages)]
        chunks[0] += per_kind["embedding"] * (stage == 0)
        chunks[-1] += per_kind["lm_head"] * (stage == ends.index[-1])
        reduce = sum(grad_sync_parts(c, 0.0, strategy.parallel, CLUSTER, strategy.pipeline_parallel)[0]
                     for c in chunks)
        finish.append(end + reduce + optimizer_ms(params, 0.0, strategy.parallel, CLUSTER))
    assert result.step_time == pytest.approx(max(finish))
    assert result.step_time > simulation.step_time


def test_overlapping_the_gradient_reduce_hides_it_behind_the_last_backward():
    slow = Cluster.preset("dgx-a100", inter_node_gbs=0.5)  # so that the reduce is long enough to show
    base = dict(tensor_parallel=8, pipeline_parallel=2, data_parallel=2, zero=1)
    hidden = _evaluate(Strategy(**base), cluster=slow)
    exposed = _evaluate(Strategy(**base, overlap_grad_reduce=False), cluster=slow)
    gathered = _evaluate(Strategy(**base, overlap_param_gather=False), cluster=slow)
    assert hidden.step_time < exposed.step_time and hidden.step_time < gathered.step_time
    assert (hidden.breakdown["dp_overlapped_ms"] > 0).all()
    total = [run.breakdown["dp_comm_ms"] + run.breakdown["dp_overlapped_ms"] for run in (hidden, exposed, gathered)]
    assert total[0].to_numpy() == pytest.approx(total[1].to_numpy()) and total[1].equals(total[2])
    assert (exposed.breakdown["dp_comm_ms"] > hidden.breakdown["dp_comm_ms"]).all()


def test_without_a_pipeline_the_device_runs_every_micro_batch_in_turn():
    strategy = Strategy(tensor_parallel=8, data_parallel=1, micro_batch_size=2)
    result = _evaluate(strategy, recompute="full")
    frame = result.layers.frame
    rows = frame[(frame["role"] != "body") | (frame["option"] == "full")]
    per_micro_batch = float(((rows["forward_time"] + rows["backward_time"]) * rows["count"]).sum())
    params = float((result.layers.breakdown.drop_duplicates("kind")["params"]
                    * result.layers.frame.drop_duplicates("kind")["count"].to_numpy()).sum())
    expected = 32 * per_micro_batch + optimizer_ms(params, 0.0, strategy.parallel, CLUSTER)
    assert result.step_time == pytest.approx(expected)
    assert result.plan is None and len(result.stages) == 1


def test_throughput_flops_and_mfu_follow_the_step():
    result = _evaluate(Strategy(tensor_parallel=2, pipeline_parallel=4, data_parallel=2))
    seconds = result.step_time / 1e3
    assert result.tokens_per_second == pytest.approx(64 * 2048 / seconds)
    assert result.model_flops == model_flops(GPT, batch=64)
    assert result.tflops_per_device == pytest.approx(model_flops(GPT, batch=64) / seconds / 16 / 1e12)
    assert result.mfu == pytest.approx(result.tflops_per_device / 312.0)
    assert 0 < result.mfu < 1
    assert "TFLOP/s per device" in result.describe() and result._repr_html_().startswith("<div>")
    assert all(len(line) <= 100 for line in result.describe().splitlines())
    assert repr(result).startswith("StrategyEvaluation(t2 p4 v1 dp2")


def test_balanced_placement_fits_where_the_even_one_does_not_and_beats_the_even_one_that_fits():
    strategy = Strategy(tensor_parallel=2, pipeline_parallel=4, data_parallel=2)
    even = _evaluate(strategy, recompute="none", memory_mb=4500)
    even_fitting = _evaluate(strategy, recompute="selective", memory_mb=4500)
    balanced = _evaluate(strategy, placement="balanced", recompute=None, memory_mb=4500)
    assert not even.fits and even_fitting.fits and balanced.fits
    assert balanced.plan.status in ("optimal", "feasible") and balanced.peak_memory_mb <= 4500
    assert balanced.step_time < even_fitting.step_time


def test_moe_and_context_parallel_strategies_price_their_communication():
    strategy = Strategy(tensor_parallel=2, pipeline_parallel=2, data_parallel=2, context_parallel=2,
                        expert_parallel=4)
    result = evaluate_strategy(MOE, strategy, cluster=CLUSTER, global_batch=16, recompute="selective")
    per_layer = result.layers.breakdown.query("option == 'selective'").set_index("kind")
    assert per_layer.loc["layer_moe", "ep_comm_ms"] > 0 and per_layer.loc["layer", "ep_comm_ms"] == 0
    assert (result.breakdown["ep_comm_ms"] > 0).all()
    assert result.breakdown["cp_comm_ms"].sum() >= 0


def test_a_compiled_shape_is_reused_and_gives_the_same_result():
    strategy = Strategy(tensor_parallel=2, pipeline_parallel=4, data_parallel=2)
    compiled.clear_cache()
    cold = _evaluate(strategy)
    warm = _evaluate(strategy)
    other_dp = _evaluate(Strategy(tensor_parallel=2, pipeline_parallel=4, data_parallel=8), global_batch=64)
    assert len(compiled._cache) == 1
    assert warm.step_time == cold.step_time and np.array_equal(warm.stages, cold.stages)
    assert other_dp.stages["param_mb"].iloc[0] < cold.stages["param_mb"].iloc[0]  # ZeRO 1 over more ranks


@pytest.mark.parametrize("kwargs, message", [
    (dict(global_batch=63), "global_batch must be a multiple of data_parallel * micro_batch_size = 2 * 1 = 2; "
                            "got 63"),
    (dict(recompute=("none", "full")), "recompute must be one option for placement='even' (every layer runs it); "
                                       "got ('none', 'full')"),
    (dict(recompute="some"), "recompute must be distinct options among 'none', 'selective', 'comm', 'both', "
                             "'full', 'selective_op'; got 'some'"),
    (dict(placement="random"), "placement must be one of 'even', 'balanced'; got 'random'"),
    (dict(cluster=Cluster.preset("dgx-a100", nodes=1)), "the strategy needs 16 devices; the cluster has 8 (1 nodes "
                                                        "of 8)"),
    (dict(cluster=3), "cluster must be a sappkit.hardware.Cluster, a preset name or a hardware file (.toml); got int"),
])
def test_bad_evaluations_are_refused_by_name(kwargs, message):
    with pytest.raises(InputError) as error:
        _evaluate(Strategy(tensor_parallel=2, pipeline_parallel=4, data_parallel=2), **kwargs)
    assert str(error.value) == message


def test_bad_models_and_strategies():
    with pytest.raises(InputError, match=r"^strategy must be a sappkit.Strategy; got dict$"):
        evaluate_strategy(GPT, {}, global_batch=8)
    with pytest.raises(InputError, match=r"^model must be a TransformerConfig, a sequence of them or a preset "
                                         r"name; got int$"):
        evaluate_strategy(3, Strategy(), global_batch=8)
    with pytest.raises(InputError, match=r"^model must be one of 'gpt3-175b'"):
        evaluate_strategy("gpt-5", Strategy(), global_batch=8)


def test_blocking_sends_are_spent_by_the_sender_as_the_simulator_prices_longer_cells():
    strategy = Strategy(tensor_parallel=2, pipeline_parallel=4, virtual_stages=2, data_parallel=2,
                        schedule="interleaved", zero=0, overlap_grad_reduce=False, overlap_p2p_comm=False)
    result = _evaluate(strategy)
    overlapped = _evaluate(Strategy(**{**strategy.to_dict(), "overlap_p2p_comm": True}))
    assert result.step_time > overlapped.step_time
    p2p = boundary_ms(GPT, strategy.parallel, CLUSTER, strategy.pipeline_parallel)
    costs = result.plan.costs()
    cells = model_order("interleaved", 4, 2)
    for i, (chunk, stage) in enumerate(cells):
        row = (costs["chunk"] == chunk) & (costs["stage"] == stage)
        costs.loc[row, "forward_time"] += p2p * (i + 1 < len(cells))
        costs.loc[row, "backward_time"] += p2p * (i > 0)
    simulation = sappkit.simulate(costs, schedule="interleaved", micro_batches=32)
    ends = simulation.timeline.groupby("stage")["end"].max()
    tails = result.breakdown["dp_comm_ms"] + result.breakdown["optimizer_ms"]
    assert result.step_time == pytest.approx(float((ends.to_numpy() + tails.to_numpy()).max()))
    # A middle stage sends every forward and backward of its two chunks: 2 chunks x 32 micro-batches x 2.
    assert result.breakdown["pp_comm_ms"].max() == pytest.approx(2 * 32 * 2 * p2p)
