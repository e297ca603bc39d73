"""Kernel times from PyTorch profiler traces: a CPU trace recorded here and a CUDA fragment in Kineto's layout."""

from pathlib import Path

import pytest

from sappkit import InputError, calibrate, read_kernel_times
from sappkit.calibration.fit import with_values
from sappkit.calibration.kernels import kernels_observed
from sappkit.hardware import Cluster

#: A CUDA trace fragment written in the layout torch.profiler exports on an 8-GPU H100 node (cpu_op events with
#: record_shapes' args, the kernels they launched tied by "External id", NCCL kernels with their collective's
#: metadata); its durations are illustrative, not a measurement.
FRAGMENT = Path(__file__).parent / "cuda_trace_fragment.json"


def test_the_cuda_fragment_gives_gemm_shapes_attention_and_nccl_collectives_with_sizes():
    frame = read_kernel_times(FRAGMENT)
    gemms = frame[frame["kind"] == "gemm"]
    assert gemms[["m", "n", "k"]].values.tolist() == [[8192, 8192, 8192], [4096, 4096, 4096], [2048, 2048, 2048],
                                                      [1024, 1024, 1024], [8192, 2048, 8192], [4096, 8192, 8192]]
    assert gemms["flops"].iloc[0] == 2 * 8192**3 and gemms["nbytes"].iloc[0] == 2 * 3 * 8192**2
    assert gemms["duration_ms"].iloc[0] == pytest.approx(1.66) and set(gemms["op"]) == {"aten::mm", "aten::addmm"}
    (attention,) = frame[frame["kind"] == "attention"].itertuples()
    assert attention.op == "aten::_flash_attention_forward" and attention.flops == 4 * 4 * 32 * 4096 * 4096 * 128
    collectives = frame[frame["kind"] == "collective"]
    assert collectives["collective"].tolist() == ["all_reduce", "all_reduce", "all_gather", "reduce_scatter"]
    assert collectives["nbytes"].tolist() == [2 * 67108864, 2 * 16777216, 2 * 67108864, 2 * 67108864]
    assert set(collectives["ranks"]) == {8}


def test_a_cpu_trace_recorded_here_gives_its_gemms_attention_and_gloo_collective(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        a, b, x = torch.randn(64, 96), torch.randn(96, 32), torch.randn(1000)
        q = torch.randn(2, 4, 16, 8)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as recorded:
            torch.mm(a, b)
            torch.bmm(torch.randn(3, 64, 96), torch.randn(3, 96, 32))
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
            dist.all_reduce(x)
        recorded.export_chrome_trace(str(tmp_path / "trace.json"))
    finally:
        dist.destroy_process_group()
    frame = read_kernel_times(tmp_path / "trace.json")
    gemms = frame[frame["kind"] == "gemm"]
    assert gemms[["op", "batch", "m", "n", "k"]].values.tolist() == [["aten::mm", 1, 64, 32, 96],
                                                                     ["aten::bmm", 3, 64, 32, 96]]
    assert (gemms["duration_ms"] > 0).all() and gemms["dtype"].tolist() == ["float", "float"]
    attention = frame[frame["kind"] == "attention"]
    assert attention["flops"].tolist() == [4 * 2 * 4 * 16 * 16 * 8]
    (collective,) = frame[frame["kind"] == "collective"].itertuples()
    assert (collective.collective, collective.nbytes, collective.ranks) == ("all_reduce", 4000.0, 1)


def test_calibrate_from_kernels_recovers_the_matmul_curve_and_the_link():
    truth = with_values(Cluster.preset("dgx-h100"), {"mfu": 0.62, "matmul_half_gflop": 3.0, "intra_efficiency": 0.7})
    frame = read_kernel_times(FRAGMENT)
    observed = kernels_observed(frame)
    fitted_rows = frame[frame["kind"] != "attention"].reset_index(drop=True)
    frame.loc[frame["kind"] != "attention", "duration_ms"] = observed.predict(truth)
    assert len(fitted_rows) == len(observed.measured) == 10
    result = calibrate(kernels=frame, base="dgx-h100", fit=["mfu", "matmul_half_gflop", "intra_efficiency"])
    values = result.parameters.set_index("parameter")["value"]
    assert values["mfu"] == pytest.approx(0.62, abs=2e-3)
    assert values["intra_efficiency"] == pytest.approx(0.7, abs=2e-3)
    assert values["matmul_half_gflop"] == pytest.approx(3.0, abs=0.1)
    assert result.runs["run"].iloc[0] == "gemm 8192x8192x8192"
    assert result.runs["run"].iloc[-1] == "collective reduce_scatter 128.0 MiB x8"


def test_traces_without_kernels_are_refused(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 1}]}')
    with pytest.raises(InputError) as error:
        read_kernel_times(path)
    assert str(error.value) == (f"{path}: no GEMM, attention or collective in the trace (record it with "
                                "torch.profiler.profile(record_shapes=True) so the ops carry their shapes)")
    path.write_text('{"events": []}')
    with pytest.raises(InputError) as error:
        read_kernel_times(path)
    assert str(error.value) == f"{path}: no 'traceEvents' list; expected a PyTorch profiler trace (Chrome trace JSON)"


@pytest.mark.slow
def test_the_device_benchmark_writes_a_file_that_loads_back(tmp_path, capsys):
    pytest.importorskip("torch")
    from sappkit.cli import main
    from sappkit.hardware import load

    assert main(["bench-device", "--device", "cpu", "--repeats", "1", "--threads", "1",
                 "--out", str(tmp_path / "cpu.toml")]) == 0
    printed = capsys.readouterr().out
    device = load(tmp_path / "cpu.toml")
    assert printed.startswith("measured-cpu: fastest GEMM") and device.name == "measured-cpu"
    assert 0 < device.mfu <= 1 and device.tflops > 0 and device.hbm_gbs > 0
    assert "# fitted to the GEMM sweep" in (tmp_path / "cpu.toml").read_text()


@pytest.mark.slow
def test_the_collectives_benchmark_fits_a_link_that_prices_its_times_and_writes_a_cluster(tmp_path):
    pytest.importorskip("torch")
    from sappkit.hardware import load
    from sappkit.torch import benchmark_collectives

    result = benchmark_collectives(2, sizes_mb=(0.0625, 1.0), repeats=1)
    frame = result.frame
    assert frame[["collective", "nbytes", "ranks"]].values.tolist() == [
        [kind, size * 2**20, 2] for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
        for size in (0.0625, 1.0)]
    assert (frame["duration_ms"] > 0).all() and result.cluster.intra_node_gbs > 0
    assert load(result.write(tmp_path / "node.toml")) == result.cluster
