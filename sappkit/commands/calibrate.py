"""``sappkit calibrate CONFIG,MODEL,LOG ... --base dgx-h100 --out my-cluster.toml``: fit the hardware's physical
parameters to the user's measured runs and write the fitted cluster as a hardware file."""

from __future__ import annotations

from ..calibration import PARAMETERS, calibrate, read_run
from ..errors import InputError
from ._output import Output, add_output_arguments


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        description="Read each run (a trainer config that read_trainer_config reads, a model preset name or "
                    "config.json, and the training log: Megatron-LM, torchtitan or NeMo/Lightning; warm-up "
                    f"skipped, median step), fit the base cluster's physical parameters ({', '.join(PARAMETERS)}; "
                    "less --fix) to the measured steps, and print each run's error before and after, the fitted values with their "
                    "uncertainty and what the runs do not determine. Refuses to fit more parameters than the "
                    "runs identify.")
    parser.add_argument("runs", nargs="+", metavar="CONFIG,MODEL,LOG",
                        help="a run: trainer config, model (preset or config.json) and training log, comma-separated")
    parser.add_argument("--base", default="dgx-h100", metavar="NAME|FILE",
                        help="the cluster preset or hardware file to start from (default dgx-h100)")
    parser.add_argument("--fix", nargs="*", default=[], metavar="NAME=VALUE", help="hold parameters at a value")
    parser.add_argument("--world-size", type=int, default=None, help="devices, where a config leaves them open")
    parser.add_argument("--warmup", type=int, default=10, help="skip log lines of steps up to this (default 10)")
    parser.add_argument("--out", default=None, metavar="FILE.toml", help="write the fitted cluster here")
    add_output_arguments(parser, main="per-run")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    runs = []
    for text in args.runs:
        parts = text.split(",")
        if len(parts) != 3:
            raise InputError(f"run {text!r}: expected CONFIG,MODEL,LOG (three comma-separated parts)")
        runs.append(read_run(*parts, world_size=args.world_size, warmup=args.warmup))
    fixed = {}
    for item in args.fix:
        name, _, value = item.partition("=")
        try:
            fixed[name] = float(value)
        except ValueError:
            raise InputError(f"--fix {item!r}: expected NAME=VALUE with a number") from None
    result = calibrate(runs, args.base, fix=fixed)
    out = Output(args)
    out.line(result.describe().splitlines()[0])
    out.table("runs", result.runs, key=tuple(result.runs.columns))
    out.table("parameters", result.parameters, key=tuple(result.parameters.columns))
    for line in result.describe().splitlines()[1:]:
        if line.startswith("not determined"):
            out.line(line)
    if args.out:
        out.line(f"wrote {result.write(args.out)}")
    out.finish()
    return 0
