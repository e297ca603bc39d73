"""Planning within a trainer's grammar: its policies, their inverse, and balance(trainer=...) against brute force."""

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sappkit import InputError, balance
from sappkit.balancer.evaluate import evaluate
from sappkit.balancer.grammar import Policy, matching_policy, policy_options
from sappkit.balancer.setup import make_setup
from sappkit.trainers import megatron_args, mindformers_config, torchtitan_config


def table(count=6, activation=(60.0, 6.0), backward=(2.0, 3.0), options=("none", "full")):
    rows = [dict(kind="block", role="body", count=count, param_mb=100, option=o, forward_time=1.0,
                 backward_time=b, activation_mb=a) for o, b, a in zip(options, backward, activation)]
    rows += [dict(kind="embed", role="head", count=1, param_mb=50, option="none", forward_time=0.5,
                  backward_time=1.0, activation_mb=10),
             dict(kind="loss", role="tail", count=1, param_mb=80, option="none", forward_time=0.8,
                  backward_time=1.5, activation_mb=20)]
    return pd.DataFrame(rows)


def test_block_recomputes_the_first_layers_of_every_chunk_on_every_stage():
    counts = [[3, 1], [2, 2]]  # [chunk][stage], interleaved: cells (0,0) (0,1) (1,0) (1,1)
    assert policy_options(Policy("block", n=2), "interleaved", counts) == [
        "full", "full", "none", "full", "full", "full", "full", "full"]


def test_every_nth_counts_a_ranks_blocks_across_its_chunks_in_build_order():
    counts = [[3, 1], [2, 2]]
    # model order (0,0): layers 0-2, (0,1): 3, (1,0): 4-5, (1,1): 6-7
    # rank 0 builds (0,0) then (1,0): layers 0 1 2 4 5 at positions 1..5, every 2nd -> layers 1, 4
    # rank 1 builds (0,1) then (1,1): layers 3 6 7 at positions 1..3 -> layer 6
    assert policy_options(Policy("every", n=2), "interleaved", counts) == [
        "none", "full", "none", "none", "full", "none", "full", "none"]
    # the V runs chunk 1 back up: (0,0): 0-2, (0,1): 3, (1,1): 4-5, (1,0): 6-7
    # rank 0: layers 0 1 2 6 7 -> 1, 6; rank 1: layers 3 4 5 -> 4
    assert policy_options(Policy("every", n=2), "zbv", counts) == [
        "none", "full", "none", "none", "full", "none", "full", "none"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=2, max_size=3), min_size=1, max_size=2).filter(
    lambda rows: len({len(r) for r in rows}) == 1), st.sampled_from(["block", "every"]), st.integers(1, 5))
def test_the_policy_a_trainer_is_told_runs_the_plans_options(counts, family, n):
    schedule = "1f1b" if len(counts) == 1 else "interleaved"
    trainer = "megatron" if family == "block" else "torchtitan"
    options = policy_options(Policy(family, n=n), schedule, counts)
    found = matching_policy(trainer, schedule, counts, sorted(options, reverse=True) if len(counts) == 1 and
                            len(counts[0]) == 1 else options)
    assert found is not None
    fulls = [options[i:j].count("full") for i, j in _edges(schedule, counts)]
    again = policy_options(found, schedule, counts)
    assert [again[i:j].count("full") for i, j in _edges(schedule, counts)] == fulls


def _edges(schedule, counts):
    from sappkit.pipeline.schedules import model_order

    sizes = [counts[c][s] for c, s in model_order(schedule, len(counts[0]), len(counts))]
    ends = list(itertools.accumulate(sizes))
    return list(zip([0] + ends[:-1], ends))


def test_a_mix_no_policy_runs_is_not_matched_and_cells_compare_by_counts():
    assert matching_policy("megatron", "1f1b", [[2, 2]], ["full", "full", "none", "none"]) is None
    assert matching_policy("torchtitan", "1f1b", [[2, 2]], ["full", "full", "none", "none"]) is None
    assert matching_policy("megatron", "1f1b", [[2, 2]], ["selective", "full", "full", "full"]) is None
    assert matching_policy("megatron", "1f1b", [[1, 1]], ["comm", "comm"]) is None
    # a plan states how many layers of a cell recompute, not which: block 1 and every 2nd read its counts
    assert matching_policy("megatron", "1f1b", [[2, 2]], ["none", "full", "none", "full"]) == Policy("block", n=1)
    assert matching_policy("torchtitan", "1f1b", [[3]], ["full", "none", "none"]) == Policy("every", n=2)


