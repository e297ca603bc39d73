"""``sappkit layers --from-trace TRACE --layer-pattern REGEX [...]``: per-layer times from a profiler trace.

Reads a PyTorch profiler Chrome trace or a MindSpore ``trace_view.json``
(:func:`sappkit.trainers.profiles.read_profile_times`) and prints each
layer's forward and backward time per micro-batch in ms; with ``--into
LAYERS --out NEW.json`` writes the layer table with those times.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from .._files import output_path, shown
from ..errors import InputError
from ..layers import write_layers_json
from ..trainers.profiles import profile_layer_table, read_profile_times
from ._common import read_layers
from ._output import Output, add_output_arguments


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "layers",
        description="Read each layer's forward and backward time per micro-batch from a profiler trace: PyTorch's "
                    "Chrome trace (torch.profiler with with_stack=True) or MindSpore's trace_view.json; optionally "
                    "write a layer table with those times.")
    parser.add_argument("--from-trace", type=Path, required=True, metavar="TRACE",
                        help="the trace JSON (torch.profiler's export_chrome_trace, MindSpore's trace_view.json)")
    parser.add_argument("--layer-pattern", required=True, metavar="REGEX",
                        help="a regular expression matching a body layer's forward event, its first group naming "
                             "the layer (e.g. 'nn.Module: TransformerBlock_(\\d+)' or '(\\d+)-LlamaDecodeLayer')")
    parser.add_argument("--head-pattern", default=None, metavar="REGEX", help="the same for the embedding")
    parser.add_argument("--tail-pattern", default=None, metavar="REGEX", help="the same for the loss / LM head")
    parser.add_argument("--trace-format", choices=("pytorch", "mindspore"), default=None,
                        help="default: MindSpore when the trace has a 'Scope Layer' process, else PyTorch")
    parser.add_argument("--into", type=Path, default=None, metavar="LAYERS",
                        help="a layer table to give the measured times (with --out)")
    parser.add_argument("--out", type=Path, default=None, metavar="OUT.json",
                        help="where to write that table (MindFormers layer JSON)")
    parser.add_argument("--option", default="none",
                        help="the recompute option the profiled run used (default none)")
    add_output_arguments(parser, main="layer times")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    if (args.into is None) != (args.out is None):
        raise InputError("--into and --out go together: the table to update and where to write it")
    if args.out is not None:
        out_path = output_path("--out", args.out)
        for flag, read in (("--from-trace", args.from_trace), ("--into", args.into)):
            if Path(read).resolve() == out_path.resolve():
                raise InputError(f"--out {shown(out_path)} is the file {flag} reads; write the table elsewhere")
    times = read_profile_times(args.from_trace, args.layer_pattern, head_pattern=args.head_pattern,
                               tail_pattern=args.tail_pattern, trace_format=args.trace_format)
    out = Output(args, "ms")
    body = times[times["role"] == "body"]
    out.line(f"{len(body)} body layer(s) from {args.from_trace}: forward {body['forward_time'].mean():.3f} ms, "
             f"backward {body['backward_time'].mean():.3f} ms per micro-batch on average")
    out.table("layer times", times)
    if args.into is not None:
        into = SimpleNamespace(layers=args.into, time_unit=None, custom_options="")
        table = profile_layer_table(read_layers(into), times, option=args.option)
        write_layers_json(table, args.out)
        out.line(f"layer table with the measured times written to {args.out}")
        out.value("out", str(args.out))
    out.finish(main="layer times")
    return 0
