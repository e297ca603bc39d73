"""What a trainer's config says, in sappkit's terms: a strategy, the layers per cell, each layer's recompute.

:class:`TrainerConfig` is what :func:`sappkit.read_trainer_config` returns
for every trainer: the :class:`~sappkit.Strategy`, how many body layers the
trainer *builds* on each (chunk, stage) cell by its own rules (which may not
be what the config meant: :func:`sappkit.check_config` says so), each body
layer's recompute option in model order, and the settings it read. Its
:meth:`~TrainerConfig.plan_for` prices it as a :class:`~sappkit.Plan` on a
layer table. The other direction, :func:`pipeline_of`, reads the same
quantities off a plan or a recompute choice for the exporters.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from .._check import check_int, check_number, short
from ..balancer.evaluate import counts_from_assignment
from ..balancer.plan import Plan, make_plan
from ..balancer.setup import make_setup
from ..columns import CHUNK, COUNT, KIND, LAYERS, OPTION, ROLE, STAGE
from ..errors import InputError
from ..layers import KernelConfig
from ..layers.op_sac import OP_SAC
from ..layers.table import as_layer_table
from ..limits import MAX_DEVICES, MAX_MEMORY_MB, Limit
from ..pipeline.schedules import model_order, one_stage_allowed
from ..recompute import RecomputeChoice
from ..strategy import Strategy

__all__ = ["TrainerConfig", "Finding", "Pipeline", "TRAINERS", "pipeline_of", "layer_options", "whole", "flag", "section", "strategy_of"]

#: The trainers sappkit speaks, as ``trainer=`` names them.
TRAINERS = ("megatron", "torchtitan", "mindformers", "hyperparallel")


@dataclass(frozen=True)
class Finding:
    """One trap a config falls into: its name, how bad, what happens and the fix, one line each."""

    name: str
    severity: str
    """``"error"`` (the trainer refuses it or trains something else), ``"warning"`` (it runs, worse than it
    could) or ``"note"``."""
    message: str
    fix: str


@dataclass(frozen=True, eq=False)
class TrainerConfig:
    """A trainer config read into sappkit's terms (see the module docstring).

    Attributes
    ----------
    trainer : str
        One of :data:`TRAINERS`.
    strategy : Strategy
        The degrees, micro-batch size, schedule and ZeRO stage the config sets.
    layer_counts : tuple of tuple of int
        ``[chunk][stage]``: body layers the trainer builds on each cell.
    options : tuple of str
        Each built body layer's recompute option, in model order (sappkit's
        names: ``none``, ``selective``, ``comm``, ``both``, ``full``).
    num_layers : int
        Body layers the config declares (``--num-layers``, ``num_layers``).
    micro_batches : int
        Micro-batches per step (per data-parallel rank).
    global_batch : int or None
        Samples per step, where the config gives it.
    seq_split : int
        SeqPipe's slices per micro-batch (MindFormers ``seq_split_num``).
    mtp_layers : int
        Multi-token-prediction layers the config runs after the decoder (Megatron-LM ``--mtp-num-layers``), on
        the last stage: the layer table's tail prices them
        (:attr:`sappkit.TransformerConfig.mtp_layers`, :mod:`sappkit.layers.mtp`).
    seq_params : dict or None
        SeqPipe's model sizes (:func:`sappkit.balance`'s ``seq_params``), where
        the config gives them.
    findings : tuple of Finding
        What the trainer's own rules say about the config (the traps
        :func:`sappkit.check_config` reports with the plan's).
    settings : dict
        The settings read, under the trainer's own names.
    notes : tuple of str
        What sappkit read differently from the trainer, or could not price.
    source : str
        Where the config came from.
    plan : Plan or None
        The config priced (:meth:`plan_for`), when a layer table was given.
    attention : str or None
        The attention kernel the config runs (:attr:`sappkit.layers.KernelConfig.attention`: Megatron-LM's
        ``--attention-backend``, :data:`~sappkit.trainers.megatron_flags.MEGATRON_ATTENTION`); None where the
        config leaves it to the trainer (sappkit's default kernels price it).
    fused_elementwise : bool
        Whether the norms, activations and rotary embedding run fused
        (:attr:`sappkit.layers.KernelConfig.fused_elementwise`): False for a torchtitan config that does not
        compile its model.
    """

    trainer: str
    strategy: Strategy
    layer_counts: tuple[tuple[int, ...], ...]
    options: tuple[str, ...]
    num_layers: int
    micro_batches: int
    global_batch: int | None = None
    seq_split: int = 1
    mtp_layers: int = 0
    seq_params: dict | None = None
    findings: tuple[Finding, ...] = ()
    settings: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    source: str = ""
    plan: Plan | None = None
    attention: str | None = None
    fused_elementwise: bool = True

    @property
    def kernels(self) -> KernelConfig | None:
        """The kernels for ``kernels=`` (:func:`sappkit.evaluate_strategy`): :attr:`attention`'s (default
        flash) and :attr:`fused_elementwise`'s, or None where the config sets neither."""
        if self.attention is None and self.fused_elementwise:
            return None
        return KernelConfig(attention=self.attention or "flash", fused_elementwise=self.fused_elementwise)

    @property
    def built_layers(self) -> int:
        """Body layers the trainer builds (the sum over cells)."""
        return int(sum(map(sum, self.layer_counts)))

    def plan_for(self, layers, *, memory_mb, less_memory=False, objective="sapp", seq_params=None) -> Plan:
        """The config as a :class:`~sappkit.Plan` on ``layers`` (status ``"evaluated"``).

        The layer table's body layers must number what the config declares;
        where the trainer builds fewer or more (integer division), the plan
        prices what it builds: the last body kind loses or gains the
        difference, and the plan's notes say so. ``seq_params`` overrides
        :attr:`seq_params` (SeqPipe with more than one slice needs them). A
        config without a pipeline (pipeline parallel size 1) is priced as 1F1B
        on one stage (:func:`~sappkit.pipeline.schedules.one_stage_allowed`).
        """
        if layers is None:
            raise InputError("layers must be the model's layer table (a LayerTable or its DataFrame); got None")
        table = _built_table(as_layer_table(layers), self)
        options, fallback = self.options_on(table)
        memory_mb = check_number("memory_mb", memory_mb, minimum=0, strict=True, maximum=MAX_MEMORY_MB)
        s = self.strategy
        notes = self.notes + fallback
        if self.mtp_layers:
            notes += (f"the config runs {self.mtp_layers} MTP layer(s) on the last stage: they are priced as far as "
                      "the layer table's tail prices them (estimate_layers with TransformerConfig(mtp_layers="
                      f"{self.mtp_layers}))",)
        if self.built_layers != self.num_layers:
            notes += (f"priced as built: {self.built_layers} body layers, not the {self.num_layers} declared",)
        with one_stage_allowed(s.pipeline_parallel == 1):  # no pipeline: 1F1B on one stage
            setup = make_setup(table, stages=s.pipeline_parallel, micro_batches=self.micro_batches,
                               memory_mb=memory_mb, chunks=s.virtual_stages, schedule=s.schedule,
                               less_memory=less_memory, seq_split=self.seq_split, objective=objective,
                               seq_params=(seq_params or self.seq_params) if self.seq_split > 1 else None)
            assignment = _assignment(table, setup.cells, self.layer_counts, options)
            return make_plan(setup, counts_from_assignment(setup, assignment), status="evaluated", gap=None,
                             solve_seconds=0.0, method=f"{self.trainer} config", notes=setup.notes + notes)

    def options_on(self, layers) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The body layers' options as the layer table ``layers`` prices them, and a note where they differ:
        torchtitan's per-op checkpointing (``selective_op``, :mod:`sappkit.layers.op_sac`) runs as ``selective``
        on a table without it (a measured table, or an estimate of SAPP's five options)."""
        table = as_layer_table(layers)
        missing = {kind for kind, option in zip(_body_kinds(table), self.options)
                   if option == OP_SAC and OP_SAC not in table.options(kind)}
        if not missing:
            return self.options, ()
        options = tuple("selective" if option == OP_SAC and kind in missing else option
                        for kind, option in zip(_body_kinds(table), self.options))
        return options, (f"per-op checkpointing ({OP_SAC!r}) priced as 'selective' on {', '.join(sorted(missing))}: "
                         f"the layer table has no {OP_SAC!r} rows (estimate_layers(..., options=(..., "
                         f"{OP_SAC!r})) prices them)",)

    def with_plan(self, layers, *, memory_mb, **options) -> TrainerConfig:
        """This config with :attr:`plan` priced on ``layers``."""
        return replace(self, plan=self.plan_for(layers, memory_mb=memory_mb, **options))


def _built_table(table, config: TrainerConfig):
    """``table`` with its last body kind resized so the body holds what the trainer builds."""
    declared = table.body_layers
    if declared != config.num_layers:
        raise InputError(f"the layer table has {declared} body layers but the {config.trainer} config declares "
                         f"{config.num_layers}; price it on a table of its model")
    change = config.built_layers - declared
    if change == 0:
        return table
    last = table.body_kinds[-1]
    if table.count(last) + change < 0:
        raise InputError(f"the {config.trainer} config builds {config.built_layers} body layers, fewer than the "
                         f"layer table's kinds before {last!r} hold")
    frame = table.frame.copy()
    rows = (frame[KIND] == last) & (frame[ROLE] == "body")
    frame.loc[rows, COUNT] = table.count(last) + change
    return table.with_frame(frame)


def _body_kinds(table) -> list[str]:
    """Each body layer's kind, in model order."""
    return [kind for kind in table.body_kinds for _ in range(table.count(kind))]


def _assignment(table, cells, layer_counts, options) -> pd.DataFrame:
    """Assignment rows (kind, chunk, stage, option, layers) filling ``cells`` in model order."""
    kinds = _body_kinds(table)
    if len(options) != len(kinds):
        raise InputError(f"the config gives {len(options)} layers a recompute option, the model builds "
                         f"{len(kinds)}")
    rows, layer = [], 0
    for chunk, stage in cells:
        for _ in range(layer_counts[chunk][stage]):
            kind, option = kinds[layer], options[layer]
            if option not in table.options(kind):
                raise InputError(f"the config runs option {option!r} on body layer {layer} ({kind}), which the "
                                 f"layer table does not price (it has {', '.join(table.options(kind))})")
            rows.append((kind, chunk, stage, option))
            layer += 1
    frame = pd.DataFrame(rows, columns=[KIND, CHUNK, STAGE, OPTION])
    return frame.groupby([KIND, CHUNK, STAGE, OPTION], sort=False).size().rename(LAYERS).reset_index()


@dataclass(frozen=True)
class Pipeline:
    """What an exporter reads off a plan or a recompute choice: the pipeline, its cells and their options."""

    schedule: str
    stages: int
    chunks: int
    micro_batches: int
    seq_split: int
    less_memory: bool
    layer_counts: list
    """``[chunk][stage]`` body layers."""
    options: list
    """Each body layer's option, model order (``none`` where the plan configures none)."""
    fits: bool
    memory_mb: float


def pipeline_of(source) -> Pipeline:
    """The :class:`Pipeline` of a :class:`~sappkit.Plan` or a :class:`~sappkit.RecomputeChoice`."""
    if isinstance(source, Plan):
        if source.counts is None:
            raise InputError(f"this plan has no placement to export (status {source.status!r}: "
                             f"{source.message or 'no solution'})")
        setup, body = source.setup, source.partition().body
        options = [str(option) if option is not None else "none" for option in body["configured"]]
        fits, memory_mb = source.fits, setup.memory_mb
        shape = (setup.schedule, setup.stages, setup.chunks, setup.micro_batches, setup.seq_split,
                 setup.less_memory)
    elif isinstance(source, RecomputeChoice):
        if not source.chosen:
            raise InputError(f"this recompute choice has no choice to export: {source.reason}")
        part, body = source.pricing.partition, source.layer_options
        options = [str(option) for option in body[OPTION]]
        fits, memory_mb = True, source.pricing.memory_mb
        shape = (part.schedule, part.stages, part.chunks, part.micro_batches, part.seq_split, part.less_memory)
    else:
        raise InputError(f"expected a Plan (sappkit.balance) or a RecomputeChoice (sappkit.choose_recompute); got "
                         f"{type(source).__name__}")
    schedule, stages, chunks = shape[:3]
    counts = np.zeros((chunks, stages), dtype=int)
    for chunk, stage in zip(body[CHUNK], body[STAGE]):
        counts[chunk, stage] += 1
    return Pipeline(*shape, layer_counts=counts.tolist(), options=options, fits=fits, memory_mb=float(memory_mb))


def layer_options(schedule: str, layer_counts, options: list[str]) -> list[list[list[str]]]:
    """``[chunk][stage]``: the options of each cell's layers, in the order they run."""
    chunks, stages = len(layer_counts), len(layer_counts[0])
    cells = [[[] for _ in range(stages)] for _ in range(chunks)]
    layer = 0
    for chunk, stage in model_order(schedule, stages, chunks):
        cells[chunk][stage] = list(options[layer:layer + layer_counts[chunk][stage]])
        layer += layer_counts[chunk][stage]
    return cells


def whole(what: str, mapping: dict, key: str, default: int, *, minimum: int = 1, maximum: Limit = MAX_DEVICES) -> int:
    """``mapping[key]`` (``default`` when absent) as an int in ``minimum..maximum``, else an InputError naming the
    key (every count a config holds has a limit; the default one is :data:`~sappkit.limits.MAX_DEVICES`)."""
    return check_int(f"{what}: {key}", mapping.get(key, default), minimum=minimum, maximum=maximum)


def flag(what: str, mapping: dict, key: str, default: bool) -> bool:
    """``mapping[key]`` (``default`` when absent) as a bool: YAML, TOML and JSON write real booleans, and a string
    such as ``'no'`` or ``"false"`` is refused rather than read as true."""
    value = mapping.get(key, default)
    if isinstance(value, bool):
        return value
    raise InputError(f"{what}: {key} must be true or false (a boolean, unquoted); got {short(value)}")


def strategy_of(what: str, **fields) -> Strategy:
    """``Strategy(**fields)``, a refusal naming the config it was read from."""
    try:
        return Strategy(**fields)
    except InputError as error:
        raise error.with_prefix(f"{what}: ") from None


def section(what: str, mapping, key: str) -> dict:
    """``mapping[key]`` as a mapping (empty when absent), else an InputError naming the key."""
    value = mapping.get(key) if isinstance(mapping, dict) else None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{what}: {key} must be a mapping; got {short(value)}")
    return value
