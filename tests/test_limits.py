"""Sizes that would take hours or all memory are refused above the limits of ``sappkit.limits``, with the limit."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from sappkit import (
    InputError, LayerTable, Partition, SolverOptions, TransformerConfig, balance, choose_recompute, dryrun_config,
    in_flight, plan_dryruns, read_dryrun_yaml, simulate, sweep_memory, sweep_recompute,
)
from sappkit import limits

LAYERS = pd.DataFrame([dict(kind="b", role="body", count=8, param_mb=100, option=o, forward_time=1, backward_time=t,
                            activation_mb=a) for o, t, a in (("none", 2, 50), ("full", 3, 5))])
PIPELINE = dict(stages=2, micro_batches=4, memory_mb=1000)
PART = Partition(stages=2, micro_batches=4, cells=pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b",
                                                                  "layers": 4}))


def raises_exactly(message: str):
    """Expect an InputError with exactly ``message``."""
    return pytest.raises(InputError, match=f"^{re.escape(message)}$")


def test_every_limit_is_generous_and_cited_by_name():
    assert [(limit.name, int(limit)) for limit in map(limits.__dict__.get, limits.__all__[1:])] == [
        ("MAX_STAGES", 256), ("MAX_CHUNKS", 32), ("MAX_MICRO_BATCHES", 65536), ("MAX_SEQ_SPLIT", 1024),
        ("MAX_LAYERS", 2048), ("MAX_SIMULATED_PASSES", 1_000_000), ("MAX_MEMORY_MB", 2**30), ("MAX_TIME", 10**15),
        ("MAX_BUCKETS", 2**24), ("MAX_SWEEP_POINTS", 1000), ("MAX_DRY_RUNS", 64), ("MAX_THREADS", 256),
        ("MAX_FILE_MB", 16), ("MAX_DOCUMENT_VALUES", 1_000_000), ("MAX_MICROBATCH_SIZE", 2**20),
        ("MAX_DEVICES", 2**20), ("MAX_GLOBAL_BATCH", 2**24), ("MAX_SEQ_LENGTH", 2**24),
        ("MAX_EXPANDED_CHARS", 1_000_000), ("MAX_NESTING", 100), ("MAX_WIDTH", 2**24)]
    assert limits.MAX_STAGES.cited == "256 (sappkit.limits.MAX_STAGES)"


@pytest.mark.parametrize("arguments, message", [
    (dict(stages=2**70), "stages must be an int <= 256 (sappkit.limits.MAX_STAGES); got 1180591620717411303424"),
    (dict(stages=1e300), "stages must be an int <= 256 (sappkit.limits.MAX_STAGES); got 1e+300"),
    (dict(micro_batches=10**7), "micro_batches must be an int <= 65536 (sappkit.limits.MAX_MICRO_BATCHES); got "
                                "10000000"),
    (dict(chunks=10**5, schedule="interleaved"), "chunks must be an int <= 32 (sappkit.limits.MAX_CHUNKS); got 100000"),
    (dict(seq_split=2**70, schedule="seqpipe"), "seq_split must be an int <= 1024 (sappkit.limits.MAX_SEQ_SPLIT); got "
                                                "1180591620717411303424"),
    (dict(memory_mb=1e300), "memory_mb must be a number <= 1073741824 (sappkit.limits.MAX_MEMORY_MB); got 1e+300"),
    (dict(objective="step", stages=64, micro_batches=65536), "simulating 64 stages x 1 chunk(s) x 65536 micro-batches "
     "runs 4,194,304 forward passes; sappkit simulates at most 1000000 (sappkit.limits.MAX_SIMULATED_PASSES): lower "
     "micro_batches"),
])
def test_pipeline_sizes(arguments, message):
    with raises_exactly(message):
        balance(LAYERS, **{**PIPELINE, **arguments})


def test_solver_threads():
    with raises_exactly("threads must be an int <= 256 (sappkit.limits.MAX_THREADS); got 1000000000"):
        SolverOptions(threads=10**9)


def test_layers_and_dry_runs():
    with raises_exactly("layers row 0 (kind 'b') column 'count' is 10000000; expected at most 2048 "
                        "(sappkit.limits.MAX_LAYERS)"):
        balance(LAYERS.assign(count=10**7), **PIPELINE)
    with raises_exactly("layers must be an int <= 2048 (sappkit.limits.MAX_LAYERS); got 1000000000"):
        TransformerConfig(layers=10**9, hidden_size=8, num_heads=2, ffn_size=8, seq_length=8)
    with raises_exactly("layers must be an int <= 2048 (sappkit.limits.MAX_LAYERS); got 1000000000"):
        dryrun_config(stages=4, layers=10**9)
    with raises_exactly("stages must be an int <= 256 (sappkit.limits.MAX_STAGES); got 100000"):
        plan_dryruns(10**5, 10**6, ["none", "full"])
    with raises_exactly("max_runs must be an int <= 64 (sappkit.limits.MAX_DRY_RUNS); got 1000000"):
        plan_dryruns(8, 64, ["none", "full"], max_runs=10**6)


def test_rounds_of_a_dry_run_yaml(tmp_path):
    path = tmp_path / "rounds.yaml"
    path.write_text("pipeline_config: {pipeline_num: 4, num_layer: 8, offset: [" + ", ".join(["[0, 0, 0, 0]"] * 65)
                    + "]}\nmemory_usage: {head_memory: 1, tail_memory: 1, body_memories: {stage_id: [1], "
                    "memories: [1]}}\n")
    with raises_exactly(f"{path}: the lists of lists give 65 rounds; expected at most 64 "
                        "(sappkit.limits.MAX_DRY_RUNS)"):
        read_dryrun_yaml(path)
    path.write_text("pipeline_config: {pipeline_num: 1000000, num_layer: 10000000}\n"
                    "memory_usage: {head_memory: 1, tail_memory: 1, body_memories: {stage_id: [1], memories: [1]}}\n")
    with raises_exactly(f"{path}: pipeline_config.pipeline_num is 1000000; expected an int <= 256 "
                        "(sappkit.limits.MAX_STAGES)"):
        read_dryrun_yaml(path)


def test_simulations_sweeps_and_knapsack_buckets():
    costs = pd.DataFrame(dict(stage=[0, 1], chunk=0, forward_time=1.0, backward_time=2.0, activation_mb=1.0))
    with raises_exactly("simulating 2 stages x 1 chunk(s) x 65536 micro-batches x 16 slices runs 2,097,152 forward "
                        "passes; sappkit simulates at most 1000000 (sappkit.limits.MAX_SIMULATED_PASSES): lower "
                        "micro_batches"):
        simulate(costs, schedule="seqpipe", micro_batches=65536, seq_split=16)
    with raises_exactly("memory_mb lists more than 1000 (sappkit.limits.MAX_SWEEP_POINTS) memory limits; sweep "
                        "fewer"):
        sweep_memory(LAYERS, memory_mb=range(1, 10**5), stages=2, micro_batches=4)
    with raises_exactly("memory_mb lists more than 1000 (sappkit.limits.MAX_SWEEP_POINTS) memory limits; sweep "
                        "fewer"):
        sweep_recompute(LAYERS, PART, memory_mb=iter(int, 1))  # an endless iterator: only 1001 items are taken
    with raises_exactly("bucket_mb 1e-09 cuts memory_mb 1000 into 1e+12 buckets; expected at most 16777216 "
                        "(sappkit.limits.MAX_BUCKETS) (use bucket_mb >= 5.96e-05)"):
        choose_recompute(LAYERS, PART, memory_mb=1000, bucket_mb=1e-9)
    assert in_flight("1f1b", 256, 65536)["in_flight"].max() == 256
    assert LayerTable(LAYERS.assign(count=2048)).body_layers == 2048
