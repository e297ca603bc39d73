"""Fit a device generation's physical parameters on its published runs (data/README.md, "Published runs").

Run from the repository root: ``python data/calibrate.py [--cluster NAME] [--runs PREFIX ...] [--fix NAME=VALUE
...]``. ``--cluster`` (default ``dgx-a100``) picks the rows run on that cluster preset and the device it holds;
on the A100 it fits the A100's ``mfu`` (what large matmuls reach), ``matmul_half_gflop``, ``hbm_efficiency`` and ``kernel_us`` and
the DGX A100's ``intra_efficiency`` and ``inter_efficiency`` (less those ``--fix`` holds), by minimising the root
mean square of the rows' errors with a coordinate search (each parameter in turn, steps halved until none helps
and each is below 1% of its range), and prints the values and each row's error. ``--runs sc21`` fits on the rows
whose ``run`` starts with ``sc21`` only and reports the others as held out. The presets' values came from
``python data/calibrate.py --fix inter_efficiency=0.86`` and are written by hand into
``sappkit/hardware/presets/a100-80g.toml`` and ``dgx-a100.toml`` (the DGX A100's link efficiencies). The other
presets' fits run in this order, each holding what the ones before it fitted:

1. the H100's ``mfu`` and ``matmul_half_gflop`` (``h100-sxm.toml``: ``0.6``, ``1``) on the 33 dense BF16 NeMo rows of
   dgxc-benchmarking, with their TP communication overlap, ring CP and cuDNN attention priced as they ran, the
   memory-bound and link parameters kept at the A100's: ``python data/calibrate.py --cluster dgx-h100 --runs
   dgxc-llama31 dgxc-nemotron4 dgxc-gpt3 --dtype bf16 --fix hbm_efficiency=0.6125 kernel_us=5 intra_efficiency=0.75
   inter_efficiency=0.86``;
2. the H100's ``expert_half_tokens`` (768: expert GEMMs by tokens per expert; on rows without experts it changes
   nothing) on its 10 MoE BF16 rows: ``python data/calibrate.py --cluster dgx-h100 --runs dgxc-grok1
   mb2604-gptoss-120b-h100 --dtype bf16 --fix mfu=0.6 matmul_half_gflop=1 hbm_efficiency=0.6125 kernel_us=5
   intra_efficiency=0.75 inter_efficiency=0.86``;
3. the H100's FP8 efficiency (``fp8_mfu`` 0.5375; ``fp8_matmul_half_gflop`` held at 1.79, tied to the 16-bit
   half-size: ``h100-sxm.toml``) on its 37 dense FP8 rows (``--dtype fp8 --family dense`` picks them): ``python
   data/calibrate.py --cluster dgx-h100 --dtype fp8 --family dense --fix mfu=0.6 matmul_half_gflop=1
   hbm_efficiency=0.6125 kernel_us=5 intra_efficiency=0.75 inter_efficiency=0.86 fp8_matmul_half_gflop=1.79``;
4. the 96 GB 500 W H100's peak (``h100-96g-500w.toml``, ``tflops=835.5``: ``--free`` fits a parameter otherwise held
   at the preset's value, within a range): ``python data/calibrate.py --cluster grand-teton-h100 --runs
   tt2412-t1-8b-fsdp-compile tt2412-t3-8b-fsdp-compile ttatp --free tflops=835.5:989.4 --fix mfu=0.6
   matmul_half_gflop=1 hbm_efficiency=0.6125 kernel_us=5 intra_efficiency=0.75 inter_efficiency=0.86``;
5. the B200's FP8 efficiency (``b200.toml``: 0.45, 2.5, fitted before TP overlap was priced; the refit's half-size
   of 77.5 GFLOP is not kept, ``docs/pricing.md``) on its 4 dense FP8 rows, its 16-bit parameters the A100's:
   ``python data/calibrate.py --cluster dgx-b200 --dtype fp8 --family dense --fix mfu=0.7312 matmul_half_gflop=0.75
   hbm_efficiency=0.6125 kernel_us=5 intra_efficiency=0.75 inter_efficiency=0.86 expert_half_tokens=0``.

Uses only sappkit's public API and numpy.
"""

import argparse
import sys

import numpy as np

from sappkit.hardware import Cluster, DeviceConfig
from sappkit.strategy.validation import family, published_runs, run_inputs, validate

