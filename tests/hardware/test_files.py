"""Hardware as files: the shipped presets read back exactly as they were in code, users' files override any field,
and bad files are refused naming the file and the key."""

import dataclasses
import json
from pathlib import Path

import pytest

from sappkit import InputError, evaluate_strategy
from sappkit.hardware import CLUSTER_PRESETS, DEVICE_PRESETS, Cluster, DeviceConfig, load, write
from sappkit.layers import TransformerConfig
from sappkit.strategy import Strategy

#: Every preset's fields as the presets were written in code before they became files (``dataclasses.asdict``).
BEFORE = json.loads((Path(__file__).parent / "preset_fields.json").read_text())


@pytest.mark.parametrize("kind, name", [("device", name) for name in DEVICE_PRESETS]
                         + [("cluster", name) for name in CLUSTER_PRESETS])
def test_each_shipped_file_loads_as_the_preset_was_field_for_field(kind, name):
    presets = DEVICE_PRESETS if kind == "device" else CLUSTER_PRESETS
    assert dataclasses.asdict(load(presets[name])) == BEFORE[kind][name]
    preset = (DeviceConfig if kind == "device" else Cluster).preset(name)
    assert load(presets[name]) == preset


def test_every_preset_of_before_is_still_shipped():
    assert set(DEVICE_PRESETS) == set(BEFORE["device"]) and set(CLUSTER_PRESETS) == set(BEFORE["cluster"])


@pytest.mark.parametrize("field", [field.name for field in dataclasses.fields(DeviceConfig) if field.name != "name"])
def test_a_user_file_overrides_any_device_field(tmp_path, field):
    base = DeviceConfig.preset("h100-sxm")
    # a value each field takes: a share in (0, 1), else one the reserve fits under
    shares = ("mfu", "hbm_efficiency", "comm_sm_share", "fp8_mfu")
    value = 0.5 if field in shares or field.endswith(("_forward", "_backward")) else 4096.0 if field == "memory_mib" \
        else 7.0
    (tmp_path / "mine.toml").write_text(f'kind = "device"\nbase = "h100-sxm"\n{field} = {value}\n')
    mine = load(tmp_path / "mine.toml")
    assert mine == dataclasses.replace(base, name="mine", **{field: value})


@pytest.mark.parametrize("field", [field.name for field in dataclasses.fields(Cluster)
                                   if field.name not in ("name", "device", "rank_order")])
def test_a_user_file_overrides_any_cluster_field(tmp_path, field):
    value = 0.5 if "efficiency" in field else 4
    (tmp_path / "ours.toml").write_text(f'kind = "cluster"\nbase = "dgx-h100"\n{field} = {value}\n')
    assert load(tmp_path / "ours.toml") == Cluster.preset("dgx-h100", name="ours", **{field: value})


def test_a_cluster_file_takes_its_device_by_name_file_or_table(tmp_path):
    (tmp_path / "gpu.toml").write_text('kind = "device"\nbase = "h100-sxm"\nmfu = 0.6\n')
    (tmp_path / "by_file.toml").write_text('kind = "cluster"\nbase = "dgx-h100"\ndevice = "gpu.toml"\n')
    (tmp_path / "by_table.toml").write_text('kind = "cluster"\nbase = "dgx-a100"\n[device]\nbase = "h100-sxm"\n'
                                            'mfu = 0.6\nname = "gpu"\n')
    (tmp_path / "by_name.toml").write_text('kind = "cluster"\nbase = "dgx-h100"\ndevice = "b200"\n')
    assert load(tmp_path / "by_file.toml").device == DeviceConfig.preset("h100-sxm", mfu=0.6, name="gpu")
    assert load(tmp_path / "by_table.toml").device == DeviceConfig.preset("h100-sxm", mfu=0.6, name="gpu")
    assert load(tmp_path / "by_table.toml").intra_node_gbs == 300.0
    assert load(tmp_path / "by_name.toml").device == DeviceConfig.preset("b200")


