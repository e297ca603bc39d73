"""The Megatron-LM flags sappkit reads and writes, the kind of value each takes and the limit it is held to.

Sources followed: Megatron-LM ``megatron/training/arguments.py`` (the flags' names and types), commit
``d98e8a64ddf3`` (2026-08-22); torchrun's ``--nproc-per-node`` and ``--nnodes``.
"""

from __future__ import annotations

from .._check import check_int
from ..errors import InputError
from ..limits import MAX_CHUNKS, MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_LAYERS, MAX_MICRO_BATCHES, MAX_MICROBATCH_SIZE, \
    MAX_STAGES
from .shell import read_flags

__all__ = ["MEGATRON_FP8_RECIPES", "MEGATRON_FLAGS", "fp8_recipe_of", "read_megatron_flags"]

#: sappkit's FP8 recipe -> Megatron-LM's ``--fp8-recipe`` name.
MEGATRON_FP8_RECIPES = {"delayed": "delayed", "current": "tensorwise", "mxfp8": "mxfp8"}

#: The flags sappkit reads and writes, and the kind of value each takes.
MEGATRON_FLAGS = {
    "--num-layers": "int", "--tensor-model-parallel-size": "int", "--pipeline-model-parallel-size": "int",
    "--num-virtual-stages-per-pipeline-rank": "int", "--num-layers-per-virtual-pipeline-stage": "int",
    "--context-parallel-size": "int", "--expert-model-parallel-size": "int", "--expert-tensor-parallel-size": "int",
    "--micro-batch-size": "int", "--global-batch-size": "int", "--pipeline-model-parallel-layout": "str",
    "--decoder-first-pipeline-num-layers": "int", "--decoder-last-pipeline-num-layers": "int",
    "--account-for-embedding-in-pipeline-split": "bool", "--account-for-loss-in-pipeline-split": "bool",
    "--mtp-num-layers": "int", "--microbatch-group-size-per-virtual-pipeline-stage": "int",
    "--recompute-granularity": "str", "--recompute-method": "str", "--recompute-num-layers": "int",
    "--recompute-modules": "list", "--recompute-activations": "bool", "--sequence-parallel": "bool",
    "--use-distributed-optimizer": "bool", "--fp16": "bool", "--bf16": "bool", "--fp8-format": "str",
    "--fp8-recipe": "str",
    "--overlap-moe-expert-parallel-comm": "bool", "--moe-shared-expert-overlap": "bool",
    # torchrun's, for the world size
    "--nproc-per-node": "int", "--nnodes": "int",
}
#: Integer flags that may be 0 (the others count something there is at least one of).
_MAY_BE_ZERO = ("--mtp-num-layers", "--recompute-num-layers")
#: The limit each integer flag is checked against as it is read (:mod:`sappkit.limits`; others MAX_LAYERS or
#: MAX_DEVICES, by their name).
_FLAG_LIMITS = {"--pipeline-model-parallel-size": MAX_STAGES, "--num-virtual-stages-per-pipeline-rank": MAX_CHUNKS,
                "--micro-batch-size": MAX_MICROBATCH_SIZE, "--global-batch-size": MAX_GLOBAL_BATCH,
                "--microbatch-group-size-per-virtual-pipeline-stage": MAX_MICRO_BATCHES}

_WHAT = "Megatron-LM arguments"


def read_megatron_flags(words) -> dict[str, object]:
    """The :data:`MEGATRON_FLAGS` in ``words``, every integer checked against its limit as it is read.

    Examples
    --------
    >>> read_megatron_flags(["--num-layers", "8", "--pipeline-model-parallel-size", "2"])
    {'--num-layers': 8, '--pipeline-model-parallel-size': 2}
    >>> read_megatron_flags(["--pipeline-model-parallel-size", "1000000000"])
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: Megatron-LM arguments: --pipeline-model-parallel-size must be an int <= 256 (sappkit.limits.MAX_STAGES); got 1000000000
    """
    flags = read_flags(words, MEGATRON_FLAGS, what=_WHAT)
    for flag, value in flags.items():
        if MEGATRON_FLAGS[flag] == "int":
            check_int(f"{_WHAT}: {flag}", value, minimum=0 if flag in _MAY_BE_ZERO else 1,
                      maximum=_FLAG_LIMITS.get(flag, MAX_LAYERS if "layers" in flag else MAX_DEVICES))
    return flags


def fp8_recipe_of(flags: dict) -> str | None:
    """The FP8 recipe ``--fp8-recipe`` names (Megatron-LM's default ``delayed``); None without ``--fp8-format``."""
    if not flags.get("--fp8-format"):
        return None
    name = flags.get("--fp8-recipe", "delayed")
    recipes = {megatron: ours for ours, megatron in MEGATRON_FP8_RECIPES.items()}
    if name not in recipes:
        raise InputError(f"Megatron-LM arguments: --fp8-recipe must be one of {', '.join(map(repr, recipes))}; "
                         f"got {name!r}")
    return recipes[name]
