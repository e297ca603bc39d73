"""``sappkit alternatives LAYERS --stages P --micro-batches M --memory MB [...]``: what one more fully
recomputed layer buys from the chooser's per-layer plan."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..one_more import alternatives
from ..partition import Partition
from ..pipeline import even_assignment
from ..recompute import choose_recompute
from ..schedules import SCHEDULES
from .simulate import read_layers


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "alternatives", help="the plans one more fully recomputed layer reaches from the per-layer recompute choice")
    parser.add_argument("layers", type=Path, metavar="LAYERS", help="layer table: MindFormers JSON or CSV")
    parser.add_argument("--stages", type=int, required=True, help="pipeline stages p")
    parser.add_argument("--micro-batches", type=int, required=True, help="micro-batches per step m")
    parser.add_argument("--memory", type=float, required=True, metavar="MB", help="device memory in MB")
    parser.add_argument("--schedule", choices=SCHEDULES, default=None,
                        help="pipeline schedule (default 1f1b, interleaved for --chunks > 1)")
    parser.add_argument("--chunks", type=int, default=1, help="chunks per stage v")
    parser.add_argument("--less-memory", action="store_true", help="less-memory interleaved order")
    parser.add_argument("--offset", default=None, metavar="JSON",
                        help="MindFormers offset, e.g. '[1,0,0,-1]' (default: body layers placed evenly)")
    parser.add_argument("--modes", default="off,selective,full", help="runtime modes, comma-separated")
    parser.add_argument("--fsdp-holds-grads", action="store_true", help="price the second FSDP peak")
    parser.add_argument("--bucket-mb", type=float, default=1.0, help="the chooser's memory granularity (MB)")
    parser.add_argument("--dimensions", default="", metavar="NAME=DEGREE,...",
                        help="parallel degrees every plan reports, e.g. dp=8,tp=4")
    parser.set_defaults(run=_run)


def _partition(layers, args) -> Partition:
    shape = dict(stages=args.stages, micro_batches=args.micro_batches, chunks=args.chunks, schedule=args.schedule,
                 less_memory=args.less_memory)
    if args.offset is None:
        schedule = args.schedule or ("1f1b" if args.chunks == 1 else "interleaved")
        assignment = even_assignment(layers, stages=args.stages, chunks=args.chunks, schedule=schedule)
        return Partition.from_assignment(assignment, kind_order=layers.body_kinds, **shape)
    try:
        offset = json.loads(args.offset)
    except json.JSONDecodeError as exc:
        raise InputError(f"--offset must be JSON, e.g. '[1, 0, 0, -1]'; got {args.offset!r} ({exc.msg})") from None
    return Partition.from_offsets(layers, offset=offset, **shape)


def _dimensions(text: str) -> tuple[tuple[str, int], ...]:
    pairs = []
    for item in filter(None, text.split(",")):
        name, _, degree = item.partition("=")
        if not name or not degree.isdigit():
            raise InputError(f"--dimensions entry {item!r} is not NAME=DEGREE (e.g. tp=4)")
        pairs.append((name, int(degree)))
    return tuple(pairs)


def _run(args) -> int:
    layers = read_layers(args.layers)
    modes = tuple(mode.strip() for mode in args.modes.split(",") if mode.strip())
    choice = choose_recompute(layers, _partition(layers, args), memory_mb=args.memory, modes=modes, per_layer=True,
                              fsdp_holds_grads=args.fsdp_holds_grads, bucket_mb=args.bucket_mb)
    if not choice.chosen:
        print(f"no per-layer choice to start from: {choice.reason}")
        return 1
    found = alternatives(choice, dimensions=_dimensions(args.dimensions))
    mode, overrides = choice.trainer_plan()
    print(f"current plan: peak {choice.memory_mb:,.1f} MB of {args.memory:,.0f} MB; binding stage "
          f"{found.binding_stage}; time saved {choice.time_saved:.4g}")
    print(f"trainer plan: mode {mode!r}, layers {overrides}")
    if found.reason:
        print(f"no alternative: {found.reason}")
        return 0
    print(f"{len(found.frame)} plan(s) with one more layer at 'full':")
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_rows", None):
        print(found.frame.round(2).to_string(index=False))
    return 0
