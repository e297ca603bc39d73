"""calibrate: parameters recovered from runs the model itself priced, refused where the runs cannot identify them,
and the shipped presets' fitted values reproduced from the published runs given as trainers' log lines."""

import numpy as np
import pytest

from sappkit import InputError, calibrate, evaluate_strategy, read_run
from sappkit.calibration import Run, measured_step_ms
from sappkit.calibration.fit import PARAMETERS, value_of, with_values
from sappkit.cli import main
from sappkit.hardware import Cluster, load
from sappkit.layers import KernelConfig, TransformerConfig
from sappkit.layers.flops import megatron_sc21_flops
from sappkit.strategy import Strategy
from sappkit.strategy.validation import PUBLISHED_ATTENTION, published_runs, run_inputs

from .test_logs import MEGATRON, NEMO, TORCHTITAN

SMALL = TransformerConfig(layers=4, hidden_size=2048, num_heads=16, ffn_size=8192, seq_length=2048, vocab_size=32000)
#: What each preset's file says was measured rather than fitted (held at its value when refitting).
MEASURED = {"dgx-a100": ("inter_efficiency",)}
#: What each shipped preset fitted, on which rows (data/README.md): the A100 all but the measured network
#: efficiency on its 18 rows, the H100 its matmul curve on the 33 dense dgxc rows, the rest held at the A100's.
#: The H100's fit on its published rows is tests/calibration/test_published_h100.py's (as launch scripts and logs).
SHIPPED_FITS = {"dgx-a100": (None, lambda run: True)}


