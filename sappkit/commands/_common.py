"""What several sub-commands share: the layer file, the pipeline's shape, the recompute chooser's flags, the
MindFormers offsets YAML that places layers on the stages, and ``--export TRAINER``."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from .._files import load_yaml
from ..columns import DEFAULT_MODES
from ..errors import InputError
from ..layers import read_layers_csv, read_layers_json
from ..layers.units import check_time_unit
from ..pipeline.costs import even_assignment
from ..pipeline.schedules import SCHEDULES
from ..recompute.partition import Partition
from ..trainers.config import TRAINERS
from ..trainers.exchange import export_config

#: The runtime modes a per-layer choice picks among unless ``--modes`` names others (those the table offers).
PER_LAYER_MODES = tuple(DEFAULT_MODES)

#: Keys a MindFormers offsets YAML may give, and where (``Plan.to_yaml`` nests them; flat files work too).
_OFFSET_KEYS = ("offset", "recompute", "select_recompute", "select_comm_recompute")
_NESTED = {"offset": ("model", "model_config"), "recompute": ("recompute_config",),
           "select_recompute": ("recompute_config",), "select_comm_recompute": ("recompute_config",)}


def add_layers_argument(parser) -> None:
    """``LAYERS [--time-unit UNIT]``: the layer table file and the unit of its times."""
    parser.add_argument("layers", type=Path, metavar="LAYERS",
                        help="the layer table: what each layer costs in memory and time under each recompute "
                             "option, as a MindFormers layer description (.json) or a CSV (.csv)")
    parser.add_argument("--time-unit", default=None, metavar="UNIT",
                        help="the unit of the file's times when the file does not state it, e.g. ms (a MindFormers "
                             "file without one is in its own relative units)")
    parser.add_argument("--custom-options", default="", metavar="NAME,...",
                        help="recompute options a CSV may name beside none, selective, comm, both and full (any "
                             "other name is refused as a typo)")


def add_shape_arguments(parser) -> None:
    """``--stages P --micro-batches M [--chunks V] [--schedule S] [--less-memory]``: the pipeline's shape."""
    parser.add_argument("--stages", type=int, required=True, help="pipeline stages: devices the model is split over")
    parser.add_argument("--micro-batches", type=int, required=True,
                        help="micro-batches each training step is split into")
    parser.add_argument("--chunks", type=int, default=1,
                        help="model pieces each stage holds (more than 1 for interleaved schedules; default 1)")
    parser.add_argument("--schedule", choices=SCHEDULES, default=None, metavar="NAME",
                        help="the order stages run forward and backward passes, one of "
                             f"{', '.join(SCHEDULES)} (default 1f1b, interleaved with --chunks above 1)")
    parser.add_argument("--less-memory", action="store_true",
                        help="the interleaved order that keeps fewer micro-batches in flight on early stages")


def add_pipeline_arguments(parser) -> None:
    """``LAYERS`` and the pipeline's shape (:func:`add_shape_arguments`), and ``--memory MB``."""
    add_layers_argument(parser)
    add_shape_arguments(parser)
    parser.add_argument("--memory", type=float, required=True, metavar="MB",
                        help="the memory of one device, in MB, that every stage must fit")


def schedule(args) -> str:
    """``--schedule``, or its default: 1f1b for one chunk, interleaved for more."""
    return args.schedule or ("1f1b" if args.chunks == 1 else "interleaved")


def say_unused_shape(args, out) -> None:
    """A note on ``out`` when a shape flag changes nothing: ``--less-memory`` on 1F1B (``balance`` says it among
    its plan's notes)."""
    if args.less_memory and schedule(args) == "1f1b":
        out.line("note: --less-memory changes nothing here: it is the interleaved (or SeqPipe) order that keeps "
                 "fewer micro-batches in flight on early stages, and 1F1B already keeps p - s on stage s")
        out.value("notes", ["--less-memory changes nothing for 1f1b"])


def add_chooser_arguments(parser, *, modes_help: str) -> None:
    """``[--offsets FILE.yaml] [--modes MODE,...] [--fsdp-holds-grads] [--bucket-mb MB]`` for the recompute chooser."""
    parser.add_argument("--offsets", type=Path, default=None, metavar="FILE.yaml",
                        help="where the layers sit and what they recompute today, as MindFormers offset and "
                             "recompute lists (e.g. written by 'sappkit balance --yaml'); default: layers spread "
                             "evenly, recomputing nothing")
    parser.add_argument("--modes", default=None, metavar="MODE,...", help=modes_help)
    parser.add_argument("--fsdp-holds-grads", action="store_true", default=None,
                        help="also fit the memory peak FSDP reaches when it holds gradients until the backward ends "
                             "(default: where the table states grad_mb and there are several micro-batches)")
    parser.add_argument("--bucket-mb", type=float, default=1.0,
                        help="memory is counted in steps of this many MB (default 1; larger is faster, coarser)")


