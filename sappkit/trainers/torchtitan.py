"""A plan as torchtitan's config: the release's TOML job config and the Python config of its main branch.

torchtitan builds one model part per pipeline stage and chunk, in PyTorch's
stage order, which is sappkit's model order (chunk 0 stages 0..p-1, then
chunk 1, ...; the V schedules run chunk 1 back up). The plan's cells become
``module_fqns_per_model_part`` (exact for any placement: the embedding joins
the first part, the final norm and LM head the last), its schedule
``pipeline_parallel_schedule`` and its recompute the activation
checkpointing of its policy (:mod:`sappkit.balancer.grammar`): one mode, or
every ``N``-th block a rank builds fully checkpointed.

Two forms, the names as each version spells them:

- :meth:`TorchtitanConfig.to_toml`, the TOML job config of the current
  release (v0.2.2, commit ``73a0e6979dd1``, ``torchtitan/config/
  job_config.py``): ``[parallelism]`` ``pipeline_parallel_degree``,
  ``pipeline_parallel_schedule``, ``module_fqns_per_model_part``,
  ``pipeline_parallel_microbatch_size``, the degrees;
  ``[training] local_batch_size``; ``[activation_checkpoint]`` ``mode`` and
  ``selective_ac_option``;
- :meth:`TorchtitanConfig.to_python`, the dataclass config of the main
  branch (commit ``b5bcd76c66d0``, ``torchtitan/config/configs.py``,
  ``torchtitan/distributed/activation_checkpoint.py``), where micro-batches
  are ``num_pp_microbatches`` and checkpointing a policy config
  (``FullAC.Config()``, ``SelectiveAC.Config()`` or ``None``); it has no
  every-``N``-th-block policy.

What torchtitan runs differently from the plan is said in ``notes``.
"""

from __future__ import annotations

import json
import string
import textwrap
from dataclasses import dataclass, field

from .._check import check_int, short
from ..balancer.grammar import TRAINER_SCHEDULES, matching_policy
from ..errors import InputError
from ..layers.op_sac import OP_SAC
from ..limits import MAX_MICROBATCH_SIZE
from ..pipeline.schedules import model_order
from ..strategy import Strategy
from .config import pipeline_of

__all__ = ["TorchtitanConfig", "torchtitan_config", "TORCHTITAN_SCHEDULES"]

#: sappkit schedule -> torchtitan's ``pipeline_parallel_schedule`` (PyTorch's class name without "Schedule").
TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe",
                        "looped_bfs": "LoopedBFS", "zb_interleaved": "InterleavedZeroBubble",
                        "zbv": "ZBVZeroBubble", "dualpipev_split": "DualPipeV", "dualpipev": "DualPipeV"}
#: The main branch's activation-checkpointing policy config per release mode.
_PYTHON_AC = {"none": "None", "full": "FullAC.Config()", "selective": "SelectiveAC.Config()"}