#: parameter -> (start, lower, upper, first step); device fields, then the cluster's.
PARAMETERS = {
    "mfu": (0.75, 0.3, 1.0, 0.05),
    "matmul_half_gflop": (1.0, 0.0, 100.0, 2.0),
    "hbm_efficiency": (0.7, 0.2, 1.0, 0.1),
    "kernel_us": (10.0, 0.0, 60.0, 5.0),
    "expert_half_tokens": (0.0, 0.0, 8192.0, 512.0),
    "intra_efficiency": (0.8, 0.2, 1.0, 0.1),
    "inter_efficiency": (0.8, 0.2, 1.0, 0.1),
    "fp8_mfu": (0.65, 0.2, 1.0, 0.05),
    "fp8_matmul_half_gflop": (30.0, 0.0, 200.0, 10.0),
}
_CLUSTER_FIELDS = ("intra_efficiency", "inter_efficiency")
#: Parameters held at the preset's value unless ``--free`` names them: the peak of a part no datasheet gives.
FREEABLE = {"tflops": (900.0, 500.0, 2500.0, 50.0)}


def errors(values: dict, runs, cluster: str = "dgx-a100") -> np.ndarray:
    name = Cluster.preset(cluster).device.name
    device = DeviceConfig.preset(name, **{k: v for k, v in values.items() if k not in _CLUSTER_FIELDS})
    nodes = Cluster.preset(cluster, device=device, **{k: values[k] for k in _CLUSTER_FIELDS})
    return validate(runs, clusters={cluster: nodes}).frame["error"].to_numpy()


def fit(runs, fixed: dict, cluster: str = "dgx-a100", free: dict | None = None) -> dict:
    """``free``: the :data:`FREEABLE` parameters to fit too, each with its (lower, upper) range or None (its own)."""
    ranges = dict(PARAMETERS)
    for name, bounds in (free or {}).items():
        start, lower, upper, step = FREEABLE[name]
        lower, upper = bounds or (lower, upper)
        ranges[name] = (min(max(start, lower), upper), lower, upper, min(step, (upper - lower) / 4))
    values = {name: fixed.get(name, start) for name, (start, *_) in ranges.items()}
    steps = {name: step for name, (*_, step) in ranges.items() if name not in fixed}
    best = float(np.sqrt(np.mean(errors(values, runs, cluster) ** 2)))
    while max(steps[name] / (ranges[name][2] - ranges[name][1]) for name in steps) > 1e-2:
        improved = False
        for name in steps:
            _, lower, upper, _ = ranges[name]
            for sign in (1, -1):
                trial = dict(values, **{name: min(upper, max(lower, values[name] + sign * steps[name]))})
                score = float(np.sqrt(np.mean(errors(trial, runs, cluster) ** 2)))
                if score < best - 1e-6:
                    values, best, improved = trial, score, True
                    print(f"rms {best:.4%}: {name}={values[name]:.4g}", file=sys.stderr)
                    break
        if not improved:
            steps = {name: step / 2 for name, step in steps.items()}
    return values


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="dgx-a100", help="the cluster preset whose rows to fit on")
    parser.add_argument("--runs", nargs="*", default=[], help="fit on the runs starting with these prefixes")
    parser.add_argument("--fix", nargs="*", default=[], metavar="NAME=VALUE", help="hold parameters at a value")
    parser.add_argument("--dtype", help="fit on the rows of this dtype only (e.g. fp8)")
    parser.add_argument("--family", help="fit on the rows of this family only (dense, fsdp, moe)")
    parser.add_argument("--free", nargs="*", default=[], metavar="NAME[=LOWER:UPPER]",
                        help=f"fit these too, within a range if given (else held at the preset's value): "
                             f"{', '.join(FREEABLE)}")
    args = parser.parse_args()
    fixed = {name: float(value) for name, value in (item.split("=") for item in args.fix)}
    runs = published_runs()
    runs = runs[runs["cluster"] == args.cluster].reset_index(drop=True)
    chosen = runs[runs["run"].str.startswith(tuple(args.runs))] if args.runs else runs
    if args.dtype:
        chosen = chosen[chosen["dtype"] == args.dtype]
    if args.family:
        families = [family(*run_inputs(row)[:2]) for _, row in chosen.iterrows()]
        chosen = chosen[[name == args.family for name in families]]
    free = {}
    for item in args.free:
        name, _, bounds = item.partition("=")
        if name not in FREEABLE:
            parser.error(f"--free takes {', '.join(FREEABLE)}; got {name!r}")
        free[name] = tuple(float(value) for value in bounds.split(":")) if bounds else None
    values = fit(chosen, fixed, args.cluster, free)
    print(", ".join(f"{name}={value:.4g}" for name, value in values.items()))
    for name, error in zip(runs["run"], errors(values, runs, args.cluster)):
        held = "" if name in set(chosen["run"]) else "  (held out)"
        print(f"{name:22s} {error:+.2%}{held}")


if __name__ == "__main__":
    main()
