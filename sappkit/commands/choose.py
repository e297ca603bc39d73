"""``sappkit choose LAYERS --stages P --micro-batches M --memory MB [--offsets FILE.yaml] [--per-layer]
[--link-gbps G]``: the fastest recompute option of every body layer that fits, and the trainer plan."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from ..errors import InputError
from ..partition import Partition
from ..pipeline import even_assignment
from ..recompute import HostLink, choose_recompute
from ..schedules import SCHEDULES
from .simulate import read_layers

#: Keys a MindFormers offsets YAML may give, and where (``Plan.to_yaml`` nests them; flat files work too).
_OFFSET_KEYS = ("offset", "recompute", "select_recompute", "select_comm_recompute")
_NESTED = {"offset": ("model", "model_config"), "recompute": ("recompute_config",),
           "select_recompute": ("recompute_config",), "select_comm_recompute": ("recompute_config",)}


def register(subparsers) -> None:
    parser = subparsers.add_parser("choose", help="choose each body layer's recompute option for a fixed partition")
    parser.add_argument("layers", type=Path, metavar="LAYERS", help="layer table: MindFormers JSON or CSV")
    parser.add_argument("--stages", type=int, required=True, help="pipeline stages p")
    parser.add_argument("--micro-batches", type=int, required=True, help="micro-batches per step m")
    parser.add_argument("--memory", type=float, required=True, metavar="MB", help="device memory in MB")
    parser.add_argument("--offsets", type=Path, default=None, metavar="FILE.yaml",
                        help="MindFormers offset and recompute lists (e.g. a plan's to_yaml); default: layers "
                             "placed evenly, configured without recompute")
    parser.add_argument("--chunks", type=int, default=1, help="chunks per stage v")
    parser.add_argument("--schedule", choices=SCHEDULES, default=None,
                        help="pipeline schedule (default 1f1b, interleaved for --chunks > 1)")
    parser.add_argument("--less-memory", action="store_true", help="less-memory interleaved order")
    parser.add_argument("--modes", default=None, metavar="MODE,...",
                        help="choose among runtime modes (e.g. off,selective,full) instead of each kind's options")
    parser.add_argument("--per-layer", action="store_true", help="a mode per layer (default modes off,selective,full)")
    parser.add_argument("--link-gbps", type=float, default=None, metavar="G",
                        help="host link in GB/s: let each stage's first layers offload")
    parser.add_argument("--time-unit-ms", type=float, default=1.0,
                        help="milliseconds per time unit of the layer table (for --link-gbps; default 1)")
    parser.add_argument("--fsdp-holds-grads", action="store_true", help="price the second FSDP peak")
    parser.add_argument("--bucket-mb", type=float, default=1.0, help="the knapsack's memory granularity (MB)")
    parser.add_argument("--json", action="store_true", help="print the ranges as JSON records instead of tables")
    parser.set_defaults(run=_run)


def read_offsets(path: Path) -> dict:
    """``offset`` and the recompute lists from a MindFormers YAML (nested as ``Plan.to_yaml`` writes, or flat)."""
    if not path.is_file():
        raise InputError(f"--offsets file {str(path)!r} does not exist")
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"--offsets file {str(path)!r} is not YAML: {exc}") from None
    if not isinstance(document, dict):
        raise InputError(f"--offsets file {str(path)!r} must hold a mapping with {', '.join(_OFFSET_KEYS)}")
    found = {}
    for key in _OFFSET_KEYS:
        where = document
        for part in _NESTED[key]:
            where = where.get(part, {}) if isinstance(where, dict) else {}
        value = where.get(key) if isinstance(where, dict) and key in where else document.get(key)
        if value is not None:
            found[key] = value
    if "offset" not in found:
        raise InputError(f"--offsets file {str(path)!r} has no 'offset' (at the top or under model.model_config)")
    return found


def _partition(layers, args) -> Partition:
    shape = dict(stages=args.stages, micro_batches=args.micro_batches, chunks=args.chunks, schedule=args.schedule,
                 less_memory=args.less_memory)
    if args.offsets is not None:
        return Partition.from_offsets(layers, **read_offsets(args.offsets), **shape)
    schedule = args.schedule or ("1f1b" if args.chunks == 1 else "interleaved")
    assignment = even_assignment(layers, stages=args.stages, chunks=args.chunks, schedule=schedule)
    return Partition.from_assignment(assignment, kind_order=layers.body_kinds, **shape)


def _run(args) -> int:
    layers = read_layers(args.layers)
    modes = None if args.modes is None else tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if args.per_layer and modes is None:
        modes = ("off", "selective", "full")
    link = None if args.link_gbps is None else HostLink.from_gbps(args.link_gbps, time_unit_ms=args.time_unit_ms)
    choice = choose_recompute(layers, _partition(layers, args), memory_mb=args.memory, modes=modes,
                              per_layer=args.per_layer, link=link, fsdp_holds_grads=args.fsdp_holds_grads,
                              bucket_mb=args.bucket_mb)
    if args.json:
        print(json.dumps({"reason": choice.reason, "mode": choice.mode, "ranges": choice.to_records()}, indent=1))
        return 0 if choice.chosen else 1
    print(choice.describe())
    if not choice.chosen:
        return 1
    columns = ["stage", "param_mb", "activation_mb", "overhead_mb", "working_mb", "const_mb", "memory_mb",
               "limit_mb", "time", "time_saved"]
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_rows", None):
        print(choice.stages[columns].round(1).to_string(index=False))
    if choice.layer_options["mode"].notna().all():
        mode, overrides = choice.trainer_plan()
        print(f"trainer plan: activation_checkpoint.mode = {mode!r}, layers = {overrides}")
    for setting in (choice.megatron(), choice.torchtitan()):
        print(f"{setting.runtime}: {setting.settings if setting.expressible else 'not expressible'} ({setting.note})")
    return 0
