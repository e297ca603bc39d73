"""The search explained: each priced strategy's step split into terms that add up to it (and to
evaluate_strategy's step), two strategies side by side, why a row stands where it does, ties, the error band
and the robust choice, the user's own config as the baseline."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sappkit import InputError, Strategy, TransformerConfig
from sappkit.strategy import evaluate_strategy
from sappkit.strategy.bands import model_errors
from sappkit.strategy.search import search_strategies
from sappkit.strategy.search.explain import TERMS
from sappkit.trainers import read_trainer_config

GPT = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048, vocab_size=32000)
SEARCH = dict(cluster="dgx-a100", devices=16, global_batch=64, memory_mb=1500, progress=False)
#: Megatron-LM's arguments for a strategy of the small search (p2, dp8, no recompute).
ARGS = ["--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048",
        "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1",
        "--global-batch-size", "64", "--use-distributed-optimizer", "--bf16", "--sequence-parallel"]


def _search(**options):
    with ThreadPoolExecutor(1) as pool:
        return search_strategies(GPT, executor=pool, **SEARCH, **options)


@pytest.fixture(scope="module")
def exhaustive():
    """Every accepted strategy of a small space priced (bounds ignored), zero 1 and 2 among them."""
    return _search(balance_top=2, prune=False, dims={"pipeline_parallel": [1, 2], "micro_batch_size": [1, 2],
                                                     "zero": [1, 2], "context_parallel": [1],
                                                     "tensor_parallel": [1, 2]})


@pytest.fixture(scope="module")
def pruned():
    return _search(balance_top=3, dims={"pipeline_parallel": [2, 4], "micro_batch_size": [1, 2], "zero": [1, 3],
                                        "context_parallel": [1]})


def _evaluated(found):
    frame = found.frame
    return frame[frame["status"] == "evaluated"]


def test_the_terms_add_up_to_the_step_evaluate_strategy_prices(exhaustive):
    evaluated = _evaluated(exhaustive)
    assert (evaluated["pipeline_parallel"] == 1).any() and (evaluated["pipeline_parallel"] == 2).any()
    for index, row in evaluated.iterrows():
        priced = exhaustive.priced(index)
        evaluated = evaluate_strategy(GPT, exhaustive.strategy(index), cluster="dgx-a100", global_batch=64,
                                      recompute=row["recompute"], memory_mb=1500)
        reference, last = evaluated.step_time, evaluated.breakdown["idle_ms"].idxmin()  # the stage finishing last
        terms = exhaustive.step_terms(index)
        assert tuple(terms.index) == TERMS and (terms >= -1e-9).all()
        assert terms.sum() == pytest.approx(reference, rel=1e-6) == row["step_ms"]
        assert terms["bubble_ms"] == pytest.approx(evaluated.breakdown.at[last, "idle_ms"], abs=1e-9)
        assert terms["compute_ms"] == evaluated.breakdown.at[last, "compute_ms"]
        assert priced.step_ms == pytest.approx(reference, rel=1e-12) and priced is exhaustive.priced(index)


def test_compare_sets_two_strategies_side_by_side_term_by_term(exhaustive):
    evaluated = _evaluated(exhaustive)
    a, b = evaluated.index[0], evaluated.index[-1]
    compared = exhaustive.compare(a, b)
    frame = compared.frame
    assert list(frame.columns) == ["a", "b", "b_minus_a"] and tuple(frame.index) == TERMS
    for column, index in (("a", a), ("b", b)):
        reference = evaluate_strategy(GPT, exhaustive.strategy(index), cluster="dgx-a100", global_batch=64,
                                      recompute=evaluated.at[index, "recompute"], memory_mb=1500).step_time
        assert frame[column].sum() == pytest.approx(reference, rel=1e-6)
    assert np.allclose(frame["b_minus_a"], frame["b"] - frame["a"])
    fields = ["tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch_size", "zero"]
    differs = [key for key in fields if evaluated.at[a, key] != evaluated.at[b, key]]
    changes = compared.changes()
    assert [what for what in changes["what"] if what in fields] == differs
    assert (changes["a"] != changes["b"]).all()
    assert all(len(line) <= 100 for line in compared.describe().splitlines())


def test_compare_takes_a_label_or_a_strategy_the_search_did_not_price(exhaustive):
    row = _evaluated(exhaustive).iloc[0]
    by_label = exhaustive.compare(row["label"], row.name)
    assert by_label.a is exhaustive.priced(row.name) and by_label.changes().empty
    assert (by_label.frame["b_minus_a"] == 0).all()
    outside = Strategy(tensor_parallel=4, data_parallel=4)  # t4 lies outside the searched dims
    assert outside.label not in set(exhaustive.frame["label"])
    priced = exhaustive.compare(outside).a
    steps = []
    for option in ("none", "selective", "comm", "both", "full"):
        result = evaluate_strategy(GPT, outside, cluster="dgx-a100", global_batch=64, recompute=option,
                                   memory_mb=1500)
        if result.fits:
            steps.append(result.step_time)
    assert priced.step_ms == pytest.approx(min(steps), rel=1e-9) and priced.terms.sum() == pytest.approx(min(steps))
    with pytest.raises(InputError, match=r"^a runs on 8 devices \(t1 p1 v1 dp8 cp1 ep1 b1 1f1b zero1\); the search "
                                         r"ran on 16$"):
        exhaustive.compare(Strategy(data_parallel=8))


def test_compare_prices_a_strategy_at_the_recompute_it_is_given_fitting_or_not(exhaustive):
    row = _evaluated(exhaustive).iloc[0]
    strategy = exhaustive.strategy(row.name)
    for option in ("none", "full", "selective_op"):
        reference = evaluate_strategy(GPT, strategy, cluster="dgx-a100", global_batch=64, recompute=option,
                                      memory_mb=1500)
        compared = exhaustive.compare(row["label"], row.name, recompute=option)
        a = compared.a
        assert a.recompute == option and a.placement == "even" and a is not exhaustive.priced(row.name)
        assert a.step_ms == pytest.approx(reference.step_time, rel=1e-12) and a.fits == reference.fits
        assert a.terms.sum() == pytest.approx(reference.step_time, rel=1e-9)
        assert compared.b is exhaustive.priced(row.name)  # a row by index keeps the search's pricing
        head = compared.describe().splitlines()[0]
        assert head.endswith(", over its limit of 1.5 GB") != reference.fits, head
    tight = Strategy(data_parallel=16)  # every layer kept: over 1,500 MB on one stage
    compared = exhaustive.compare(tight, recompute="none")
    assert not compared.a.fits and "over its limit" in compared.describe().splitlines()[0]
    with pytest.raises(InputError, match="recompute"):
        exhaustive.compare(tight, recompute="half")


def test_equal_steps_are_ties_with_one_rank(exhaustive):
    frame = exhaustive.frame
    priced = frame[frame["step_ms"].notna()]
    microseconds = np.round(priced["step_ms"].to_numpy() * 1e3)
    for value in np.unique(microseconds):
        at = microseconds == value
        assert priced["rank"][at].nunique() == 1
        assert priced["rank"][at].iloc[0] == 1 + (microseconds < value).sum()
    tied = priced["rank"].duplicated(keep=False)
    assert tied.any()  # zero 1 and 2 price alike here
    shown = exhaustive.table(len(priced))
    assert (shown["rank"].str.endswith("=") == tied.to_numpy()).all()
    assert frame["rank"].isna().equals(frame["step_ms"].isna())


def test_the_band_and_the_robust_choice_against_brute_force(exhaustive):
    frame = exhaustive.frame
    priced = frame[frame["step_ms"].notna()]
    error = priced["model_error"].to_numpy()
    runs = int(model_errors().set_index("device").at["all", "runs"])  # no bf16 run on A100: the overall error
    assert (priced["error_basis"] == f"all {runs} runs (no a100-80g dense bf16 run)").all()
    high = priced["step_ms"].to_numpy() / (1 - error)
    assert np.allclose(priced["step_high_ms"], high)
    assert np.allclose(priced["step_low_ms"], priced["step_ms"] / (1 + error))
    assert exhaustive.robust().name == priced.index[np.argmin(high)]
    best_high = high[0]
    assert (priced["within_error"] == (priced["step_low_ms"] <= best_high)).all()
    assert not frame.loc[frame["step_ms"].isna(), "within_error"].any()


def test_why_names_the_rule_the_bound_or_the_rank(pruned):
    frame = pruned.frame
    time = frame[frame["status"] == "pruned_time"].iloc[0]
    assert pruned.why(time.name) == (
        f"{time['label']}: pruned on time: its even placement needs at least {time['even_bound_ms']:,.1f} ms (any "
        f"placement {time['time_bound_ms']:,.1f} ms), not below the threshold {pruned.threshold_ms:,.1f} ms, the "
        f"3rd fastest cheap pass")
    assert time["even_bound_ms"] >= pruned.threshold_ms
    memory = frame[frame["status"] == "pruned_memory"].iloc[0]
    assert pruned.why(memory.name) == f"{memory['label']}: pruned memory: {memory['reason']}"
    best = pruned.best
    assert pruned.why(best.name).endswith(": the best")
    second = frame.iloc[1]
    said = pruned.why(second.name)
    assert said.startswith(f"{second['label']}: rank 2 of ") and f"the best {best['label']}" in said
    with pytest.raises(InputError, match=r"is pruned_time, not priced"):
        pruned.priced(time.name)


def test_the_users_config_is_the_baseline():
    config = read_trainer_config(ARGS, world_size=16)
    with ThreadPoolExecutor(1) as pool:  # devices and global batch: the config's
        found = search_strategies(GPT, baseline=config, cluster="dgx-a100", memory_mb=1500, progress=False,
                                  balance_top=2, executor=pool, dims={"pipeline_parallel": [2], "zero": [1],
                                                                      "micro_batch_size": [1],
                                                                      "context_parallel": [1]})
    assert (found.devices, found.global_batch) == (16, 64)
    reference = evaluate_strategy(GPT, config.strategy, cluster="dgx-a100", global_batch=64, memory_mb=1500)
    baseline = found.baseline
    assert baseline.placement == "config" and baseline.recompute == "none 8"
    assert baseline.step_ms == pytest.approx(reference.step_time, rel=1e-9)
    assert baseline.terms.sum() == pytest.approx(reference.step_time, rel=1e-6)
    against = found.against_baseline()
    assert against.a is baseline and against.b is found.priced()
    assert against.speedup == pytest.approx(baseline.step_ms / found.best["step_ms"])


@pytest.mark.parametrize(("options", "message"), [
    (dict(global_batch=64), "devices must be given (or a baseline= trainer config that sets it); got None"),
    (dict(devices=16), "global_batch must be given (or a baseline= trainer config that sets it); got None"),
    (dict(baseline="t8 p16"), "baseline must be a trainer config with a strategy and plan_for (as "
                              "sappkit.read_trainer_config returns); got 't8 p16'"),
])
def test_a_search_needs_its_sizes_or_a_baseline(options, message):
    with pytest.raises(InputError) as raised:
        search_strategies(GPT, progress=False, **options)
    assert str(raised.value) == message


def test_a_search_without_a_baseline_says_so(pruned):
    assert pruned.baseline is None
    with pytest.raises(InputError, match=r"^the search has no baseline: pass search_strategies\(\.\.\., "
                                         r"baseline=config\)$"):
        pruned.against_baseline()
