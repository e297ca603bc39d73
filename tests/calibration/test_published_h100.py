"""The shipped H100 parameters recovered by ``calibrate`` from the published DGX H100 runs, given as a user has them:
a Megatron-LM launch script per run and its training log (NeMo 2's ``train_step_timing in s`` and Megatron-LM's
``elapsed time per iteration (ms)`` lines, in turn), the step the source published.

The runs and the held values are those of the three H100 fits of ``data/calibrate.py`` (its docstring, items 1-3):
the dense BF16 rows fit ``mfu`` and ``matmul_half_gflop``, the MoE BF16 rows ``expert_half_tokens``, the dense FP8
rows ``fp8_mfu`` (its half-size tied to the 16-bit one, ``h100-sxm.toml``), everything else held at the preset's
value. Each fit starts away
from the shipped values (the middle of each parameter's range), so that recovering them is not the start left
in place. ``data/calibrate.py`` minimises the rows' metric errors by a coordinate search, ``calibrate`` the step
times' by least squares: the two may part by a little.
"""

import numpy as np
import pytest

from sappkit import calibrate, read_run
from sappkit.calibration.fit import PARAMETERS, value_of, with_values
from sappkit.hardware import Cluster
from sappkit.strategy.validation import family, published_runs, run_inputs
from sappkit.trainers.megatron import megatron_args

from .test_logs import MEGATRON, NEMO

#: Fit -> (the parameters it fits, the parameters its runs do not use, which H100 rows it fits them on: run-name
#: prefixes (None: the dense rows) and dtype), as ``data/calibrate.py`` runs it.
FITS = {
    "dense-bf16": (("mfu", "matmul_half_gflop"), ("expert_half_tokens", "fp8_mfu", "fp8_matmul_half_gflop"),
                   ("dgxc-llama31", "dgxc-nemotron4", "dgxc-gpt3"), "bf16"),
    "moe-bf16": (("expert_half_tokens",), ("fp8_mfu", "fp8_matmul_half_gflop"),
                 ("dgxc-grok1", "mb2604-gptoss-120b-h100"), "bf16"),
    "dense-fp8": (("fp8_mfu",), ("expert_half_tokens",), None, "fp8"),
}
#: Megatron-LM's recompute flags per option the rows run.
RECOMPUTE_FLAGS = {"none": "", "selective": " --recompute-granularity selective --recompute-modules core_attn"}
GPUS_PER_NODE = 8


def _rows(prefixes, dtype):
    rows = published_runs()
    rows = rows[(rows["cluster"] == "dgx-h100") & (rows["dtype"] == dtype)]
    if prefixes is None:
        return [row for _, row in rows.iterrows() if family(*run_inputs(row)[:2]) == "dense"]
    return [row for _, row in rows.iterrows() if row["run"].startswith(prefixes)]


def _step_ms(row, model, batch, devices) -> float:
    if row["metric"] == "tokens_per_s_per_gpu":
        return batch * model.seq_length / (float(row["measured"]) * devices) * 1e3
    assert row["metric"] == "iteration_s"
    return float(row["measured"]) * 1e3


def _run_files(row, index: int, folder):
    """A row as the launch script and the training log a user has: (script, model, log)."""
    model, strategy, batch = run_inputs(row)
    args = megatron_args(strategy, num_layers=model.layers, global_batch=batch, attention=row["attention"]).line()
    script = folder / f"{row['run']}.sh"
    script.write_text(f"#!/bin/bash\nGPUS_PER_NODE={GPUS_PER_NODE}\nNNODES={strategy.devices // GPUS_PER_NODE}\n"
                      "torchrun --nproc-per-node $GPUS_PER_NODE --nnodes $NNODES pretrain_gpt.py "
                      f"{args}{RECOMPUTE_FLAGS[row['recompute']]}\n")
    step_ms = _step_ms(row, model, batch, strategy.devices)
    # warm-up steps 4x slower, then a +-0.2% spread around the published step: the median is the published step
    steps = [(i, step_ms * (4 if i <= 10 else 1 + 0.002 * (i % 3 - 1))) for i in range(1, 22)]
    line = (NEMO, MEGATRON)[index % 2]
    log = folder / f"{row['run']}.log"
    log.write_text("\n".join(line.format(i=i, s=i * batch, ms=ms, sec=ms / 1e3) for i, ms in steps) + "\n")
    return script, model, log


def published_fit(name: str, folder):
    """The fit ``name`` of :data:`FITS` on its rows' files in ``folder``: the parameters it fits start from the
    middle of their range, those its runs do not use are left free, the rest are held at the shipped value."""
    fitted, unused, prefixes, dtype = FITS[name]
    shipped = Cluster.preset("dgx-h100")
    runs = [_run_files(row, index, folder) for index, row in enumerate(_rows(prefixes, dtype))]
    held = {key: value_of(shipped, key) for key in PARAMETERS if key not in fitted + unused}
    start = with_values(shipped, {key: sum(PARAMETERS[key]) / 2 for key in fitted})
    return calibrate(runs, start, fix=held)


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    return {name: published_fit(name, tmp_path_factory.mktemp(name)) for name in FITS}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FITS))
def test_the_published_runs_as_scripts_and_logs_recover_the_shipped_h100_parameters(fits, name):
    result, shipped = fits[name], Cluster.preset("dgx-h100")
    fitted, unused, *_ = FITS[name]
    parameters = result.parameters.set_index("parameter")
    assert parameters.loc[list(fitted), "status"].tolist() == ["fitted"] * len(fitted)
    assert parameters.loc[list(unused), "status"].tolist() == ["not determined"] * len(unused)
    assert parameters.loc[list(unused), "value"].tolist() == [value_of(shipped, key) for key in unused]
    for key in fitted:
        value, sigma = parameters.at[key, "value"], parameters.at[key, "uncertainty"]
        assert np.isfinite(sigma) and sigma > 0
        assert abs(value - value_of(shipped, key)) <= 2 * sigma, (key, value, sigma, value_of(shipped, key))
    assert result.runs["error_after"].abs().mean() < result.runs["error_before"].abs().mean()
    assert "not determined by these runs" in result.describe()


@pytest.mark.parametrize("name", sorted(FITS))
def test_the_launch_scripts_read_back_to_the_published_strategies_and_kernels(name, tmp_path):
    rows = _rows(*FITS[name][2:])
    assert len(rows) == {"dense-bf16": 33, "moe-bf16": 10, "dense-fp8": 37}[name]  # data/calibrate.py's counts
    for index, row in enumerate(rows):
        model, strategy, batch = run_inputs(row)
        run = read_run(*_run_files(row, index, tmp_path))
        assert (run.strategy, run.global_batch, run.recompute, run.kernels.attention) == (
            strategy, batch, row["recompute"], row["attention"]), row["run"]
        # the logs print 0.1 ms (Megatron-LM) or 0.1 ms in seconds (NeMo 2's four decimals)
        assert run.step_ms == pytest.approx(_step_ms(row, model, batch, strategy.devices), abs=0.05)
