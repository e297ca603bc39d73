"""``sappkit search --model NAME|config.json --devices N --global-batch B``: which parallel strategy to run.

Searches every strategy a trainer accepts (:func:`sappkit.search_strategies`) on the local cores, or on a Dask
cluster with ``--scheduler ADDRESS`` (the ``[cluster]`` extra), and prints the fastest, then the best one's
numbers and what the answer leaves out. Progress goes to stderr when it is a terminal. ``--export TRAINER``
searches the schedules that trainer runs and prints the best strategy in its words: its plan balanced within
the trainer's grammar (``StrategySearch.plan(trainer=...)``), with the trainer's degrees, micro-batch size and
global batch taken from the strategy. ``--from-config FILE`` prices the user's own trainer config first
(devices and global batch from it) and prints it against the best term by term; ``--export PATH`` then writes
the best there in that trainer's words. ``--compare 'LABEL'`` sets another strategy beside the best.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .._check import short
from ..columns import SAPP_OPTIONS
from ..errors import InputError
from ..layers import KernelConfig, estimate_layers
from ..layers.configs import ATTENTION_KERNELS, FP8_RECIPES
from ..layers.op_sac import OP_OPTIONS
from ..models import PRESETS, read_model_config
from ..balancer.grammar import TRAINER_SCHEDULES
from ..strategy.evaluate import resolve_model
from ..strategy.search import search_strategies
from ..strategy.search.space import DIMENSIONS, SEARCHED_SCHEDULES
from .._files import write_text
from ..trainers.config import TRAINERS
from ..trainers.exchange import export_config, read_trainer_config
from ._common import print_constraint_cost, print_export
from ._output import Output, add_output_arguments

#: The table's key columns (``--wide`` adds every column of the search's frame).
KEY_COLUMNS = ("label", "step_ms", "tokens_per_s_per_device", "tflops_per_device", "mfu", "peak_memory_mb")
#: ``--dims`` names: each dimension's short name (as strategy labels write it) or its full one.
DIM_NAMES = {"t": "tensor_parallel", "p": "pipeline_parallel", "v": "virtual_stages", "dp": "data_parallel",
             "cp": "context_parallel", "ep": "expert_parallel", "etp": "expert_tensor_parallel",
             "b": "micro_batch_size", "zero": "zero", "sp": "sequence_parallel", "reshard": "reshard_after_forward",
             "tp_overlap": "tp_comm_overlap"} | {name: name for name in DIMENSIONS}
_HEADERS = {"label": "strategy", "step_ms": "step (ms)", "tokens_per_s_per_device": "tokens/s/dev",
            "tflops_per_device": "TFLOP/s/dev", "mfu": "MFU", "peak_memory_mb": "peak (MB)"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "search",
        description="Lay out every strategy a trainer accepts (tensor, pipeline, virtual, data, context and expert "
                    "parallel degrees, micro-batch, ZeRO stage, schedule) for a model on --devices devices, prune "
                    "with closed-form memory and time bounds, price the rest (the even placement, simulated), "
                    "balance the most promising, and print the fastest: step in ms, tokens/s and model TFLOP/s "
                    "per device, MFU, peak memory in MB. Runs on the local cores, or on a Dask cluster with "
                    "--scheduler.")
    parser.add_argument("--model", required=True, metavar="NAME|config.json",
                        help=f"a preset ({', '.join(PRESETS)}) or a Hugging Face config.json")
    parser.add_argument("--devices", type=int, default=None, metavar="N",
                        help="devices to run on (default --from-config's)")
    parser.add_argument("--global-batch", type=int, default=None, metavar="B",
                        help="sequences per step (default --from-config's)")
    parser.add_argument("--from-config", type=Path, default=None, metavar="FILE",
                        help="your own trainer config (a Megatron-LM launch script, a torchtitan TOML, a "
                             "MindFormers YAML): priced first as the baseline, then the best against it term by "
                             "term")
    parser.add_argument("--compare", default=None, metavar="'LABEL'",
                        help="also set a strategy beside the best term by term, e.g. 't8 p16 v2' (what a label "
                             "leaves out takes the default; dp fills the devices)")
    parser.add_argument("--compare-recompute", default=None, choices=(*SAPP_OPTIONS, *OP_OPTIONS),
                        help="price --compare's strategy with every layer on this recompute, whether or not it "
                             "fits (default: the fastest option that fits)")
    parser.add_argument("--seq-length", type=int, default=None, metavar="S",
                        help="tokens per sequence (default the model's)")
    parser.add_argument("--device", default=None, metavar="NAME|FILE",
                        help="device preset, e.g. h100-sxm, or a hardware file (.toml)")
    parser.add_argument("--cluster", default=None, metavar="NAME|FILE",
                        help="cluster preset or hardware file (.toml; nodes and links; default the one built of "
                             "--device, else dgx-h100)")
    parser.add_argument("--memory", type=float, default=None, metavar="MB",
                        help="device memory every stage must fit (default the device's)")
    parser.add_argument("--schedules", default=None, metavar="A,B",
                        help=f"schedules to search (default all of {', '.join(SEARCHED_SCHEDULES)})")
    parser.add_argument("--dims", action="append", default=[], metavar="NAME=V1,V2",
                        help="the values one dimension takes (repeat per dimension), e.g. --dims t=4,8 --dims "
                             "zero=1 --dims sp=true; NAME is t, p, v, dp, cp, ep, etp, b (micro-batch size), zero, "
                             "sp (sequence parallel), reshard (ZeRO 3's reshard_after_forward), tp_overlap "
                             "(tp_comm_overlap), cp_kind (ring, allgather, a2a), or the full name (default: every "
                             "value a trainer accepts)")
    parser.add_argument("--attention", default="flash", choices=ATTENTION_KERNELS,
                        help="the attention kernel, which sets what attention keeps for the backward (default "
                             "flash, as modern trainers run it: nothing kept per query-key pair; paper: the softmax "
                             "output)")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32", "fp8"),
                        help="the dtype the model trains in (default bf16; fp8: the linear layers' GEMMs in FP8 as "
                             "Transformer Engine runs them)")
    parser.add_argument("--fp8-recipe", default=None, choices=FP8_RECIPES,
                        help="with --dtype fp8: Transformer Engine's scaling recipe (default delayed; mxfp8 needs a "
                             "Blackwell device)")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="strategies to print (default 10)")
    parser.add_argument("--balance-top", type=int, default=8, metavar="K",
                        help="how many of the fastest even placements to balance (default 8)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="run on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786; needs the "
                             "[cluster] extra)")
    parser.add_argument("--export", default=None, metavar="TRAINER|PATH",
                        help="also print the best as that trainer's config: megatron (arguments), torchtitan "
                             "(TOML job config), mindformers (YAML) or hyperparallel (YAML); with --from-config, "
                             "a PATH: the best written there in the config's trainer's words")
    add_output_arguments(parser, main="strategies")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    model = _model(args.model, args.seq_length)
    baseline = _baseline(args.from_config, model, args.devices)
    trainer, path = _export_target(args.export, baseline)
    schedules = None if args.schedules is None else [name.strip() for name in args.schedules.split(",")]
    if schedules is None and trainer is not None:  # only what the trainer runs can be exported
        schedules = [name for name in SEARCHED_SCHEDULES if name in TRAINER_SCHEDULES[trainer]]
    dims = searched_dims(args.dims)
    if path is not None and trainer == "torchtitan" and "zero" not in (dims or {}):
        dims = (dims or {}) | {"zero": [3]}  # torchtitan's config states FSDP: it reads back as ZeRO 3
    options = dict(devices=args.devices, global_batch=args.global_batch, seq_length=args.seq_length,
                   cluster=args.cluster, device=args.device, memory_mb=args.memory, schedules=schedules,
                   balance_top=args.balance_top, progress=sys.stderr.isatty(), dims=dims,
                   kernels=KernelConfig(attention=args.attention), dtype=args.dtype,
                   fp8_recipe=args.fp8_recipe, baseline=baseline)
    if args.top < 1:
        raise InputError(f"--top must be an int >= 1; got {args.top}")
    if args.compare_recompute is not None and args.compare is None:
        raise InputError(f"--compare-recompute prices --compare's strategy; got --compare-recompute "
                         f"{args.compare_recompute!r} without --compare")
    if args.scheduler is None:
        found = search_strategies(model, **options)
    else:
        with _dask_client(args.scheduler) as client:
            found = search_strategies(model, executor=client.get_executor(), **options)
    out = Output(args)
    setting = found.setting
    out.line(f"{Path(args.model).name} on {found.devices:,} x {setting.cluster.device.name} ({setting.cluster.name}), global "
             f"batch {found.global_batch:,} x {setting.models[-1].seq_length:,} tokens, memory "
             f"{found.memory_mb:,.0f} MB")
    fixed = " ".join(args.dims) if args.dims else "none (every value a trainer accepts)"
    precision = args.dtype if setting.fp8_recipe is None else f"fp8 ({setting.fp8_recipe} scaling)"
    out.line(f"assumptions: {precision}, attention kernel {args.attention!r}, dims narrowed: {fixed}")
    out.table("strategies", _shown(found.table(args.top)), key=KEY_COLUMNS, headers=_HEADERS,
              machine=found.frame.head(args.top))
    out.line("\n".join(found.describe().splitlines()[1:]))
    _explain(out, found, args.compare, args.compare_recompute)
    _export(out, found, trainer, path)
    out.line(f"searched in {found.seconds:.1f} s")
    best = found.best
    out.value("best", None if best is None else best["label"])
    out.value("step_ms", None if best is None else float(best["step_ms"]))
    out.value("searched", len(found.frame))
    out.value("statuses", {key: int(value) for key, value in found.counts().items()})
    out.value("limits", found.limits())
    out.finish()
    return 0 if best is not None else 1


def _baseline(path: Path | None, model, devices: int | None):
    """``--from-config``'s trainer config, read with the model's depth (torchtitan splits the layers itself)."""
    if path is None:
        return None
    depth = estimate_layers(*resolve_model(model), options=("none",))
    return read_trainer_config(path, layers=depth, world_size=devices)


def _export_target(export: str | None, baseline) -> tuple[str | None, Path | None]:
    """``--export``'s trainer and the path to write to (None: print only)."""
    if export is None or export in TRAINERS:
        return export, None
    if baseline is None:
        raise InputError(f"--export must be a trainer ({', '.join(TRAINERS)}), or a PATH with --from-config; "
                         f"got {export!r}")
    return baseline.trainer, Path(export)