def _one_node_runs(truth: Cluster) -> list[Run]:
    """Runs on one node of ``truth`` (tensor parallel 1 to 8), their steps as the model prices them there."""
    runs = []
    for t in (1, 2, 4, 8):
        strategy = Strategy(tensor_parallel=t, data_parallel=8 // t)
        step = evaluate_strategy(SMALL, strategy, cluster=truth, global_batch=64).step_time
        runs.append(Run(f"tp{t}", SMALL, strategy, 64, step_ms=step))
    return runs


def test_parameters_are_recovered_from_runs_priced_with_them_and_the_unreached_link_is_not_determined():
    truth = with_values(Cluster.preset("dgx-h100"), {"mfu": 0.55, "intra_efficiency": 0.6})
    result = calibrate(_one_node_runs(truth), "dgx-h100", fit=["mfu", "intra_efficiency", "inter_efficiency"])
    parameters = result.parameters.set_index("parameter")
    assert parameters.at["mfu", "value"] == pytest.approx(0.55, abs=2e-3)
    assert parameters.at["intra_efficiency", "value"] == pytest.approx(0.6, abs=5e-3)
    assert parameters.loc[["mfu", "intra_efficiency", "inter_efficiency"], "status"].tolist() == \
        ["fitted", "fitted", "not determined"]
    assert parameters.at["inter_efficiency", "value"] == 0.86
    assert np.abs(result.runs["error_after"]).max() < 2e-3 < np.abs(result.runs["error_before"]).max()
    assert result.describe().splitlines()[-1] == ("not determined by these runs (no run's step depends on them; "
                                                  "kept at the base's value): inter_efficiency")


MOE = TransformerConfig(layers=4, hidden_size=2048, num_heads=16, ffn_size=8192, seq_length=2048, vocab_size=32000,
                        experts=16, top_k=2, expert_ffn_size=1024)


@pytest.mark.parametrize("name, value, model, dtype", [("expert_half_tokens", 400.0, MOE, "bf16"),
                                                        ("fp8_mfu", 0.5, SMALL, "fp8"),
                                                        ("fp8_matmul_half_gflop", 12.0, SMALL, "fp8")])
def test_the_moe_and_fp8_parameters_are_fitted_from_runs_that_use_them_and_not_determined_by_others(name, value,
                                                                                                   model, dtype):
    truth = with_values(Cluster.preset("dgx-h100"), {name: value})
    runs = []
    for t in (1, 2, 4, 8):
        strategy = Strategy(tensor_parallel=t, data_parallel=8 // t, expert_parallel=8 // t if model.experts else 1,
                            dtype=dtype)
        step = evaluate_strategy(model, strategy, cluster=truth, global_batch=64).step_time
        runs.append(Run(f"tp{t}", model, strategy, 64, step_ms=step))
    parameters = calibrate(runs, "dgx-h100", fit=[name]).parameters.set_index("parameter")
    assert parameters.at[name, "status"] == "fitted"
    assert parameters.at[name, "value"] == pytest.approx(value, rel=1e-2)
    other = calibrate(_one_node_runs(truth), "dgx-h100", fit=["mfu", name]).parameters.set_index("parameter")
    assert other.loc[["mfu", name], "status"].tolist() == ["fitted", "not determined"]


def test_a_fit_of_more_parameters_than_the_runs_identify_is_refused():
    runs = _one_node_runs(Cluster.preset("dgx-h100"))[:2]
    with pytest.raises(InputError) as error:
        calibrate(runs, "dgx-h100", fit=["mfu", "matmul_half_gflop", "hbm_efficiency", "kernel_us"])
    assert str(error.value) == ("the runs identify 2 of the 4 parameters to fit (mfu, matmul_half_gflop, "
                                "hbm_efficiency, kernel_us): only 2 observations; fix some (fix=... or --fix "
                                "NAME=VALUE) or add runs that differ in them")


def _published_run(row, index: int) -> Run:
    """A published row as a run whose step comes from a log in one of the three trainers' formats (in turn)."""
    model, strategy, batch = run_inputs(row)
    if row["metric"] == "tflops_sc21":
        flops = megatron_sc21_flops(model, batch=batch, recompute=row["recompute"] == "full")
        step_ms = flops / (float(row["measured"]) * 1e12 * strategy.devices) * 1e3
    else:
        step_ms = float(row["measured"]) * 1e3
    tokens = batch * model.seq_length / strategy.devices
    steps = [(i, step_ms * (4 if i <= 10 else 1 + 0.002 * (i % 3 - 1))) for i in range(1, 21)]
    line = (MEGATRON, NEMO, TORCHTITAN)[index % 3]
    log = "\n".join(line.format(i=i, s=i * batch, ms=ms, sec=ms / 1e3, tps=round(tokens / (ms / 1e3)))
                    for i, ms in steps)
    measured = measured_step_ms(log, tokens_per_device=tokens)
    # torchtitan prints whole tokens per second: ~1% off on runs of few tokens per device and second
    assert measured == pytest.approx(step_ms, rel=0.05)
    return Run(row["run"], model, strategy, batch, step_ms=measured, recompute=row["recompute"],
               kernels=KernelConfig(attention=str(row.get("attention", PUBLISHED_ATTENTION))))


@pytest.mark.slow
@pytest.mark.parametrize("cluster", sorted(SHIPPED_FITS))
def test_the_published_runs_as_logs_reproduce_the_shipped_parameters_within_their_uncertainty(cluster):
    rows = published_runs()
    fit, chosen = SHIPPED_FITS[cluster]
    rows = rows[(rows["cluster"] == cluster) & rows["run"].map(chosen)]
    runs = [_published_run(row, index) for index, (_, row) in enumerate(rows.iterrows())]
    shipped = Cluster.preset(cluster)
    free = [name for name in PARAMETERS if name not in MEASURED.get(cluster, ())] if fit is None else list(fit)
    fixed = {name: value_of(shipped, name) for name in PARAMETERS if name not in free}
    start = with_values(shipped, {name: (low + high) / 2 for name, (low, high) in PARAMETERS.items() if name in free})
    result = calibrate(runs, start, fix=fixed)
    fitted = result.parameters[result.parameters["status"] == "fitted"]
    assert len(fitted) >= min(4, len(free))
    for row in fitted.itertuples():
        value = getattr(shipped.device if hasattr(shipped.device, row.parameter) else shipped, row.parameter)
        assert abs(row.value - value) <= 2 * row.uncertainty, (row.parameter, row.value, value, row.uncertainty)
    assert result.runs["error_after"].abs().mean() <= result.runs["error_before"].abs().mean()


def test_a_run_is_read_from_a_trainer_config_a_model_and_a_log(tmp_path):
    log = tmp_path / "titan.log"
    tokens = 256 * 4096 / 1024
    log.write_text("\n".join(TORCHTITAN.format(i=i, tps=round(tokens / 3.0)) for i in range(1, 21)))
    run = read_run("data/torchtitan_llama2_70b.toml", "llama2-70b", log, world_size=1024)
    assert (run.name, run.global_batch, run.recompute, run.strategy.devices) == ("titan", 256, "full", 1024)
    assert run.step_ms == pytest.approx(3000.0, rel=1e-3)
    with pytest.raises(InputError) as error:
        read_run("data/megatron_llama2_70b.sh", "llama2-70b", log)
    assert str(error.value) == ("data/megatron_llama2_70b.sh: its layers run different recompute options (full, "
                                "none); calibrate prices runs whose body layers all run one")


def test_the_command_fits_one_parameter_and_writes_a_file_that_prices_the_run(tmp_path, capsys):
    config = tmp_path / "run.sh"
    config.write_text("torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 4 --hidden-size 2048 "
                      "--num-attention-heads 16 --seq-length 2048 --tensor-model-parallel-size 8 "
                      "--micro-batch-size 1 --global-batch-size 64 --bf16\n")
    model = tmp_path / "config.json"
    model.write_text('{"hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 4, '
                     '"intermediate_size": 8192, "max_position_embeddings": 2048, "vocab_size": 32000}')
    log = tmp_path / "train.log"
    log.write_text("\n".join(MEGATRON.format(i=i, s=i, ms=400.0) for i in range(1, 21)))
    fixed = [f"{name}={value}" for name, value in (("matmul_half_gflop", 0.75), ("hbm_efficiency", 0.6125),
                                                   ("kernel_us", 5.0), ("intra_efficiency", 0.75),
                                                   ("inter_efficiency", 0.86))]
    out = tmp_path / "mine.toml"
    assert main(["calibrate", f"{config},{model},{log}", "--base", "dgx-h100", "--fix", *fixed,
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("calibrated dgx-h100-calibrated on 1 runs") and f"wrote {out}" in printed
    mine = load(out)
    run = read_run(config, model, log)
    step = evaluate_strategy(run.model, run.strategy, cluster=mine, global_batch=64, recompute="none").step_time
    assert step == pytest.approx(400.0, rel=2e-3) and mine.device.mfu != Cluster.preset("dgx-h100").device.mfu
    assert "# fitted on 1 runs by sappkit calibrate" in out.read_text()
