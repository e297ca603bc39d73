"""``sappkit simulate LAYERS --stages P --micro-batches M [...]``: simulate one step of an evenly placed model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .._files import output_path, write_file
from ..demo import simulate_layers
from ..errors import InputError
from ..pipeline.schedules import SCHEDULES
from ._common import read_layers


def register(subparsers) -> None:
    parser = subparsers.add_parser("simulate", help="simulate one training step of an evenly placed layer table")
    parser.add_argument("layers", type=Path, metavar="LAYERS", help="layer table: MindFormers JSON or CSV")
    parser.add_argument("--stages", type=int, required=True, help="pipeline stages p")
    parser.add_argument("--micro-batches", type=int, required=True, help="micro-batches per step m")
    parser.add_argument("--schedule", choices=SCHEDULES, default="1f1b")
    parser.add_argument("--chunks", type=int, default=1, help="chunks per stage v (interleaved: > 1)")
    parser.add_argument("--less-memory", action="store_true", help="less-memory interleaved order")
    parser.add_argument("--seq-split", type=int, default=1, metavar="K", help="seqpipe slices per micro-batch")
    parser.add_argument("--option", default=None,
                        help="recompute option every body layer runs (default: each kind's least recompute)")
    parser.add_argument("--p2p-time", type=float, default=0.0, help="time added to each stage-to-stage transfer")
    parser.add_argument("--limit-mb", type=float, default=None, help="device memory, for the stage frame and plot")
    parser.add_argument("--save", type=Path, default=None, metavar="FIG.png",
                        help="save the schedule and memory figure")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    figure_format = None if args.save is None else _figure_format(args.save)
    sim = simulate_layers(read_layers(args.layers), stages=args.stages, micro_batches=args.micro_batches,
                          schedule=args.schedule, chunks=args.chunks, option=args.option,
                          less_memory=args.less_memory, seq_split=args.seq_split, p2p_time=args.p2p_time,
                          limit_mb=args.limit_mb)
    print(sim.describe())
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_rows", None):
        print(sim.stages.round(1).to_string(index=False))
    if args.save is not None:
        import matplotlib.pyplot as plt

        from ..plots.pipeline import plot_simulation

        figure = plot_simulation(sim)
        try:
            write_file(args.save, lambda temporary: figure.savefig(temporary, format=figure_format, dpi=120,
                                                                   bbox_inches="tight"), name="--save")
        finally:
            plt.close(figure)
        print(f"figure saved to {args.save}")
    return 0


def _figure_format(path: Path) -> str:
    """The image format ``--save`` names by its extension (PNG without one), checked before simulating."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase

    output_path("--save", path)
    supported = FigureCanvasBase.get_supported_filetypes()
    figure_format = path.suffix[1:].lower() or "png"
    if figure_format not in supported:
        raise InputError(f"--save {str(path)!r} asks for image format {figure_format!r}; expected a file ending in "
                         f"one of {', '.join('.' + name for name in sorted(supported))}")
    return figure_format
