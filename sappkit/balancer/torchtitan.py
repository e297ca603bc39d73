"""A plan as torchtitan's job config: pipeline degree, schedule, the modules of each model part, checkpointing.

torchtitan (``[parallelism]`` and ``[activation_checkpoint]`` of its TOML job
config) builds one model part per pipeline stage and chunk, in PyTorch's
stage order, which is sappkit's model order (chunk 0 stages 0..p-1, then
chunk 1, ...; the V shapes run chunk 1 back up). The plan's cells become
``pipeline_parallel_module_fqns_per_model_part`` (exact for any placement:
the embedding joins the first part, the final norm and LM head the last),
its schedule ``pipeline_parallel_schedule``, and its recompute options
:func:`~sappkit.recompute.export.torchtitan_layer_setting` (one mode, or
every ``N``-th block of each part fully checkpointed). What torchtitan cannot
run as planned is said in ``notes``.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

import pandas as pd

from .._check import check_int, short
from ..columns import CHUNK, OPTION, STAGE
from ..errors import InputError
from ..limits import MAX_MICROBATCH_SIZE
from ..layers.units import TEXT_WIDTH
from ..recompute.export import torchtitan_layer_setting
from .plan import Plan

__all__ = ["TorchtitanConfig", "torchtitan_config", "TORCHTITAN_SCHEDULES"]

#: sappkit schedule -> torchtitan's ``pipeline_parallel_schedule`` (PyTorch's class name without "Schedule").
TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe",
                        "looped_bfs": "LoopedBFS", "zb_interleaved": "InterleavedZeroBubble",
                        "zbv": "ZBVZeroBubble", "dualpipev_split": "DualPipeV", "dualpipev": "DualPipeV"}


@dataclass(frozen=True)
class TorchtitanConfig:
    """The job-config sections a plan sets, and what torchtitan runs differently from the plan.

    Attributes
    ----------
    settings : dict
        ``{"parallelism": {...}, "activation_checkpoint": {...}}`` (the
        latter empty when torchtitan cannot express the plan's recompute).
    notes : tuple of str
        Where torchtitan departs from the plan, and what else to set.
    """

    settings: dict
    notes: tuple[str, ...] = field(default=())

    def to_toml(self) -> str:
        """The sections as TOML, ready to paste into a torchtitan job config.

        Examples
        --------
        >>> print(TorchtitanConfig({"parallelism": {"pipeline_parallel_degree": 2,
        ...                                         "pipeline_parallel_schedule": "1F1B"}}).to_toml())
        [parallelism]
        pipeline_parallel_degree = 2
        pipeline_parallel_schedule = "1F1B"
        """
        lines = []
        for section, values in self.settings.items():
            if values:
                lines.append(f"[{section}]")
                lines.extend(f"{key} = {_toml(value, len(key) + 3)}" for key, value in values.items())
                lines.append("")
        return "\n".join(lines).rstrip("\n")


def _toml(value, taken: int = 0, indent: str = "") -> str:
    """``value`` as TOML; an array longer than the line's room (``TEXT_WIDTH`` less ``taken`` columns) goes on
    lines of its own, as many items to a line as fit (TOML allows line breaks inside arrays), so a config reads
    in 100 columns."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    flat = "[" + ", ".join(_toml(item) for item in value) + "]"
    if taken + len(flat) <= TEXT_WIDTH or not value:
        return flat
    inner = indent + "    "
    lines, line = [], ""
    for piece in (_toml(item, len(inner) + 1, inner) + "," for item in value):
        if line and ("\n" in piece or len(inner) + len(line) + 1 + len(piece) > TEXT_WIDTH):
            lines.append(inner + line)
            line = ""
        if "\n" in piece:
            lines.append(inner + piece)
        else:
            line = f"{line} {piece}" if line else piece
    return "[\n" + "\n".join(lines + [inner + line] * bool(line)) + "\n" + indent + "]"


def torchtitan_config(plan: Plan, *, microbatch_size: int = 1, head_modules=("tok_embeddings",),
                      layer_module: str = "layers.{}", tail_modules=("norm", "output")) -> TorchtitanConfig:
    """The plan as torchtitan's ``[parallelism]`` and ``[activation_checkpoint]`` settings.

    Parameters
    ----------
    plan : Plan
        A plan with a placement (:func:`sappkit.balance`, :func:`sappkit.plan_from_offsets`).
    microbatch_size : int
        Samples per micro-batch (``pipeline_parallel_microbatch_size``); the
        plan's ``m`` micro-batches then need ``local_batch_size = m ·
        microbatch_size`` (said in the notes).
    head_modules, layer_module, tail_modules
        The model's module names: torchtitan's Llama and DeepSeek names by
        default (``layer_module`` formats a body layer's index in model order).

    Returns
    -------
    TorchtitanConfig

    Examples
    --------
    >>> from sappkit import balance
    >>> rows = [dict(kind="block", role="body", count=4, param_mb=100, option=o, forward_time=1,
    ...              backward_time=b, activation_mb=a) for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> config = torchtitan_config(balance(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000))
    >>> config.settings["parallelism"]["pipeline_parallel_module_fqns_per_model_part"]
    [['tok_embeddings', 'layers.0', 'layers.1'], ['layers.2', 'layers.3', 'norm', 'output']]
    >>> config.settings["activation_checkpoint"]
    {'mode': 'none'}
    """
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a Plan (sappkit.balance, sappkit.plan_from_offsets); got "
                         f"{type(plan).__name__}")
    size = check_int("microbatch_size", microbatch_size, minimum=1, maximum=MAX_MICROBATCH_SIZE)
    head, tail = _module_names("head_modules", head_modules), _module_names("tail_modules", tail_modules)
    _check_layer_module(layer_module)
    setup = plan.setup
    if setup.schedule not in TORCHTITAN_SCHEDULES:
        raise InputError(f"torchtitan runs no {setup.schedule!r} schedule; plan for one of "
                         f"{', '.join(map(repr, TORCHTITAN_SCHEDULES))}")
    layers = plan.partition().body.rename(columns={"configured": OPTION}).assign(offloaded_mb=0.0)
    parts = _model_parts(layers, plan, head, layer_module, tail)
    checkpoint = torchtitan_layer_setting(layers)
    notes = [f"run {setup.micro_batches} micro-batches: set training.local_batch_size = "
             f"{setup.micro_batches * size} ({setup.micro_batches} x pipeline_parallel_microbatch_size)"]
    if setup.schedule == "dualpipev":
        notes.append("torchtitan's DualPipeV splits the backward into input and weight passes (sappkit's "
                     "'dualpipev_split'); simulate that schedule to see what it runs")
    if not plan.fits:
        notes.append(f"the plan does not fit memory_mb={setup.memory_mb:g} (status {plan.status!r}: "
                     f"{plan.message or 'over the limit'})")
    if setup.less_memory:
        notes.append("torchtitan's Interleaved1F1B has no less-memory variant: it warms up 2 forwards per stage "
                     "of distance, so it holds more than planned")
    notes.append(("activation checkpointing: " + checkpoint.note) if checkpoint.expressible else
                 f"activation checkpointing not set: {checkpoint.note}; set it per block in the model code")
    parallelism = {"pipeline_parallel_degree": setup.stages,
                   "pipeline_parallel_schedule": TORCHTITAN_SCHEDULES[setup.schedule],
                   "pipeline_parallel_microbatch_size": size,
                   "pipeline_parallel_module_fqns_per_model_part": parts}
    return TorchtitanConfig({"parallelism": parallelism, "activation_checkpoint": dict(checkpoint.settings)},
                            tuple(notes))