def _explain(out, found, compare: str | None, recompute: str | None) -> None:
    """The baseline against the best and ``--compare``'s strategy against the best, term by term."""
    if found.best is None:
        return
    if found.baseline is not None:
        _comparison(out, "your config", found.against_baseline(), "baseline")
    if compare is not None:
        _comparison(out, "--compare", found.compare(compare, recompute=recompute), "compare")


def _comparison(out, title: str, compared, key: str) -> None:
    out.line(f"{title} (a) against the best (b):")
    out.line(compared.describe())
    out.value(key, {"a": compared.a.label, "b": compared.b.label, "a_step_ms": compared.a.step_ms,
                    "b_step_ms": compared.b.step_ms, "speedup": compared.speedup})


def _export(out, found, trainer: str | None, path: Path | None = None) -> None:
    """``--export``: the best strategy in ``trainer``'s words (a strategy without a pipeline to Megatron-LM only),
    written to ``path`` where one is given."""
    if trainer is None:
        return
    best = found.best
    if best is None:
        raise InputError(f"--export {trainer}: no strategy fits the device memory, so there is none to export")
    strategy = found.strategy()
    if strategy.pipeline_parallel == 1:
        if trainer != "megatron":
            raise InputError(f"--export {trainer}: the best strategy {best['label']} runs no pipeline "
                             "(pipeline_parallel=1) and sappkit exports a strategy without a plan to megatron only; "
                             "use --export megatron")
        out.line(f"the best strategy {best['label']}, every layer recomputing {best['recompute']!r}:")
        print_export(out, strategy, trainer, global_batch=found.global_batch)
        if path is not None:
            write_text(path, export_config(strategy, trainer, global_batch=found.global_batch).text,
                       name="--export")
            out.line(f"wrote {path}")
        if best["recompute"] != "none":  # the arguments of a strategy alone carry no recompute
            out.line(f"note: recompute not set: add Megatron-LM's --recompute-* flags for {best['recompute']!r} "
                     "(or export a strategy with a pipeline: its plan carries them)")
        return
    try:
        plan = found.plan(trainer=trainer)
    except InputError as error:
        raise InputError(f"--export {trainer}: the best strategy {best['label']}: {error}") from None
    out.line(f"the best strategy {best['label']}, its plan within {trainer}'s grammar: {plan.headline()}")
    print_constraint_cost(out, plan)
    if plan.message:
        out.line(plan.message)
    print_export(out, plan, trainer, strategy=strategy, global_batch=found.global_batch)
    if path is not None:
        write_text(path, export_config(plan, trainer, strategy=strategy, global_batch=found.global_batch).text,
                   name="--export")
        out.line(f"wrote {path}")


