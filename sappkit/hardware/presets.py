"""Devices and clusters people train on, as data, each number with its source.

Peaks, memory and link bandwidths come from the vendors' datasheets (cited
in each preset's docstring; dense peaks, without structured sparsity). The
efficiencies (``mfu``, ``matmul_half_gflop``, ``hbm_efficiency``,
``kernel_us`` of a device; ``intra_efficiency``, ``inter_efficiency`` of a
cluster) are physical parameters fitted once per device on published runs
(``data/calibrate.py``; ``data/README.md`` says on which rows); a device
without published runs keeps the defaults of :class:`DeviceConfig` for them
and says so. Any field can be overridden: ``DeviceConfig.preset("h100-sxm",
hbm_gb=94.0)``, ``Cluster.preset("dgx-h100", nodes=128)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from ..errors import InputError
from .cluster import Cluster
from .device import DeviceConfig

__all__ = ["DEVICE_PRESETS", "CLUSTER_PRESETS", "device_preset", "cluster_preset", "A100_CALIBRATION",
           "H100_CALIBRATION"]

#: The A100's efficiencies, fitted on the 18 published A100 runs of ``data/published_runs.csv`` by
#: ``data/calibrate.py --fix inter_efficiency=0.86`` (then the DGX A100's intra-node link efficiency, fitted with
#: them, and its inter-node one, measured: NVIDIA/nccl-tests issue #175, two 8 x A100 nodes with 4 x 200 Gb/s
#: cards all-reduce at 86 GB/s bus bandwidth of 100 GB/s; the same report's one node, 232.5 GB/s of 300, agrees
#: with the fitted 0.75).
A100_CALIBRATION = dict(mfu=0.7312, matmul_half_gflop=0.75, hbm_efficiency=0.6125, kernel_us=5.0)
_DGX_A100_LINKS = dict(intra_efficiency=0.75, inter_efficiency=0.86)
#: The H100's compute efficiencies, fitted on the 33 dense BF16 NeMo rows of NVIDIA dgxc-benchmarking v25.04.01 in
#: ``data/published_runs.csv`` (Llama 3.1 8B/70B/405B, Nemotron-4 15B/340B, GPT-3 175B on DGX H100) by
#: ``data/calibrate.py --cluster dgx-h100`` with the memory-bound and link parameters held at the A100's (two
#: fitted parameters: ``mfu`` and ``matmul_half_gflop``; ``data/README.md`` gives the command and the rows).
H100_CALIBRATION = dict(mfu=0.65, matmul_half_gflop=7.5, hbm_efficiency=0.6125, kernel_us=5.0)


def a100_80g(**overrides) -> DeviceConfig:
    """NVIDIA A100 SXM4 80 GB.

    NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-nvidia-us-2188504-web, June 2021): BF16/FP16
    tensor 312 TFLOP/s dense (624 sparse), TF32 156, FP32 19.5; 80 GB HBM2e at 2,039 GB/s; NVLink 600 GB/s
    (both directions: 300 GB/s each way); 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper), 16 of
    them taken by an overlapped collective (:class:`DeviceConfig`'s ``comm_sm_share``). As the card reports it
    (``nvidia-smi`` memory.total, listed in modal-labs/modal-client pull request #2797): 81,920 MiB. Efficiencies: :data:`A100_CALIBRATION`.
    """
    return DeviceConfig(**{**dict(name="a100-80g", tflops=312.0, fp32_tflops=156.0, hbm_gb=80.0, hbm_gbs=2039.0,
                                  memory_mib=81920.0, comm_sm_share=16 / 108, link_gbs=300.0, **A100_CALIBRATION),
                           **overrides})


def a100_40g(**overrides) -> DeviceConfig:
    """NVIDIA A100 SXM4 40 GB.

    NVIDIA A100 Tensor Core GPU datasheet (as :func:`a100_80g`): the same peaks; 40 GB HBM2 at 1,555 GB/s;
    reported 40,960 MiB (the same list). Efficiencies: the A100 80 GB's (the same chip).
    """
    return a100_80g(**{**dict(name="a100-40g", hbm_gb=40.0, hbm_gbs=1555.0, memory_mib=40960.0), **overrides})


def h100_sxm(**overrides) -> DeviceConfig:
    """NVIDIA H100 SXM5 80 GB.

    NVIDIA H100 Tensor Core GPU datasheet (h100-datasheet-2287922, 2023): BF16/FP16 tensor 1,979 TFLOP/s with
    sparsity, so 989.4 dense; FP8 3,958 sparse (1,978.9 dense); TF32 989 sparse (494.7 dense); 80 GB HBM3 at
    3.35 TB/s; NVLink 900 GB/s (450 GB/s each way); reported 81,559 MiB (``nvidia-smi`` of an "H100 80GB HBM3":
    modal-labs/modal-client pull request #2797, NVIDIA/nccl issue #1264); 132 SMs (NVIDIA H100 Tensor Core GPU
    Architecture whitepaper), 16 of them per overlapped collective. Efficiencies: :data:`H100_CALIBRATION`.
    """
    return DeviceConfig(**{**dict(name="h100-sxm", tflops=989.4, fp32_tflops=494.7, fp8_tflops=1978.9, hbm_gb=80.0,
                                  hbm_gbs=3350.0, memory_mib=81559.0, comm_sm_share=16 / 132, link_gbs=450.0,
                                  **H100_CALIBRATION),
                           **overrides})


def h200(**overrides) -> DeviceConfig:
    """NVIDIA H200 SXM 141 GB.

    NVIDIA H200 Tensor Core GPU datasheet (2024): the H100 SXM's peaks (BF16 1,979 TFLOP/s sparse, 989.4 dense;
    FP8 3,958 sparse); 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s; reported 143,771 MiB (``nvidia-smi`` of an
    "NVIDIA H200", as published logs of the card show it). Efficiencies: the H100's (the same GH100 chip;
    no H200 row calibrates them).
    """
    return h100_sxm(**{**dict(name="h200", hbm_gb=141.0, hbm_gbs=4800.0, memory_mib=143771.0), **overrides})


def b200(**overrides) -> DeviceConfig:
    """NVIDIA B200 (HGX/DGX B200, 1,000 W).

    NVIDIA DGX B200 datasheet (2024): 8 GPUs with 1,440 GB HBM3e (180 GB each) at 64 TB/s (8 TB/s each), 72
    PFLOP/s FP8 training with sparsity (9 per GPU, so 4.5 dense), NVLink 5 at 1.8 TB/s per GPU (900 GB/s each
    way); HGX B200 datasheet: BF16/FP16 tensor 4.5 PFLOP/s sparse per GPU (2,250 dense), TF32 2.2 sparse;
    reported 183,359 MiB (``nvidia-smi`` of an "NVIDIA B200": NVIDIA/TensorRT-LLM issue #10278); 148 SMs (CUDA's
    device query of a B200, as pytorch/ao pull request #4002 prints it), 16 per overlapped collective. Efficiencies:
    the A100's (an assumption: the B200 rows here are MoE runs, whose errors are the MoE model's, not fitted).
    """
    return DeviceConfig(**{**dict(name="b200", tflops=2250.0, fp32_tflops=1100.0, fp8_tflops=4500.0, hbm_gb=180.0,
                                  hbm_gbs=8000.0, memory_mib=183359.0, comm_sm_share=16 / 148, link_gbs=900.0,
                                  **A100_CALIBRATION),
                           **overrides})


def ascend_910b(**overrides) -> DeviceConfig:
    """Huawei Ascend 910B.

    Huawei publishes no datasheet for the 910B. Gitee AI's Ascend 910B page (ai.gitee.com, "Ascend 910B",
    section 2.2): FP16 280 TFLOP/s, 64 GB HBM2e, HCCS full mesh between the 8 NPUs of a server. Not sourced
    (sappkit's previous generic defaults, kept): HBM bandwidth 1,600 GB/s and a 50 GB/s NPU-to-NPU link.
    Efficiencies: :class:`DeviceConfig`'s defaults (matmuls at a flat 40%), no published run calibrates them.
    Memory as reported: not sourced, ``hbm_gb`` bytes.
    """
    return DeviceConfig(**{**dict(name="ascend-910b", tflops=280.0, hbm_gb=64.0, hbm_gbs=1600.0, link_gbs=50.0),
                           **overrides})


#: Device presets by name.
DEVICE_PRESETS: dict[str, Callable[..., DeviceConfig]] = {
    "a100-80g": a100_80g, "a100-40g": a100_40g, "h100-sxm": h100_sxm, "h200": h200, "b200": b200,
    "ascend-910b": ascend_910b,
}


def dgx_a100(**overrides) -> Cluster:
    """NVIDIA DGX A100 nodes (Selene is a DGX SuperPOD of them).

    NVIDIA DGX A100 datasheet and user guide: 8 A100 80 GB per node on NVSwitch (600 GB/s per GPU both ways, so
    300 GB/s each way), 8 ConnectX-6 HDR InfiniBand cards of 200 Gb/s for compute traffic (25 GB/s per GPU each
    way). Link efficiencies fitted with the A100's (:data:`A100_CALIBRATION`).
    """
    fields = dict(name="dgx-a100", device=a100_80g(), devices_per_node=8, intra_node_gbs=300.0, inter_node_gbs=25.0,
                  latency_us=5.0, inter_latency_us=10.0, **_DGX_A100_LINKS)
    return _cluster(fields, overrides)


def dgx_h100(**overrides) -> Cluster:
    """NVIDIA DGX H100 nodes.

    NVIDIA DGX H100 datasheet: 8 H100 SXM5 80 GB per node on NVSwitch (900 GB/s per GPU both ways, 450 each
    way), 8 ConnectX-7 cards of 400 Gb/s for compute traffic (50 GB/s per GPU each way). Link efficiencies:
    the DGX A100's (an assumption).
    """
    fields = dict(name="dgx-h100", device=h100_sxm(), devices_per_node=8, intra_node_gbs=450.0, inter_node_gbs=50.0,
                  latency_us=5.0, inter_latency_us=10.0, **_DGX_A100_LINKS)
    return _cluster(fields, overrides)


def dgx_b200(**overrides) -> Cluster:
    """NVIDIA DGX B200 nodes.

    NVIDIA DGX B200 datasheet: 8 B200 per node on NVLink 5 (1.8 TB/s per GPU both ways, 900 each way), 8
    ConnectX-7 cards of 400 Gb/s for compute traffic (50 GB/s per GPU each way). Link efficiencies: the DGX
    A100's (an assumption).
    """
    fields = dict(name="dgx-b200", device=b200(), devices_per_node=8, intra_node_gbs=900.0, inter_node_gbs=50.0,
                  latency_us=5.0, inter_latency_us=10.0, **_DGX_A100_LINKS)
    return _cluster(fields, overrides)


def atlas_800t_a2(**overrides) -> Cluster:
    """Huawei Atlas 800T A2 training servers (8 Ascend 910B each).

    Gitee AI's Ascend 910B page: 8 NPUs per server, fully meshed by HCCS. Not sourced (commonly quoted, no
    Huawei datasheet found): 8 x 200 GE RoCE ports per server (25 GB/s per NPU each way) and the NPU-to-NPU
    bandwidth of :func:`ascend_910b`. Link efficiencies: none assumed (1.0).
    """
    fields = dict(name="atlas-800t-a2", device=ascend_910b(), devices_per_node=8, intra_node_gbs=50.0,
                  inter_node_gbs=25.0, latency_us=5.0, inter_latency_us=10.0)
    return _cluster(fields, overrides)


#: Cluster presets by name.
CLUSTER_PRESETS: dict[str, Callable[..., Cluster]] = {
    "dgx-a100": dgx_a100, "dgx-h100": dgx_h100, "dgx-b200": dgx_b200, "atlas-800t-a2": atlas_800t_a2,
}


def _cluster(fields: dict, overrides: dict) -> Cluster:
    if isinstance(overrides.get("device"), str):
        overrides = {**overrides, "device": device_preset(overrides["device"])}
    return Cluster(**{**fields, **overrides})


def _lookup(kind: str, presets: dict, name, config: type, overrides: dict):
    if not isinstance(name, str) or name not in presets:
        raise InputError(f"{kind} must be one of {', '.join(map(repr, presets))}; got {name!r}")
    known = [field.name for field in fields(config)]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise InputError(f"{kind} preset {name!r} has no field {unknown[0]!r}; its fields: {', '.join(known)}")
    return presets[name](**overrides)


def device_preset(name: str, **overrides) -> DeviceConfig:
    """The device preset ``name`` with ``overrides`` (see :data:`DEVICE_PRESETS`)."""
    return _lookup("device", DEVICE_PRESETS, name, DeviceConfig, overrides)


def cluster_preset(name: str, **overrides) -> Cluster:
    """The cluster preset ``name`` with ``overrides`` (see :data:`CLUSTER_PRESETS`)."""
    return _lookup("cluster", CLUSTER_PRESETS, name, Cluster, overrides)
