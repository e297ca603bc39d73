"""Strategies published for well-known runs come out feasible in sappkit's model (not rejected, not pruned, their
even placement fits), and the search finds one at least as fast.

The runs:

- Llama 3 405B on 16,384 H100s: "The Llama 3 Herd of Models" (Llama Team, AI @ Meta, arXiv:2407.21783),
  Table 4 (scaling configurations of the 405B pre-training): tensor parallel 8, context parallel 1, pipeline
  parallel 16, data parallel 128, sequences of 8,192 tokens, 16 sequences per data-parallel rank (16M tokens a
  step). Section 3.3.2: FSDP shards the optimizer state and the gradients and keeps the weights gathered after
  the forward, ZeRO-2's footprint (an assumption: the paper describes it, no stage number); one chunk per stage
  (the paper's tuned interleaving is not given as a number).
- Megatron-LM's 145B and 530B configurations: Narayanan et al., SC'21, Table 1, as the repository's
  ``data/published_runs.csv`` holds them (rows ``sc21-145b``, ``sc21-530b``; settings from Megatron-LM's
  ``examples/academic_paper_scripts/sc21/run_table_1.sh``): fp16, ZeRO 0, no sequence parallelism, full
  recompute, interleaved with 2 and 3 chunks.

Each is priced as its trainer runs it (the even placement) with the search's overlap settings, and each search
keeps the published tensor parallel degree and micro-batch size (the rest is searched: pipeline stages, chunks,
schedule, data parallel), so that it stays a few seconds.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

import sappkit
from sappkit import Strategy
from sappkit.strategy.search import search_strategies
from sappkit.strategy.search.space import enumerate_strategies
from sappkit.strategy.validation import published_runs, run_inputs

pytestmark = pytest.mark.slow


def _llama3_405b():
    strategy = Strategy(tensor_parallel=8, context_parallel=1, pipeline_parallel=16, data_parallel=128, zero=2)
    return (sappkit.models.get("llama3-405b"), strategy, 2048, "dgx-h100", "selective",
            dict(tensor_parallel=[8], context_parallel=[1], micro_batch_size=[1], zero=[2]))


def _sc21(run):
    row = published_runs().set_index("run").loc[run]
    model, strategy, batch = run_inputs(row.rename(run))
    strategy = replace(strategy, overlap_grad_reduce=True, overlap_p2p_comm=True)  # the search's settings
    dims = dict(tensor_parallel=[strategy.tensor_parallel], context_parallel=[1],
                micro_batch_size=[strategy.micro_batch_size], zero=[0], sequence_parallel=[False])
    return model, strategy, batch, row["cluster"], row["recompute"], dims


@pytest.mark.parametrize("published", [_llama3_405b, lambda: _sc21("sc21-145b")], ids=["llama3-405b-16k", "sc21-145b"])
def test_a_published_strategy_is_feasible_and_the_search_is_at_least_as_fast(published):
    model, strategy, batch, cluster, recompute, dims = published()
    as_run = sappkit.evaluate_strategy(model, strategy, cluster=cluster, global_batch=batch, recompute=recompute)
    assert as_run.fits
    with ThreadPoolExecutor(2) as pool:
        found = search_strategies(model, devices=strategy.devices, global_batch=batch, cluster=cluster, dims=dims,
                                  dtype=strategy.dtype, executor=pool, progress=False)
    row = found.frame[found.frame["label"] == strategy.label]
    assert len(row) == 1 and row["status"].iloc[0] in ("balanced", "evaluated", "pruned_time"), row.T
    assert found.best["step_ms"] <= as_run.step_time


def test_the_530b_strategy_is_in_the_space_a_trainer_accepts():
    """SC'21's 530B: its search balances 35-stage plans of 105 layers (over 250 CPU seconds), so this checks the
    space instead (the 145B case above runs the same search path)."""
    model, strategy, batch, cluster, recompute, dims = _sc21("sc21-530b")
    assert sappkit.evaluate_strategy(model, strategy, cluster=cluster, global_batch=batch, recompute=recompute).fits
    space = enumerate_strategies([model], devices=strategy.devices, global_batch=batch, dims=dims,
                                 devices_per_node=sappkit.Cluster.preset(cluster).devices_per_node)
    keys = ("tensor_parallel", "pipeline_parallel", "virtual_stages", "data_parallel", "schedule")
    row = space[np.logical_and.reduce([space[key] == getattr(strategy, key) for key in keys])]
    assert len(row) == 1 and row["rule"].isna().all(), row.T