def _module_names(name: str, value) -> list[str]:
    """``value`` as a list of module names (a tuple or list of non-empty strings; empty is allowed)."""
    if not isinstance(value, list | tuple):
        raise InputError(f"{name} must be a list of module names (strings); got {short(value)}")
    for i, module in enumerate(value):
        if not isinstance(module, str) or not module.strip():
            raise InputError(f"{name}[{i}] must be a non-empty module name; got {short(module)}")
    return list(value)


def _check_layer_module(layer_module) -> None:
    """Refuse a layer-module pattern that does not hold exactly one plain ``{}`` for the layer index."""
    expected = "a string with one '{}' where the layer index goes"
    if not isinstance(layer_module, str):
        raise InputError(f"layer_module must be {expected}; got {short(layer_module)}")
    try:
        fields = [parsed[1:] for parsed in string.Formatter().parse(layer_module) if parsed[1] is not None]
    except ValueError:  # an unmatched brace
        fields = None
    if fields != [("", "", None)]:
        raise InputError(f"layer_module must be {expected} (write other braces as '{{{{' and '}}}}'); "
                         f"got {short(layer_module)}")


def _model_parts(layers: pd.DataFrame, plan: Plan, head: list[str], layer_module: str,
                 tail: list[str]) -> list[list[str]]:
    """Module names per model part, parts in model order (the head's cell first, the tail's last)."""
    cells = plan.setup.cells
    names = {cell: [] for cell in cells}
    for row in layers.itertuples():
        names[(getattr(row, CHUNK), getattr(row, STAGE))].append(layer_module.format(row.layer))
    parts = [names[cell] for cell in cells]
    return [head + parts[0], *parts[1:-1], parts[-1] + tail] if len(parts) > 1 else [head + parts[0] + tail]
