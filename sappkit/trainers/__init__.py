"""Each trainer's language both ways: Megatron-LM, torchtitan, MindFormers and HyperParallel's trainer.

One module per trainer holds its grammar (:mod:`.megatron` with :mod:`.megatron_flags` and
:mod:`.megatron_layout`, :mod:`.torchtitan` with :mod:`.torchtitan_import`,
:mod:`.mindformers`, :mod:`.hyperparallel`); :mod:`.exchange` is the door
(:func:`read_trainer_config`, :func:`export_config`, :func:`check_config`);
:mod:`.profiles` reads per-layer times from profiler traces. What each
trainer's recompute settings can express, and planning within it, is the
balancer's (:mod:`sappkit.balancer.grammar`).
"""

from .config import Finding, TrainerConfig
from .check import ConfigCheck
from .exchange import TrainerExport, check_config, export_config, read_trainer_config
from .hyperparallel import HyperParallelConfig, hyperparallel_config
from .megatron import MegatronArgs, megatron_args
from .megatron_layout import format_layout, parse_layout
from .mindformers import MindFormersConfig, mindformers_config
from .profiles import profile_layer_table, read_profile_times
from .torchtitan import TorchtitanConfig, torchtitan_config

__all__ = ["TrainerConfig", "Finding", "ConfigCheck", "TrainerExport", "read_trainer_config", "export_config",
           "check_config", "MegatronArgs", "megatron_args", "parse_layout", "format_layout", "TorchtitanConfig",
           "torchtitan_config", "MindFormersConfig", "mindformers_config", "HyperParallelConfig",
           "hyperparallel_config", "read_profile_times", "profile_layer_table"]