def add_export_argument(parser) -> None:
    """``[--export TRAINER]``: print the result as a trainer's config."""
    parser.add_argument("--export", choices=TRAINERS, default=None, metavar="TRAINER",
                        help="also print the result as that trainer's config: megatron (arguments), torchtitan "
                             "(TOML job config), mindformers (YAML) or hyperparallel (YAML)")


def print_constraint_cost(out, plan) -> None:
    """What planning within a trainer's grammar costs (``balance(..., trainer=...)``); in JSON too."""
    if plan.constraint_cost is not None:
        cost = plan.constraint_cost
        out.line(f"trainer grammar: {cost.describe()}")
        out.value("constraint_cost", {"trainer": cost.trainer, "policy": cost.policy, "time": cost.time,
                                      "percent": cost.percent})


def print_export(out, source, trainer: str | None, **options) -> None:
    """The ``--export`` text, as it is (not re-wrapped), with its notes; in JSON under ``export``.

    ``options`` go to :func:`~sappkit.trainers.exchange.export_config` (``strategy=``, ``global_batch=``)."""
    if trainer is None:
        return
    exported = export_config(source, trainer, **options)
    out.line(f"{trainer} config ({exported.form}):")
    out.raw(exported.text)
    for note in exported.notes:
        out.line(f"note: {note}")
    out.value("export", {"trainer": trainer, "form": exported.form, "text": exported.text,
                         "notes": list(exported.notes)})


def read_layers(args):
    """The layer table ``args.layers`` names, a MindFormers/SAPP JSON or a CSV chosen by extension: its times in
    ``--time-unit`` when the file states none, a CSV's options among SAPP's and ``--custom-options``."""
    path, suffix = args.layers, args.layers.suffix.lower()
    unit = None if args.time_unit is None else check_time_unit(args.time_unit, "--time-unit")
    custom = tuple(name.strip() for name in args.custom_options.split(",") if name.strip())
    if suffix == ".csv":
        return read_layers_csv(path, time_unit=unit, custom_options=custom)
    if suffix != ".json":
        raise InputError(f"LAYERS must be a .json (MindFormers layer description) or .csv layer table; "
                         f"got {str(path)!r}")
    if custom:
        raise InputError(f"--custom-options is for a CSV layer table; the MindFormers layer JSON {str(path)!r} "
                         "holds only SAPP's options")
    return read_layers_json(path, time_unit=unit)


def read_offsets(path: Path) -> dict:
    """``offset`` and the recompute lists from a MindFormers YAML (nested as ``Plan.to_yaml`` writes, or flat)."""
    document = load_yaml(path, "a MindFormers YAML with offset and recompute lists (--offsets)")
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


def partition(layers, args) -> Partition:
    """The partition ``--offsets`` gives, or the body layers placed evenly without recompute."""
    shape = dict(stages=args.stages, micro_batches=args.micro_batches, chunks=args.chunks, schedule=args.schedule,
                 less_memory=args.less_memory)
    if args.offsets is not None:
        return Partition.from_offsets(layers, **read_offsets(args.offsets), **shape)
    assignment = even_assignment(layers, stages=args.stages, chunks=args.chunks, schedule=schedule(args))
    return Partition.from_assignment(assignment, kind_order=layers.body_kinds, **shape)


def modes(args, layers, *, per_layer: bool) -> tuple[str, ...] | None:
    """``--modes`` as a tuple; without it, for a per-layer choice, those of :data:`PER_LAYER_MODES` whose option
    every body kind of ``layers`` has (a table of ``none`` and ``full`` runs ``off`` and ``full``), else None."""
    if args.modes is None:
        if not per_layer:
            return None
        offered = [mode for mode in PER_LAYER_MODES
                   if all(DEFAULT_MODES[mode] in layers.options(kind) for kind in layers.body_kinds)]
        return tuple(offered) or PER_LAYER_MODES  # none offered: pricing names the options each kind lacks
    return tuple(mode.strip() for mode in args.modes.split(",") if mode.strip())


def write_report(report, args, *, with_input: bool = False) -> None:
    """Execute and render ``--notebooks`` (default: the repository's, naming each one left out and why) into
    ``--out``, a line per notebook and cell; ``report`` is :func:`load_report`'s module."""
    notebooks = list(args.notebooks)
    left_out = {} if notebooks else report.left_out_notebooks()
    for path, why in left_out.items():
        print(f"left out: {path.stem} ({why})", flush=True)
    index = report.write_report(notebooks or report.default_notebooks(), args.out, with_input=with_input,
                                force=args.force, progress=lambda line: print(line, flush=True), left_out=left_out)
    print(f"report written to {index.parent} (open {index})")


def load_report():
    """:mod:`sappkit.report`, imported when a command needs it: it runs notebooks, which a plain ``pip install
    sappkit`` does not bring; without them, one line naming the extra that does."""
    try:
        return import_module("..report", __package__)
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("sappkit"):
            raise
        raise InputError(f"executing and rendering notebooks needs the notebooks extra (no module {exc.name!r}): "
                         "pip install 'sappkit[notebooks]'") from None
