"""``sappkit choose LAYERS --stages P --micro-batches M --memory MB [--offsets FILE.yaml] [--per-layer]
[--link-gbps G]``: the fastest recompute option of every body layer that fits, and the trainer plan.

The headline is the simulated step time against a stated baseline that fits:
the recompute the partition is configured with, or, where that does not fit
(as without ``--offsets``, which configures no recompute), the fastest
single option that fits every layer, else every layer at its most
recomputed option. Where the configured recompute fits but a single option
that fits is faster (``--offsets`` recomputing every layer in full where
``selective`` fits), the choice is stated against both. Each stage's
memory under the baseline is printed beside the choice's, and the stages
where layers moved or changed option are named.
"""

from __future__ import annotations

from ..columns import MEMORY_MB, STAGE, TIME
from ..layers.units import ms_per_unit
from ..recompute.chooser import HostLink, choose_recompute
from ..recompute.pricing import BACKWARD_MB, BASELINE_MEMORY_MB, TIME_SAVED
from ..recompute.submodules import submodule_modes
from ..recompute.trainer_plan import trainer_plan_line
from ..trainers.recompute import megatron_setting, torchtitan_setting
from . import _common
from ._output import STAGE_TIME_HEADER, Output, add_output_arguments

#: The stage table's key columns (``--wide`` shows all); ``backward_mb`` only with a second peak.
KEY_COLUMNS = (STAGE, BASELINE_MEMORY_MB, MEMORY_MB, BACKWARD_MB, TIME, TIME_SAVED)
#: The stage table's headers: the baseline's memory beside the choice's.
HEADERS = {BASELINE_MEMORY_MB: "baseline_mb", TIME: STAGE_TIME_HEADER, TIME_SAVED: "saved"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "choose",
        description="For layers already placed on the stages, choose the recompute each layer runs so that every "
                    "stage fits the device and the step is fastest; print the simulated step time against the "
                    "baseline (the configured recompute where it fits, else the fastest single option that fits; "
                    "both when a single option that fits is faster than the configured), each range of layers, the "
                    "stages whose memory the choice changes and the trainer plan.")
    _common.add_pipeline_arguments(parser)
    _common.add_chooser_arguments(parser, modes_help="choose among these runtime modes (e.g. off,selective,full) "
                                                     "instead of each layer kind's recompute options")
    parser.add_argument("--per-layer", action="store_true",
                        help="a mode per layer rather than one for all (unless --modes: those of off,selective,full "
                             "whose option, none, selective or full, every layer kind has)")
    parser.add_argument("--link-gbps", type=float, default=None, metavar="G",
                        help="a host link of G GB/s: each stage's first layers may move what they keep to host "
                             "memory")
    parser.add_argument("--time-unit-ms", type=float, default=None,
                        help="milliseconds per time unit of the layer table, for --link-gbps (default: known from "
                             "the table's unit, e.g. 1 for ms)")
    _common.add_export_argument(parser)
    add_output_arguments(parser, main="layer ranges")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    layers = _common.read_layers(args)
    link = None
    if args.link_gbps is not None:
        unit_ms = ms_per_unit(layers.time_unit, args.time_unit_ms, name="--time-unit-ms")
        link = HostLink.from_gbps(args.link_gbps, time_unit_ms=unit_ms)
    choice = choose_recompute(layers, _common.partition(layers, args), memory_mb=args.memory,
                              modes=_common.modes(args, layers, per_layer=args.per_layer),
                              per_layer=args.per_layer, link=link, fsdp_holds_grads=args.fsdp_holds_grads,
                              bucket_mb=args.bucket_mb)
    out = Output(args, choice.time_unit)
    _common.say_unused_shape(args, out)
    out.value("reason", choice.reason)
    out.value("mode", choice.mode)
    if layers.multimodal and choice.chosen:  # the one mode, stated on every submodule
        out.value("submodule_modes", submodule_modes(choice).to_dict("records"))
    if not choice.chosen:
        out.line(choice.describe())
        out.keep("ranges", choice.ranges)
        out.finish()
        return 1
    for name in ("baseline", "step_time", "baseline_step_time", "step_time_saved", "time_saved", "memory_mb",
                 "fastest_single", "fastest_single_step_time", "fastest_single_step_time_saved"):
        out.value(name, getattr(choice, name))
    out.line(choice.describe())
    out.keep("ranges", choice.ranges)  # one line each in describe
    out.keep("changes", choice.layout_changes())  # in describe, a line per stage
    out.table("stages", choice.stages, key=KEY_COLUMNS, headers=HEADERS)
    out.line(f"baseline_mb: each stage's memory under the baseline; saved against it: {choice.baseline}")
    if choice.layer_options["mode"].notna().all():
        mode, overrides = choice.trainer_plan()
        out.line(trainer_plan_line(mode, overrides))
        out.value("trainer_plan", {"mode": mode, "layers": overrides})
    for setting in (megatron_setting(choice), torchtitan_setting(choice)):
        out.line(f"{setting.runtime}: {setting.settings if setting.expressible else 'not expressible'} "
                 f"({setting.note})")
    _common.print_export(out, choice, args.export)
    out.finish(main="ranges")
    return 0
