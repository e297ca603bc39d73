"""``sappkit choose LAYERS --stages P --micro-batches M --memory MB [--offsets FILE.yaml] [--per-layer]
[--link-gbps G]``: the fastest recompute option of every body layer that fits, and the trainer plan."""

from __future__ import annotations

import json

import pandas as pd

from ..recompute.chooser import HostLink, choose_recompute
from . import _common


def register(subparsers) -> None:
    parser = subparsers.add_parser("choose", help="choose each body layer's recompute option for a fixed partition")
    _common.add_pipeline_arguments(parser)
    _common.add_chooser_arguments(parser, modes_help="choose among runtime modes (e.g. off,selective,full) instead "
                                                     "of each kind's options")
    parser.add_argument("--per-layer", action="store_true", help="a mode per layer (default modes off,selective,full)")
    parser.add_argument("--link-gbps", type=float, default=None, metavar="G",
                        help="host link in GB/s: let each stage's first layers offload")
    parser.add_argument("--time-unit-ms", type=float, default=1.0,
                        help="milliseconds per time unit of the layer table (for --link-gbps; default 1)")
    parser.add_argument("--json", action="store_true", help="print the ranges as JSON records instead of tables")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    layers = _common.read_layers(args.layers)
    link = None if args.link_gbps is None else HostLink.from_gbps(args.link_gbps, time_unit_ms=args.time_unit_ms)
    choice = choose_recompute(layers, _common.partition(layers, args), memory_mb=args.memory,
                              modes=_common.modes(args, per_layer=args.per_layer),
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
