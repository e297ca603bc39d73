"""``sappkit simulate LAYERS --stages P --micro-batches M [...]``: simulate one step of an evenly placed model."""

from __future__ import annotations

from pathlib import Path

from .._files import output_path, write_file
from ..columns import MEMORY_MB, STAGE, TIME
from ..demo import simulate_layers
from ..errors import InputError
from ..pipeline.simulator import BUSY_TIME, IDLE_TIME
from ._common import add_layers_argument, add_shape_arguments, read_layers, say_unused_shape, schedule
from ._output import STAGE_TIME_HEADER, Output, add_output_arguments

#: The stage table's key columns (``--wide`` shows all).
KEY_COLUMNS = (STAGE, MEMORY_MB, TIME, BUSY_TIME, IDLE_TIME)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate",
        description="Spread the body layers evenly over the stages, simulate one training step pass by pass, and "
                    "print its step time, bubble and each stage's peak memory.")
    add_layers_argument(parser)
    add_shape_arguments(parser)
    parser.add_argument("--seq-split", type=int, default=1, metavar="K",
                        help="slices each micro-batch is cut into along the sequence (seqpipe; default 1)")
    parser.add_argument("--option", default=None,
                        help="the recompute option every body layer runs, e.g. selective (default: each kind's "
                             "least recompute)")
    parser.add_argument("--p2p-time", type=float, default=0.0,
                        help="time one stage-to-stage transfer takes, in the layer table's time unit (default 0)")
    parser.add_argument("--memory", "--limit-mb", dest="limit_mb", type=float, default=None, metavar="MB",
                        help="device memory in MB, to compare each stage's peak with (--limit-mb is the same)")
    parser.add_argument("--save", type=Path, default=None, metavar="FIG.png",
                        help="also save the schedule and memory figure (the extension picks the format)")
    add_output_arguments(parser, main="per-stage")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    figure_format = None if args.save is None else _figure_format(args.save)
    sim = simulate_layers(read_layers(args), stages=args.stages,
                          micro_batches=args.micro_batches, schedule=schedule(args), chunks=args.chunks,
                          option=args.option, less_memory=args.less_memory, seq_split=args.seq_split,
                          p2p_time=args.p2p_time, limit_mb=args.limit_mb)
    out = Output(args, sim.time_unit)
    say_unused_shape(args, out)
    out.line(sim.describe())
    out.value("step_time", sim.step_time)
    out.value("bubbles", {name: float(value) for name, value in sim.bubbles.items()})
    out.table("stages", sim.stages, key=KEY_COLUMNS, headers={TIME: STAGE_TIME_HEADER, BUSY_TIME: "busy",
                                                                     IDLE_TIME: "idle"})
    if args.save is not None:
        import matplotlib.pyplot as plt

        from ..plots.pipeline import plot_simulation

        figure = plot_simulation(sim)
        try:
            write_file(args.save, lambda temporary: figure.savefig(temporary, format=figure_format, dpi=120,
                                                                   bbox_inches="tight"), name="--save")
        finally:
            plt.close(figure)
        out.line(f"figure saved to {args.save}")
        out.value("figure", str(args.save))
    out.finish()
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
