"""``sappkit alternatives LAYERS --stages P --micro-batches M --memory MB [--offsets FILE.yaml] [...]``: what one
more fully recomputed layer buys from the chooser's per-layer plan."""

from __future__ import annotations

import pandas as pd

from .._check import short
from ..errors import InputError
from ..one_more.analysis import alternatives
from ..recompute.chooser import choose_recompute
from . import _common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "alternatives", help="the plans one more fully recomputed layer reaches from the per-layer recompute choice")
    _common.add_pipeline_arguments(parser)
    _common.add_chooser_arguments(parser, modes_help="runtime modes the per-layer choice picks among (default "
                                                     "off,selective,full)")
    parser.add_argument("--dimensions", default="", metavar="NAME=DEGREE,...",
                        help="parallel degrees every plan reports, e.g. dp=8,tp=4")
    parser.set_defaults(run=_run)


def _dimensions(text: str) -> tuple[tuple[str, int], ...]:
    pairs = []
    for item in filter(None, text.split(",")):
        name, _, degree = item.partition("=")
        try:
            value = int(degree) if name.strip() and degree.isdigit() else None
        except ValueError:  # a digit int() cannot read ('²'), or more digits than Python reads
            value = None
        if value is None:
            raise InputError(f"--dimensions entry {short(item)} is not NAME=DEGREE (e.g. tp=4)")
        pairs.append((name.strip(), value))
    return tuple(pairs)


def _run(args) -> int:
    layers = _common.read_layers(args.layers)
    choice = choose_recompute(layers, _common.partition(layers, args), memory_mb=args.memory,
                              modes=_common.modes(args, per_layer=True), per_layer=True,
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
