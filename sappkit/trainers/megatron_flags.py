"""The Megatron-LM flags sappkit reads and writes, the kind of value each takes and the limit it is held to.

Sources followed: Megatron-LM ``megatron/training/arguments.py`` (the flags' names and types; ``--cp-comm-type``
takes one kind per layer, ``--attention-backend`` one of ``AttnBackend``'s names in
``megatron/core/transformer/enums.py``), commit ``d98e8a64ddf3`` (2026-08-22); torchrun's ``--nproc-per-node`` and
``--nnodes``.
"""

from __future__ import annotations

from .._check import check_int
from ..errors import InputError
from ..limits import MAX_CHUNKS, MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_LAYERS, MAX_MICRO_BATCHES, MAX_MICROBATCH_SIZE, \
    MAX_STAGES
from .shell import read_flags

__all__ = ["MEGATRON_FP8_RECIPES", "MEGATRON_CP_KINDS", "MEGATRON_ATTENTION", "MEGATRON_FLAGS", "fp8_recipe_of",
           "cp_kind_of", "attention_of", "kernel_args", "read_megatron_flags"]

#: sappkit's FP8 recipe -> Megatron-LM's ``--fp8-recipe`` name.
MEGATRON_FP8_RECIPES = {"delayed": "delayed", "current": "tensorwise", "mxfp8": "mxfp8"}
#: Megatron-LM's ``--cp-comm-type`` -> sappkit's context-parallel kind (:data:`sappkit.layers.configs.CP_KINDS`;
#: ``a2a+p2p``, the hierarchical kind, is not priced).
MEGATRON_CP_KINDS = {"p2p": "ring", "allgather": "allgather", "a2a": "a2a"}
#: Megatron-LM's ``--attention-backend`` -> the attention kernel sappkit prices
#: (:attr:`sappkit.layers.KernelConfig.attention`): ``fused`` is Transformer Engine's cuDNN fused attention,
#: ``flash`` FlashAttention-2, ``unfused`` and ``local`` materialise the softmax (``paper``); ``auto`` leaves
#: the choice to Transformer Engine (None: sappkit's default kernels).
MEGATRON_ATTENTION = {"fused": "cudnn", "flash": "fa2", "unfused": "paper", "local": "paper", "auto": None}

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
    "--fp8-recipe": "str", "--tp-comm-overlap": "bool", "--cp-comm-type": "list", "--attention-backend": "str",
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


def cp_kind_of(flags: dict) -> str:
    """The context-parallel kind ``--cp-comm-type`` names (Megatron-LM's default ``p2p``: ``ring``); one kind for
    every layer.

    Examples
    --------
    >>> cp_kind_of({"--cp-comm-type": ["a2a"]}), cp_kind_of({})
    ('a2a', 'ring')
    """
    names = flags.get("--cp-comm-type", ["p2p"])
    if len(set(names)) != 1 or names[0] not in MEGATRON_CP_KINDS:
        raise InputError(f"Megatron-LM arguments: --cp-comm-type must be one of "
                         f"{', '.join(map(repr, MEGATRON_CP_KINDS))} for every layer; got {' '.join(names)!r}")
    return MEGATRON_CP_KINDS[names[0]]


def attention_of(flags: dict) -> str | None:
    """The attention kernel ``--attention-backend`` names (:data:`MEGATRON_ATTENTION`); None when it is ``auto``
    or not given."""
    name = flags.get("--attention-backend", "auto")
    if name not in MEGATRON_ATTENTION:
        raise InputError(f"Megatron-LM arguments: --attention-backend must be one of "
                         f"{', '.join(map(repr, MEGATRON_ATTENTION))}; got {name!r}")
    return MEGATRON_ATTENTION[name]


def kernel_args(tp_comm_overlap: bool, cp_kind: str, attention: str | None) -> list[str]:
    """``--tp-comm-overlap``, ``--cp-comm-type`` (unless ``ring``, the default) and ``--attention-backend`` (for
    a kernel Megatron-LM names; ``paper`` as ``unfused``).

    Examples
    --------
    >>> kernel_args(True, "a2a", "cudnn")
    ['--tp-comm-overlap', '--cp-comm-type', 'a2a', '--attention-backend', 'fused']
    """
    backends = {ours: megatron for megatron, ours in reversed(MEGATRON_ATTENTION.items()) if ours is not None}
    if attention is not None and attention not in backends:
        raise InputError(f"attention must be one of {', '.join(map(repr, backends))} (the kernels Megatron-LM's "
                         f"--attention-backend names) or None; got {attention!r}")
    kinds = {ours: megatron for megatron, ours in MEGATRON_CP_KINDS.items()}
    return (["--tp-comm-overlap"] if tp_comm_overlap else []) + (
        [] if cp_kind == "ring" else ["--cp-comm-type", kinds[cp_kind]]) + (
        [] if attention is None else ["--attention-backend", backends[attention]])
