"""A run of the user's: the model, the strategy a trainer config sets, and the step time its log measured.

:func:`read_run` reads the three files a user has after training: the
trainer config (:func:`sappkit.read_trainer_config`: Megatron-LM, torchtitan,
MindFormers, HyperParallel; with the attention kernel it names), the model (a preset name or a Hugging Face
``config.json``) and the training log (:func:`~sappkit.calibration.logs.read_step_times`:
Megatron-LM, torchtitan, NeMo/Lightning), the median step after the warm-up.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from .._check import check_int, check_number
from ..errors import InputError
from ..layers import KernelConfig, TransformerConfig
from ..layers.op_sac import OP_SAC, prices_op_sac
from ..models import get, read_model_config
from ..strategy import Strategy
from ..trainers import read_trainer_config
from ..trainers.torchtitan_import import read_torchtitan
from .logs import measured_step_ms

__all__ = ["Run", "read_run"]


@dataclass(frozen=True)
class Run:
    """One measured training run: what ran, on how many devices, and its step time.

    ``recompute`` is the option every body layer ran (``none``, ``selective``,
    ``comm``, ``both``, ``full``, or torchtitan's per-op ``selective_op``, which
    :func:`read_run` reads as ``selective`` on layers it does not price:
    :func:`~sappkit.layers.op_sac.prices_op_sac`); ``kernels`` the kernels it ran (None:
    :func:`sappkit.evaluate_strategy`'s default, flash attention).
    """

    name: str
    model: TransformerConfig
    strategy: Strategy
    global_batch: int
    step_ms: float
    recompute: str = "none"
    kernels: KernelConfig | None = None

    def __post_init__(self):
        if not isinstance(self.model, TransformerConfig):
            raise InputError(f"run {self.name!r}: model must be a TransformerConfig; got {type(self.model).__name__}")
        if not isinstance(self.strategy, Strategy):
            raise InputError(f"run {self.name!r}: strategy must be a Strategy; got {type(self.strategy).__name__}")
        check_int("global_batch", self.global_batch, minimum=1)
        check_number("step_ms", self.step_ms, minimum=0, strict=True)


def read_run(config, model, log, *, world_size: int | None = None, seq_length: int | None = None,
             warmup: int = 10, name: str | None = None) -> Run:
    """The run a trainer ``config``, a ``model`` (preset name, ``config.json`` or TransformerConfig) and a training
    ``log`` describe; ``world_size`` where the config leaves the devices to the launcher."""
    stack = _model(model, seq_length)
    if str(config).endswith((".toml", ".py")):
        trainer = read_torchtitan(config, num_layers=stack.layers, world_size=world_size)
    else:
        trainer = read_trainer_config(config, world_size=world_size)
    strategy = trainer.strategy
    batch = trainer.global_batch or trainer.micro_batches * strategy.micro_batch_size * strategy.data_parallel
    options = sorted(set(trainer.options))
    if len(options) != 1:
        raise InputError(f"{config}: its layers run different recompute options ({', '.join(options)}); "
                         "calibrate prices runs whose body layers all run one")
    recompute = options[0] if options[0] != OP_SAC or prices_op_sac(stack) else "selective"
    tokens = batch * stack.seq_length / strategy.devices
    step = measured_step_ms(log, tokens_per_device=tokens, warmup=warmup)
    return Run(name=name or Path(os.fspath(log)).stem, model=stack, strategy=strategy, global_batch=batch,
               step_ms=step, recompute=recompute, kernels=trainer.kernels)


def _model(model, seq_length: int | None) -> TransformerConfig:
    if isinstance(model, TransformerConfig):
        return model
    if isinstance(model, str) and not model.endswith(".json"):
        stack = get(model)
        return stack if seq_length is None else dataclasses.replace(stack, seq_length=seq_length)
    return read_model_config(model, seq_length=seq_length)