def test_written_files_read_back_equal_and_are_accepted_wherever_a_preset_name_is(tmp_path):
    cluster = Cluster.preset("dgx-a100", inter_efficiency=0.5, name="tuned",
                             device=DeviceConfig.preset("a100-80g", mfu=0.6, name="tuned-gpu"))
    path = write(cluster, tmp_path / "tuned.toml", notes={"inter_efficiency": "fitted", "device": {"mfu": "fitted"}})
    assert "inter_efficiency = 0.5  # fitted" in path.read_text() and "mfu = 0.6  # fitted" in path.read_text()
    assert load(path) == cluster == Cluster.preset(str(path)) == Cluster.preset(path)
    model, strategy = TransformerConfig(layers=4, hidden_size=1024, num_heads=16, ffn_size=4096,
                                        seq_length=2048, vocab_size=32000), Strategy(data_parallel=16)
    by_file = evaluate_strategy(model, strategy, cluster=path, global_batch=32).step_time
    by_object = evaluate_strategy(model, strategy, cluster=cluster, global_batch=32).step_time
    by_preset = evaluate_strategy(model, strategy, cluster="dgx-a100", global_batch=32).step_time
    assert by_file == by_object != by_preset


@pytest.mark.parametrize("text, message", [
    ('kind = "device"\ntflops = 100.0\nhbm = 3\n', "{path}: key 'hbm' is not a device field; expected one of kind, "
     "base, source, tflops, mfu, link_gbs, hbm_gbs, name, hbm_gb, fp32_tflops, fp8_tflops, matmul_half_gflop, "
     "hbm_efficiency, kernel_us, memory_mib, comm_sm_share, reserved_mib, expert_half_tokens, "
     "fp8_mfu, fp8_matmul_half_gflop, "
     "mxfp8_tflops, fa2_forward, fa2_backward, fa3_forward, fa3_backward, cudnn_forward, "
     "cudnn_backward"),
    ('kind = "device"\nmfu = 1.5\n', "{path}: mfu must be in (0, 1]; got 1.5"),
    ('kind = "device"\ntflops = "fast"\n', "{path}: tflops must be a finite number > 0; got 'fast'"),
    ('kind = "gpu"\n', "{path}: kind must be one of 'device', 'cluster'; got 'gpu'"),
    ('tflops = 1.0\n', "{path}: kind must be one of 'device', 'cluster'; got None"),
    ('kind = "device"\nbase = "dgx-h100"\n', "device must be one of 'a100-40g', 'a100-80g', 'ascend-910b', "
     "'b200', 'h100-96g-500w', 'h100-sxm', 'h200' or a hardware file (.toml); got 'dgx-h100'"),
    ('kind = "device"\nbase = "bad.toml"\n', "{path}: base 'bad.toml' is based on this file again"),
    ('kind = "cluster"\ndevice = "tpu"\n', "{path}: key 'device': device must be one of 'a100-40g', 'a100-80g', "
     "'ascend-910b', 'b200', 'h100-96g-500w', 'h100-sxm', 'h200' or a hardware file (.toml); got 'tpu'"),
    ('kind = "cluster"\ndevice = 3\n', "{path}: key 'device' must be a preset name, a file or a table; got 3"),
    ('kind = "cluster"\n[device]\nmfu = 2.0\n', "{path}: key 'device': mfu must be in (0, 1]; got 2.0"),
    ('kind = "cluster"\nbase = "dgx-h100"\nintra_node_gbs = 0\n',
     "{path}: intra_node_gbs must be a finite number > 0; got 0"),
    ('kind = "cluster"\nintra_node_gbs = 1.0\n', "{path}: Cluster.__init__() missing 1 required keyword-only "
     "argument: 'device'"),
    ('kind = "device"\ntflops = \n', "{path}: not valid TOML (Invalid value (at line 2, column 10)); expected a "
     "hardware file (TOML)"),
])
def test_bad_files_are_refused_naming_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        load(path)
    assert str(error.value) == message.format(path=path)


def test_a_missing_file_and_a_bad_override_are_refused():
    with pytest.raises(InputError) as error:
        Cluster.preset("nowhere.toml")
    assert str(error.value) == "nowhere.toml: no such file; expected a cluster file (TOML: kind = 'cluster' and " \
                               "Cluster's fields)"
    with pytest.raises(InputError) as error:
        write(3, "x.toml")
    assert str(error.value) == "config must be a DeviceConfig or a Cluster; got int"
