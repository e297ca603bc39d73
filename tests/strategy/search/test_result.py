"""StrategySearch: one row per strategy with units in the names, the best, its balanced plan, the Pareto front,
and text that fits 100 columns."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sappkit import InputError, TransformerConfig
from sappkit.layers.comm import boundary_ms
from sappkit.strategy.search import search_strategies
from sappkit.strategy.bands import TIE_MS
from sappkit.strategy.search.result import COLUMNS, STATUSES
from sappkit.strategy.search.tasks import balanced_plan
from sappkit.strategy.step import price_plan

GPT = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048, vocab_size=32000)


@pytest.fixture(scope="module")
def found():
    with ThreadPoolExecutor(1) as pool:
        return search_strategies(GPT, cluster="dgx-a100", devices=16, global_batch=64, memory_mb=1500, balance_top=3,
                                 dims={"pipeline_parallel": [2, 4], "micro_batch_size": [1, 2], "zero": [1, 3],
                                       "context_parallel": [1]}, executor=pool, progress=False)


def test_the_frame_has_a_row_per_strategy_the_fastest_first(found):
    frame = found.frame
    assert tuple(frame.columns) == COLUMNS and frame.index.is_unique
    assert set(frame["status"]) <= set(STATUSES) and (frame["status"] == "balanced").sum() == 3
    priced = frame[frame["step_ms"].notna()]
    # fastest first, steps equal to the microsecond (ties, bands.TIE_MS) in the order of their index
    assert np.round(priced["step_ms"] / TIE_MS).is_monotonic_increasing and priced.index[0] == found.best.name
    assert (frame.loc[priced.index, "status"].isin(("balanced", "evaluated"))).all()
    tokens = found.global_batch * GPT.seq_length / (priced["step_ms"] / 1e3) / found.devices
    assert np.allclose(priced["tokens_per_s_per_device"], tokens)
    assert np.allclose(priced["mfu"], priced["tflops_per_device"] / 312.0)
    assert np.allclose(priced["headroom_mb"], 1500 - priced["peak_memory_mb"])
    assert (priced["step_ms"] <= priced["even_step_ms"]).all() and (priced["bubble_fraction"].between(0, 1)).all()
    assert (frame.loc[frame["status"] != "rejected", "reason"].str.len() >= 0).all()
    assert (frame.loc[frame["status"].str.startswith("pruned"), "reason"].str.len() > 0).all()
    for index in frame.index[::7]:
        assert found.strategy(index).label == frame.at[index, "label"]


def test_the_best_plan_prices_to_the_best_step(found):
    best = found.best
    assert best["status"] == "balanced" and found.strategy().label == best["label"]
    plan = found.plan()
    assert plan is found.plan(best.name) and plan.fits
    strategy = found.strategy()
    layers = found.layers()
    assert layers.body_layers == GPT.layers and layers is not found.layers(found.frame.index[-1])
    p2p = boundary_ms(GPT, strategy.parallel, found.setting.cluster, strategy.pipeline_parallel)
    priced = price_plan(plan, layers, strategy, found.setting.cluster, p2p_ms=p2p)
    expected = priced.step_time if best["placement"] == "balanced" else best["even_step_ms"]
    assert best["step_ms"] == pytest.approx(min(priced.step_time, best["even_step_ms"])) == expected
    with pytest.raises(InputError, match=r"^row must be an index label of the search's frame; got -1$"):
        found.plan(-1)


def test_a_balanced_row_s_plan_is_the_balanced_pass_s_not_a_second_solve(found, monkeypatch):
    balanced = found.frame.index[found.frame["status"] == "balanced"]
    fresh = {index: balanced_plan(found.setting, found.strategy(index), found.layers(index)) for index in balanced}
    monkeypatch.setattr("sappkit.strategy.search.result.balanced_plan",
                        lambda *args: pytest.fail("plan(row) solved again"))
    for index in balanced:
        plan = found.plan(index)
        assert np.array_equal(plan.counts, fresh[index].counts) and plan.step_time == fresh[index].step_time


def test_each_status_says_why(found):
    frame = found.frame
    priced = frame["status"].isin(("balanced", "evaluated"))
    assert (frame.loc[priced, "reason"] == "").all() and frame.loc[~priced, "step_ms"].isna().all()
    # A balanced row keeps the even placement where balancing found no faster step end to end.
    balanced = frame[frame["status"] == "balanced"]
    kept_even = balanced["placement"] == "even"
    assert (balanced.loc[kept_even, "step_ms"] == balanced.loc[kept_even, "even_step_ms"]).all()
    assert (balanced.loc[~kept_even, "step_ms"] < balanced.loc[~kept_even, "even_step_ms"]).all()
    assert (balanced["placement"].isin(("balanced", "even"))).all() and not kept_even.all()
    assert (frame.loc[frame["status"] == "evaluated", "placement"] == "even").all()
    memory = frame[frame["status"] == "pruned_memory"]
    anywhere = memory["reason"].str.fullmatch(r"no placement fits: at least [\d,]+ MB with the lightest "
                                              r"recompute everywhere")
    assert anywhere.any() and (memory.loc[anywhere, "memory_bound_mb"] > 1500).all()
    even = memory[~anywhere]  # any placement might fit, the even one does not: never balanced
    assert len(even) and (even["memory_bound_mb"] <= 1500).all()
    assert (even["reason"] == "its even placement fits under no recompute option (its memory bound)").all()
    time = frame[frame["status"] == "pruned_time"]
    assert len(time) and time["reason"].str.fullmatch(r"its even placement needs at least [\d,]+ ms, not faster "
                                                      r"than the 3rd fastest cheap pass \([\d,]+ ms\)").all()
    assert (time["even_bound_ms"] >= found.threshold_ms).all()
    infeasible = frame[frame["status"] == "infeasible"]
    assert (infeasible["reason"] == "no recompute option's even placement fits").all()
    assert frame.loc[frame["status"] != "rejected", "rule"].isna().all()


def test_a_plan_within_a_trainers_grammar_says_what_it_costs(found):
    zbv = found.frame.index[(found.frame["schedule"] == "zbv") & found.frame["step_ms"].notna()][0]
    plan = found.plan(zbv, trainer="torchtitan")
    assert plan is found.plan(zbv, trainer="torchtitan") and plan is not found.plan(zbv)
    cost = plan.constraint_cost
    assert cost.trainer == "torchtitan" and cost.constrained >= cost.unconstrained and plan.fits
    assert plan.counts.sum() == found.plan(zbv).counts.sum()
    with pytest.raises(InputError) as error:
        found.plan(zbv, trainer="megatron")
    assert str(error.value) == "megatron runs no 'zbv' schedule; plan for one of '1f1b', 'interleaved'"
    interleaved = found.frame.index[(found.frame["schedule"] == "interleaved") & found.frame["step_ms"].notna()][0]
    assert found.plan(interleaved, trainer="megatron").constraint_cost.policy.startswith(("uniform", "block"))


def test_a_rejected_row_has_no_layers_and_a_search_without_a_fit_no_best():
    node = search_strategies(GPT, cluster="dgx-a100", devices=16, global_batch=64, memory_mb=1500, schedules=["1f1b"],
                             dims={"tensor_parallel": [16], "pipeline_parallel": [1], "micro_batch_size": [1],
                                   "zero": [1], "context_parallel": [1], "sequence_parallel": [True],
                                   "tp_comm_overlap": [False]}, progress=False)
    assert node.frame[["status", "rule"]].values.tolist() == [["rejected", "node"]] and node.best is None
    with pytest.raises(InputError) as error:
        node.layers(0)
    assert str(error.value) == ("row 0 was rejected (tensor_parallel=16 does not divide devices_per_node=8 (a "
                                "tensor-parallel group stays inside a node)): it has no layer table")
    with pytest.raises(InputError, match=r"^no strategy fits the device: there is no best row$"):
        node.plan(trainer="megatron")


def test_the_pareto_front_holds_exactly_the_strategies_none_beats_on_both(found):
    priced = found.frame[found.frame["step_ms"].notna()]
    front = found.pareto()
    tokens, headroom = priced["tokens_per_s_per_device"].to_numpy(), priced["headroom_mb"].to_numpy()
    for index, t, h in zip(priced.index, tokens, headroom):
        beaten = ((tokens >= t) & (headroom >= h) & ((tokens > t) | (headroom > h))).any()
        assert (index in front.index) == (not beaten)
    assert front["tokens_per_s_per_device"].is_monotonic_decreasing


def test_text_fits_100_columns_and_says_what_it_leaves_out(found):
    text = found.describe()
    assert all(len(line) <= 100 for line in text.splitlines())
    assert text.splitlines()[2] == f"best: {found.best['label']}" and len(found.limits()) == 4
    assert repr(found) == f"StrategySearch({len(found.frame):,} strategies, best {found.best['label']}: " \
                          f"{found.best['step_ms']:,.0f} ms)"
    assert "<table" in found._repr_html_() and "stragglers" in found._repr_html_()
    assert list(found.table(3).columns) == ["rank", "label", "status", "step_ms", "tokens_per_s_per_device",
                                            "tflops_per_device", "mfu", "peak_memory_mb", "recompute"]
    assert found.counts().sum() == len(found.frame)
