"""One door per direction: read any trainer's config, export to any trainer, check a config.

- :func:`read_trainer_config`: a Megatron-LM argument list or launch script
  (``.sh``), a torchtitan job config (``.toml``) or recipe (``.py``), a
  MindFormers YAML or a HyperParallel trainer YAML, as a
  :class:`~sappkit.trainers.config.TrainerConfig` with its strategy and, given
  a layer table and the device memory, the :class:`~sappkit.Plan` it implies.
- :func:`export_config`: a plan, a recompute choice or a strategy (the
  strategy search's rows) as the text a trainer takes, with notes on what it
  runs differently (``sappkit balance|choose --export TRAINER``).
- :func:`check_config`: a config's per-stage memory, simulated step and every
  trap as a named finding with its fix (``sappkit check-config``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from .._check import check_choice, short
from .._files import as_path, load_yaml, read_text
from ..balancer.plan import Plan
from ..errors import InputError
from ..layers.table import as_layer_table
from ..strategy import Strategy
from .check import FINDING_COLUMNS, ConfigCheck, check_plan_findings
from .config import TRAINERS, TrainerConfig
from .hyperparallel import hyperparallel_config, read_hyperparallel
from .megatron import megatron_args, read_megatron
from .mindformers import mindformers_config, read_mindformers
from .torchtitan import torchtitan_config
from .torchtitan_import import read_torchtitan

__all__ = ["read_trainer_config", "export_config", "check_config", "TrainerExport"]

_BY_SUFFIX = {".sh": "megatron", ".toml": "torchtitan", ".py": "torchtitan", ".yaml": "mindformers",
              ".yml": "mindformers"}


@dataclass(frozen=True)
class TrainerExport:
    """What to paste into a trainer's config, and what the trainer runs differently from the plan.

    Attributes
    ----------
    trainer : str
    form : str
        ``"arguments"`` (Megatron-LM, one flag per line), ``"toml"`` or
        ``"python"`` (torchtitan's release and main branch), ``"yaml"``.
    text : str
    notes : tuple of str
    """

    trainer: str
    form: str
    text: str
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """The text, then each note as a comment line (``# note: ...``)."""
        return "\n".join([self.text, *(f"# note: {note}" for note in self.notes)])


def export_config(source, trainer: str, *, strategy: Strategy | None = None, global_batch: int | None = None,
                  form: str | None = None) -> TrainerExport:
    """A plan, a recompute choice or a strategy in ``trainer``'s words.

    Parameters
    ----------
    source : Plan, RecomputeChoice or Strategy
        A strategy alone exports to Megatron-LM only (its arguments place the
        layers evenly); the others take the pipeline from a plan.
    trainer : {"megatron", "torchtitan", "mindformers", "hyperparallel"}
    strategy : Strategy, optional
        The degrees to write with a plan (the strategy search's row).
    global_batch : int, optional
        Samples per step, for Megatron-LM's ``--global-batch-size``.
    form : {"toml", "python"}, optional
        torchtitan only: the release's TOML (default) or the main branch's
        Python config.

    Examples
    --------
    >>> print(export_config(Strategy(tensor_parallel=8, pipeline_parallel=4, data_parallel=2), "megatron",
    ...                     global_batch=64).text)
    --pipeline-model-parallel-size 4 \\
    --tensor-model-parallel-size 8 \\
    --micro-batch-size 1 \\
    --global-batch-size 64 \\
    --sequence-parallel \\
    --use-distributed-optimizer \\
    --bf16
    """
    trainer = check_choice("trainer", trainer, TRAINERS)
    if strategy is not None and not isinstance(strategy, Strategy):
        raise InputError(f"strategy must be a sappkit.Strategy (e.g. Strategy(tensor_parallel=2)); got "
                         f"{short(strategy)}")
    if form is not None and (trainer != "torchtitan" or form not in ("toml", "python")):
        raise InputError(f"form must be 'toml' or 'python', for trainer 'torchtitan' only; got form={form!r} with "
                         f"trainer {trainer!r}")
    if isinstance(source, Strategy) and trainer != "megatron":
        raise InputError(f"a strategy alone exports to megatron (its arguments split the layers evenly); {trainer} "
                         "needs the plan's stages: export a plan (sappkit.balance) with strategy=")
    if trainer == "megatron":
        args = megatron_args(source, strategy=strategy, global_batch=global_batch)
        return TrainerExport("megatron", "arguments", args.shell(), args.notes)
    if trainer == "torchtitan":
        config = torchtitan_config(source, strategy=strategy)
        text = config.to_python() if form == "python" else config.to_toml()
        return TrainerExport("torchtitan", form or "toml", text, config.notes)
    config = (mindformers_config(source, strategy=strategy, strict=False) if trainer == "mindformers" else
              hyperparallel_config(source, strategy=strategy))
    return TrainerExport(trainer, "yaml", config.to_yaml().rstrip("\n"), config.notes)


def read_trainer_config(source, *, trainer: str | None = None, layers=None, memory_mb: float | None = None,
                        world_size: int | None = None, micro_batches: int | None = None) -> TrainerConfig:
    """A trainer's config as a strategy and the :class:`~sappkit.Plan` it implies.

    Parameters
    ----------
    source : path or list of str
        A config file, or Megatron-LM arguments as a list.
    trainer : {"megatron", "torchtitan", "mindformers", "hyperparallel"}, optional
        Default from the file: ``.sh`` Megatron-LM, ``.toml``/``.py``
        torchtitan, ``.yaml`` MindFormers (HyperParallel when it has an
        ``accelerator`` section), an argument list Megatron-LM.
    layers : LayerTable or DataFrame, optional
        The model's layer table: prices the config (``config.plan``) and
        gives the depth to configs that name none.
    memory_mb : float, optional
        Device memory, with ``layers``.
    world_size : int, optional
        Devices, for the data-parallel degree where the config leaves it to
        the launcher.
    micro_batches : int, optional
        HyperParallel only (its config does not set them).

    Returns
    -------
    TrainerConfig
    """
    trainer, origin, document = _trainer_of(source, trainer)
    table = None if layers is None else as_layer_table(layers)
    depth = None if table is None else table.body_layers
    read = source if document is None else document  # a YAML file is parsed once
    try:
        if trainer == "megatron":
            config = _read_megatron(source, origin, world_size)
        elif trainer == "torchtitan":
            config = read_torchtitan(source, num_layers=depth, world_size=world_size)
        elif trainer == "mindformers":
            config = read_mindformers(read, world_size=world_size)
        else:
            config = read_hyperparallel(read, num_layers=depth, micro_batches=micro_batches, world_size=world_size)
    except InputError as error:  # every refusal names the file it read
        raise (error if origin in str(error) else error.with_prefix(f"{origin}: ")) from None
    config = config if document is None else replace(config, source=origin)
    if table is not None and memory_mb is not None:
        config = config.with_plan(table, memory_mb=memory_mb)
    return config


def _trainer_of(source, trainer) -> tuple[str, str, dict | None]:
    """``(trainer, where the config comes from, its YAML document when it is a YAML file)``."""
    if isinstance(source, list | tuple):
        return (check_choice("trainer", trainer, ("megatron",)) if trainer is not None else "megatron",
                "arguments", None)
    if trainer is not None:
        trainer = check_choice("trainer", trainer, TRAINERS)
        if trainer in ("mindformers", "hyperparallel") and not isinstance(source, dict):
            path = as_path("source", source)
            return trainer, str(path), load_yaml(path, f"a {trainer} config")
        return trainer, str(source), None
    path = as_path("source", source)
    found = _BY_SUFFIX.get(path.suffix.lower())
    if found is None:
        raise InputError(f"{path}: give trainer= for a config named like this (sappkit reads .sh Megatron-LM "
                         ".toml/.py torchtitan, .yaml MindFormers or HyperParallel)")
    if found != "mindformers":
        return found, str(path), None
    document = load_yaml(path, "a trainer config")
    if not isinstance(document, dict):
        raise InputError(f"{path}: a MindFormers or HyperParallel config is a YAML mapping; got {short(document)}")
    return ("hyperparallel" if "accelerator" in document else "mindformers"), str(path), document


def _read_megatron(source, origin: str, world_size) -> TrainerConfig:
    if isinstance(source, list | tuple):
        return read_megatron(list(source), world_size=world_size, origin=origin)
    path = as_path("source", source)
    return read_megatron(read_text(path, "a Megatron-LM launch script"), world_size=world_size, origin=str(path))


def check_config(source, layers, *, memory_mb: float, trainer: str | None = None, world_size: int | None = None,
                 micro_batches: int | None = None) -> ConfigCheck:
    """Price a trainer config and report every trap it falls into (``sappkit check-config``).

    ``source`` is what :func:`read_trainer_config` reads, or a
    :class:`TrainerConfig` it returned.

    Returns
    -------
    ConfigCheck
        ``.findings`` (``finding``, ``severity``, ``message``, ``fix``),
        ``.plan``, ``.step_time``, ``.describe()``.
    """
    if layers is None:
        raise InputError("layers must be the model's layer table (a LayerTable or its DataFrame), which prices the "
                         "config; got None")
    if isinstance(source, TrainerConfig):
        config = source.with_plan(layers, memory_mb=memory_mb)
    else:
        config = read_trainer_config(source, trainer=trainer, layers=layers, memory_mb=memory_mb,
                                     world_size=world_size, micro_batches=micro_batches)
    plan: Plan = config.plan
    findings = list(config.findings) + check_plan_findings(config, plan)
    frame = pd.DataFrame([(f.name, f.severity, f.message, f.fix) for f in findings], columns=list(FINDING_COLUMNS))
    return ConfigCheck(config=config, plan=plan, findings=frame, step_time=float(plan.step_time))


