"""``sappkit check-config CONFIG --layers LAYERS --memory MB [--trainer T]``: price a trainer config, name its traps.

Reads a Megatron-LM launch script (or ``--megatron-args '...'``), a torchtitan
TOML or Python recipe, a MindFormers or HyperParallel YAML; prints the
strategy, each stage's layers, memory and time, the simulated step, and
every trap the config falls into with its fix. Exits 1 when a finding is an
error (the trainer refuses the config, trains another model, or a stage does
not fit).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..trainers.config import TRAINERS
from ..trainers.exchange import check_config
from ..trainers.shell import shell_tokens
from ._common import read_layers
from ._output import Output, add_output_arguments


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "check-config",
        description="Read a trainer's config, price it on the layer table (each stage's memory and time, the "
                    "simulated step) and report every trap as a named finding with its fix: layers dropped or "
                    "added by integer division, a stage over memory, an uneven ZB-V stage, an unsupported "
                    "micro-batch count, and more.")
    parser.add_argument("config", nargs="?", type=Path, default=None, metavar="CONFIG",
                        help="the config: a Megatron-LM launch script (.sh), a torchtitan job config (.toml) or "
                             "recipe (.py), a MindFormers or HyperParallel YAML")
    parser.add_argument("--layers", type=Path, required=True, metavar="LAYERS",
                        help="the model's layer table (.json MindFormers layer description or .csv)")
    parser.add_argument("--memory", type=float, required=True, metavar="MB",
                        help="the memory of one device, in MB")
    parser.add_argument("--trainer", choices=TRAINERS, default=None,
                        help="whose config it is (default: from the file's extension)")
    parser.add_argument("--world-size", type=int, default=None, metavar="N",
                        help="devices in the run, where the config leaves the data-parallel size to the launcher")
    parser.add_argument("--micro-batches", type=int, default=None,
                        help="micro-batches per step, for a HyperParallel config (it does not set them)")
    parser.add_argument("--time-unit", default=None, metavar="UNIT",
                        help="the unit of the layer file's times when it states none")
    parser.add_argument("--custom-options", default="", metavar="NAME,...",
                        help="recompute options a CSV layer table may name beside SAPP's")
    parser.add_argument("--megatron-args", default=None, metavar="'ARGS'",
                        help="Megatron-LM arguments instead of a file, quoted as one string")
    add_output_arguments(parser, main="findings")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    if (args.config is None) == (args.megatron_args is None):
        raise InputError("check-config takes a CONFIG file or --megatron-args (one of them)")
    layers = read_layers(args)
    source = args.config if args.config is not None else shell_tokens(args.megatron_args)
    checked = check_config(source, layers, memory_mb=args.memory, trainer=args.trainer,
                           world_size=args.world_size, micro_batches=args.micro_batches)
    out = Output(args, checked.plan.time_unit)
    out.line(checked.describe())
    for note in checked.config.notes:
        out.line(f"note: {note}")
    out.value("trainer", checked.config.trainer)
    out.value("strategy", checked.config.strategy.to_dict())
    out.value("step_time", checked.step_time)
    out.value("ok", checked.ok)
    out.keep("stages", checked.plan.stages)
    out.keep("findings", checked.findings)
    out.finish(main="findings")
    return 0 if checked.ok else 1
