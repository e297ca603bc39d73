"""What several sub-commands share: the layer file, the pipeline's shape, the recompute chooser's flags, the
MindFormers offsets YAML that places layers on the stages, and ``--export TRAINER``."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from .._files import load_yaml
from ..errors import InputError
from ..layers import read_layers_csv, read_layers_json
from ..layers.units import check_time_unit
from ..pipeline.costs import even_assignment
from ..pipeline.schedules import SCHEDULES
from ..recompute.partition import Partition
from ..trainers.config import TRAINERS
from ..trainers.exchange import export_config

#: The runtime modes a per-layer choice picks among unless ``--modes`` names others.
PER_LAYER_MODES = ("off", "selective", "full")

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


def add_shape_arguments(parser) -> None:
    """``--stages P --micro-batches M [--chunks V] [--schedule S] [--less-memory]``: the pipeline's shape."""
    parser.add_argument("--stages", type=int, required=True, help="pipeline stages: devices the model is split over")
    parser.add_argument("--micro-batches", type=int, required=True,
                        help="micro-batches each training step is split into")
    parser.add_argument("--chunks", type=int, default=1,
                        help="model pieces each stage holds (more than 1 for interleaved schedules; default 1)")
    parser.add_argument("--schedule", choices=SCHEDULES, default=None,
                        help="the order stages run forward and backward passes (default 1f1b, interleaved with "
                             "--chunks above 1)")
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


def add_chooser_arguments(parser, *, modes_help: str) -> None:
    """``[--offsets FILE.yaml] [--modes MODE,...] [--fsdp-holds-grads] [--bucket-mb MB]`` for the recompute chooser."""
    parser.add_argument("--offsets", type=Path, default=None, metavar="FILE.yaml",
                        help="where the layers sit and what they recompute today, as MindFormers offset and "
                             "recompute lists (e.g. written by 'sappkit balance --yaml'); default: layers spread "
                             "evenly, recomputing nothing")
    parser.add_argument("--modes", default=None, metavar="MODE,...", help=modes_help)
    parser.add_argument("--fsdp-holds-grads", action="store_true",
                        help="also fit the memory peak FSDP reaches when it holds gradients until the backward ends")
    parser.add_argument("--bucket-mb", type=float, default=1.0,
                        help="memory is counted in steps of this many MB (default 1; larger is faster, coarser)")


def add_export_argument(parser) -> None:
    """``[--export TRAINER]``: print the result as a trainer's config."""
    parser.add_argument("--export", choices=TRAINERS, default=None, metavar="TRAINER",
                        help="also print the result as that trainer's config: megatron (arguments), torchtitan "
                             "(TOML job config), mindformers (YAML) or hyperparallel (YAML)")


def print_export(out, source, trainer: str | None) -> None:
    """The ``--export`` text, as it is (not re-wrapped), with its notes; in JSON under ``export``."""
    if trainer is None:
        return
    exported = export_config(source, trainer)
    out.line(f"{trainer} config ({exported.form}):")
    out.raw(exported.text)
    for note in exported.notes:
        out.line(f"note: {note}")
    out.value("export", {"trainer": trainer, "form": exported.form, "text": exported.text,
                         "notes": list(exported.notes)})


def read_layers(path: Path, time_unit: str | None = None):
    """A layer table from a MindFormers/SAPP JSON or a CSV file, chosen by extension, its times in ``time_unit``
    when the file states none."""
    readers = {".json": read_layers_json, ".csv": read_layers_csv}
    if path.suffix.lower() not in readers:
        raise InputError(f"LAYERS must be a .json (MindFormers layer description) or .csv layer table; "
                         f"got {str(path)!r}")
    return readers[path.suffix.lower()](path, time_unit=None if time_unit is None else
                                        check_time_unit(time_unit, "--time-unit"))


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


def modes(args, *, per_layer: bool) -> tuple[str, ...] | None:
    """``--modes`` as a tuple; without it :data:`PER_LAYER_MODES` for a per-layer choice, else None."""
    if args.modes is None:
        return PER_LAYER_MODES if per_layer else None
    return tuple(mode.strip() for mode in args.modes.split(",") if mode.strip())


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