def searched_dims(given: list[str]) -> dict[str, list] | None:
    """``--dims`` as :func:`sappkit.search_strategies` takes ``dims`` (None: the defaults), each value checked."""
    dims = {}
    for item in given:
        name, sep, values = item.partition("=")
        if not sep or not values:
            raise InputError(f"--dims takes NAME=V1,V2 (e.g. t=4,8); got {item!r}")
        if name not in DIM_NAMES:
            raise InputError(f"--dims {item!r}: unknown dimension {name!r}; expected one of "
                             f"{', '.join(sorted(set(DIM_NAMES) - set(DIMENSIONS)))} (or the full names)")
        key = DIM_NAMES[name]
        if key in dims:
            raise InputError(f"--dims names {key!r} twice; give all its values at once, e.g. {name}=1,2")
        dims[key] = [_dim_value(item, key, value.strip()) for value in values.split(",")]
    return dims or None


def _dim_value(item: str, key: str, value: str):
    if key in ("sequence_parallel", "reshard_after_forward", "tp_comm_overlap"):
        if value.lower() not in ("true", "false", "1", "0"):
            raise InputError(f"--dims {item!r}: {value!r} is not true or false")
        return value.lower() in ("true", "1")
    if key == "cp_kind":
        return value  # search_strategies checks it against the CP kinds
    try:
        return int(value)
    except ValueError:
        raise InputError(f"--dims {item!r}: {value!r} is not a whole number") from None