@dataclass(frozen=True)
class TorchtitanConfig:
    """The config sections a plan sets, and what torchtitan runs differently from the plan.

    Attributes
    ----------
    settings : dict
        ``{"parallelism": {...}, "training": {...}, "activation_checkpoint": {...}}``
        under the release's names (the last empty when torchtitan cannot
        express the plan's recompute).
    notes : tuple of str
        Where torchtitan departs from the plan, and what else to set.
    """

    settings: dict
    notes: tuple[str, ...] = field(default=())

    def to_toml(self) -> str:
        """The sections as TOML, ready to paste into a torchtitan (v0.2) job config.

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
                lines.extend(_assignment(key, value) for key, value in values.items())
                lines.append("")
        return "\n".join(lines).rstrip("\n")

    def to_python(self) -> str:
        """The settings as assignments for a recipe of torchtitan's main branch (its Python config).

        ``pipeline_parallel_microbatch_size`` and ``local_batch_size`` become
        ``num_pp_microbatches``; checkpointing a policy config.

        Examples
        --------
        >>> print(TorchtitanConfig({"parallelism": {"pipeline_parallel_degree": 2},
        ...                         "activation_checkpoint": {"mode": "full"}}).to_python())
        config.parallelism.pipeline_parallel_degree = 2
        config.activation_checkpoint = FullAC.Config()
        """
        parallelism = dict(self.settings.get("parallelism", {}))
        size = parallelism.pop("pipeline_parallel_microbatch_size", None)
        local = self.settings.get("training", {}).get("local_batch_size")
        if size and local:
            parallelism["num_pp_microbatches"] = local // size
        lines = [f"config.parallelism.{key} = {_literal(value, toml=False)}" for key, value in parallelism.items()]
        checkpoint = self.settings.get("activation_checkpoint", {})
        if checkpoint and checkpoint.get("selective_ac_option", "op") == "op":
            lines.append(f"config.activation_checkpoint = {_PYTHON_AC[checkpoint['mode']]}")
        return "\n".join(lines)


def _assignment(key: str, value) -> str:
    """``key = value`` in TOML; a list of lists one inner list per line, each wrapped within 100 columns."""
    if not (isinstance(value, list) and value and all(isinstance(item, list) for item in value)):
        return f"{key} = {_literal(value, toml=True)}"
    lines = [f"{key} = ["]
    for inner in value:
        words = [_literal(item, toml=True) for item in inner]
        if not words:
            lines.append("  [],")
            continue
        lines += textwrap.wrap(", ".join(words), 94, initial_indent="  [", subsequent_indent="   ",
                               break_long_words=False, break_on_hyphens=False)
        lines[-1] += "],"
    return "\n".join(lines + ["]"])


def _literal(value, *, toml: bool) -> str:
    if isinstance(value, bool):
        return ("true" if value else "false") if toml else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):  # JSON's escapes are also TOML's basic-string escapes and Python's (TOML: DEL too)
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    return "[" + ", ".join(_literal(item, toml=toml) for item in value) + "]"


def torchtitan_config(plan, *, microbatch_size: int = 1, head_modules=("tok_embeddings",),
                      layer_module: str = "layers.{}", tail_modules=("norm", "output"),
                      strategy: Strategy | None = None) -> TorchtitanConfig:
    """A plan (or a recompute choice) as torchtitan's ``[parallelism]``, ``[training]`` and checkpointing.

    Parameters
    ----------
    plan : Plan or RecomputeChoice
        A plan with a placement (:func:`sappkit.balance`,
        :func:`sappkit.plan_from_offsets`), or a recompute choice on one.
    microbatch_size : int
        Samples per micro-batch (``pipeline_parallel_microbatch_size``); the
        plan's ``m`` micro-batches then need ``local_batch_size = m ·
        microbatch_size`` (written under ``training``).
    head_modules, layer_module, tail_modules
        The model's module names: torchtitan's Llama and DeepSeek names by
        default (``layer_module`` formats a body layer's index in model order).
    strategy : Strategy, optional
        The degrees to write too (its pipeline must be the plan's); its
        micro-batch size overrides ``microbatch_size``.

    Returns
    -------
    TorchtitanConfig

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit import balance
    >>> rows = [dict(kind="block", role="body", count=4, param_mb=100, option=o, forward_time=1,
    ...              backward_time=b, activation_mb=a) for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> config = torchtitan_config(balance(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000))
    >>> config.settings["parallelism"]["module_fqns_per_model_part"]
    [['tok_embeddings', 'layers.0', 'layers.1'], ['layers.2', 'layers.3', 'norm', 'output']]
    >>> config.settings["activation_checkpoint"]
    {'mode': 'none'}
    """
    pipe = pipeline_of(plan)
    size = check_int("microbatch_size", microbatch_size if strategy is None else strategy.micro_batch_size,
                     minimum=1, maximum=MAX_MICROBATCH_SIZE)
    head, tail = _module_names("head_modules", head_modules), _module_names("tail_modules", tail_modules)
    _check_layer_module(layer_module)
    if pipe.schedule not in TRAINER_SCHEDULES["torchtitan"]:
        raise InputError(f"torchtitan runs no {pipe.schedule!r} schedule; plan for one of "
                         f"{', '.join(map(repr, TRAINER_SCHEDULES['torchtitan']))}")
    notes = []
    if pipe.schedule == "dualpipev":
        notes.append("torchtitan's DualPipeV splits the backward into input and weight passes (sappkit's "
                     "'dualpipev_split'); simulate that schedule to see what it runs")
    if not pipe.fits:
        notes.append(f"the plan does not fit memory_mb={pipe.memory_mb:g}")
    if pipe.less_memory:
        notes.append("torchtitan's Interleaved1F1B has no less-memory variant: it warms up 2 forwards per stage "
                     "of distance, so it holds more than planned")
    parallelism = {"pipeline_parallel_degree": pipe.stages,
                   "pipeline_parallel_schedule": TORCHTITAN_SCHEDULES[pipe.schedule],
                   "pipeline_parallel_microbatch_size": size,
                   "module_fqns_per_model_part": _model_parts(pipe, head, layer_module, tail)}
    if strategy is not None:
        parallelism.update(_degrees(strategy, pipe, notes))
    return TorchtitanConfig({"parallelism": parallelism,
                             "training": {"local_batch_size": pipe.micro_batches * size},
                             "activation_checkpoint": _checkpointing(pipe, notes)}, tuple(notes))


def _degrees(strategy: Strategy, pipe, notes: list[str]) -> dict:
    s = strategy
    if (s.pipeline_parallel, s.virtual_stages, s.schedule) != (pipe.stages, pipe.chunks, pipe.schedule):
        raise InputError(f"strategy runs p={s.pipeline_parallel}, v={s.virtual_stages}, {s.schedule!r} but the "
                         f"plan p={pipe.stages}, v={pipe.chunks}, {pipe.schedule!r}")
    if s.zero in (1, 2) and s.data_parallel > 1:
        notes.append(f"ZeRO stage {s.zero}: torchtitan shards data parallelism with FSDP, which shards weights too "
                     "(ZeRO-3)")
    sharded = s.zero >= 1
    degrees = {"data_parallel_shard_degree": s.data_parallel if sharded else 1,
               "data_parallel_replicate_degree": 1 if sharded else s.data_parallel,
               "tensor_parallel_degree": s.tensor_parallel, "context_parallel_degree": s.context_parallel,
               "expert_parallel_degree": s.expert_parallel}
    if s.expert_tensor_parallel != 1:
        degrees["expert_tensor_parallel_degree"] = s.expert_tensor_parallel
    if sharded and s.data_parallel > 1:
        degrees["fsdp_reshard_after_forward"] = "always" if s.reshard_after_forward else "never"
    if s.tp_comm_overlap:
        degrees["enable_async_tensor_parallel"] = True
        notes.append("async TP (enable_async_tensor_parallel) runs under torch.compile: set [compile] enable")
    return degrees


def _checkpointing(pipe, notes: list[str]) -> dict:
    policy = matching_policy("torchtitan", pipe.schedule, pipe.layer_counts, pipe.options)
    if policy is None:
        notes.append(f"activation checkpointing not set: torchtitan runs one mode on every block, or fully "
                     f"checkpoints every N-th block a rank builds, and this plan runs {sorted(set(pipe.options))} "
                     "otherwise; plan with balance(..., trainer='torchtitan') or set it per block in the model code")
        return {}
    if policy.family == "every":
        notes.append(f"activation checkpointing: the blocks at positions {policy.n}, {2 * policy.n}, ... of those "
                     "a rank builds, counted across its model parts, fully checkpointed (the release's "
                     "selective_ac_option; the main branch has no such policy)")
        return {"mode": "selective", "selective_ac_option": str(policy.n)}
    notes.append(f"activation checkpointing: every block runs {policy.option}")
    if policy.option == OP_SAC:
        return {"mode": "selective", "selective_ac_option": "op"}
    if policy.option == "selective":
        notes.append("torchtitan's op-level selective checkpointing is priced as the layer table's 'selective' "
                     "option")
        return {"mode": "selective", "selective_ac_option": "op"}
    return {"mode": policy.option}


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


def _model_parts(pipe, head: list[str], layer_module: str, tail: list[str]) -> list[list[str]]:
    """Module names per model part, parts in model order (the head's cell first, the tail's last)."""
    parts, layer = [], 0
    for chunk, stage in model_order(pipe.schedule, pipe.stages, pipe.chunks):
        n = pipe.layer_counts[chunk][stage]
        parts.append([layer_module.format(i) for i in range(layer, layer + n)])
        layer += n
    return [head + parts[0], *parts[1:-1], parts[-1] + tail] if len(parts) > 1 else [head + parts[0] + tail]