def brute_force(layers, trainer, **shape):
    """The least largest-stage time (the sapp objective, v = 1) over every layout and every policy."""
    setup = make_setup(layers, **shape)
    policies = [Policy("uniform", o) for o in ("none", "full")]
    policies += [Policy("block" if trainer == "megatron" else "every", n=n) for n in range(1, 7)]
    best = np.inf
    p, total = setup.stages, setup.layers.body_layers
    for cut in itertools.combinations(range(1, total), p - 1):
        layout = np.diff([0, *cut, total])[None, :]
        for policy in policies:
            counts = np.zeros((len(setup.items), 1, p), dtype=int)
            for option, stage in zip(policy_options(policy, setup.schedule, layout),
                                     np.repeat(np.arange(p), layout[0])):
                counts[setup.items.index(("block", option)), 0, stage] += 1
            found = evaluate(setup, counts)
            if found.fits:
                best = min(best, found.sapp)
    return best


@pytest.mark.parametrize("trainer", ["megatron", "torchtitan"])
@pytest.mark.parametrize("memory", [520, 560, 600, 720, 760])
def test_the_grammars_plan_is_the_brute_force_optimum_on_small_pipelines(trainer, memory):
    layers = table(count=8)
    layers.loc[layers["role"] == "head", "param_mb"] = 260  # stage 0 should hold fewer layers
    shape = dict(stages=3, micro_batches=6, memory_mb=memory)
    plan = balance(layers, trainer=trainer, **shape)
    expected = brute_force(layers, trainer, **shape)
    if np.isinf(expected):
        assert plan.status == "infeasible"
    else:
        assert plan.fits and plan.objective == pytest.approx(expected)
        assert plan.constraint_cost.constrained == pytest.approx(expected)


@settings(max_examples=25, deadline=None)
@given(st.integers(4, 9), st.sampled_from([(60.0, 6.0), (30.0, 12.0)]), st.integers(400, 1500),
       st.sampled_from(["megatron", "torchtitan", "mindformers"]), st.sampled_from([1, 2]))
def test_the_grammar_never_beats_the_unconstrained_plan_and_its_plan_exports(count, activation, memory, trainer,
                                                                             chunks):
    layers = table(count=count * chunks, activation=activation)
    shape = dict(stages=2, micro_batches=4, memory_mb=memory, chunks=chunks)
    free = balance(layers, **shape)
    plan = balance(layers, trainer=trainer, **shape)
    if not plan.has_plan:
        return
    cost = plan.constraint_cost
    assert cost.time >= 0 and cost.constrained >= cost.unconstrained - 1e-9
    assert plan.objective >= free.objective - 1e-9
    if trainer == "megatron":
        assert not any(note.startswith("recompute not set") for note in megatron_args(plan).notes)
    elif trainer == "torchtitan":
        assert torchtitan_config(plan).settings["activation_checkpoint"]
    else:
        mindformers_config(plan)  # strict: refuses what the lists cannot state


def test_the_cost_is_stated_in_the_plan():
    plan = balance(table(count=8), stages=2, micro_batches=4, memory_mb=760, trainer="megatron")
    cost = plan.constraint_cost
    assert cost.trainer == "megatron" and cost.time_unit == "time units"
    assert cost.percent == pytest.approx(100 * cost.time / cost.unconstrained)
    assert " ".join(plan.describe().split("\ntrainer: ")[-1].split()) == cost.describe()
    assert "of SAPP's proxy vs the unconstrained plan" in cost.describe()


@pytest.mark.parametrize("kwargs, message", [
    (dict(trainer="deepspeed"), "trainer must be one of 'megatron', 'torchtitan', 'mindformers', 'hyperparallel'; "
                                "got 'deepspeed'"),
    (dict(trainer="megatron", chunks=2, schedule="zbv"), "megatron runs no 'zbv' schedule; plan for one of "
                                                         "'1f1b', 'interleaved'"),
    (dict(trainer="torchtitan", chunks=2, less_memory=True), "torchtitan's interleaved schedule has no less-memory "
                                                             "variant; give less_memory=False"),
])
def test_a_trainer_that_cannot_run_the_pipeline_is_refused(kwargs, message):
    with pytest.raises(InputError) as caught:
        balance(table(count=8), stages=2, micro_batches=4, memory_mb=1000, **kwargs)
    assert str(caught.value) == message