def _model(name: str, seq_length: int | None):
    """A preset name, or the path of a Hugging Face config.json."""
    if name in PRESETS:
        return name
    path = Path(name)
    if path.suffix != ".json":
        raise InputError(f"--model must be a preset ({', '.join(PRESETS)}) or a config.json file; got {name!r}")
    return read_model_config(path, seq_length=seq_length)


#: A scheduler address sappkit connects to: tcp://, a host name or address, a port.
_ADDRESS = re.compile(r"tcp://[A-Za-z0-9.\-]+(?::[0-9]{1,5})?|tcp://\[[0-9A-Fa-f:]+\](?::[0-9]{1,5})?")


def _dask_client(address: str):
    if not _ADDRESS.fullmatch(address):
        raise InputError(f"--scheduler must be a Dask scheduler's address, tcp://HOST:PORT (tls:// and inproc:// "
                         f"need settings sappkit does not pass); got {short(address)}")
    try:
        from distributed import Client
    except ImportError:
        raise InputError("--scheduler needs Dask's distributed scheduler: pip install 'sappkit[cluster]'") from None
    try:
        return Client(address, timeout=10)
    except (OSError, TimeoutError, ValueError, TypeError, RuntimeError) as error:
        reason = " ".join(str(error).split())[:200]
        raise InputError(f"--scheduler: no Dask scheduler answers at {short(address)} ({reason})") from None


def _shown(table):
    """The printed table: MFU as a percentage, numbers rounded as a terminal reads them."""
    return table.assign(mfu=[f"{value:.1%}" for value in table["mfu"]], step_ms=table["step_ms"].round(0),
                        tokens_per_s_per_device=table["tokens_per_s_per_device"].round(0),
                        tflops_per_device=table["tflops_per_device"].round(1),
                        peak_memory_mb=table["peak_memory_mb"].round(0))
