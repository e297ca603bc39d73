"""The checks :func:`sappkit.layers.estimate_layers` holds its inputs to: the stacks against each other and the
parallel layout, the options it prices."""

from __future__ import annotations

from ..columns import SAPP_OPTIONS
from ..errors import InputError
from ..hardware import DeviceConfig
from .configs import KernelConfig, ParallelConfig, TransformerConfig
from .op_sac import OP_OPTIONS
from .shapes import kinds

__all__ = ["check_estimate"]


def check_estimate(models, parallel, device, options, kernels) -> tuple[str, ...]:
    """Check the stacks against each other and the parallel layout; return the options in SAPP order."""
    if not models:
        raise InputError("estimate_layers needs at least one TransformerConfig; got none")
    for index, model in enumerate(models):
        if not isinstance(model, TransformerConfig):
            raise InputError(f"models[{index}] must be a TransformerConfig; got {type(model).__name__}")
    if not isinstance(parallel, ParallelConfig):
        raise InputError(f"parallel must be a ParallelConfig; got {type(parallel).__name__}")
    if not isinstance(device, DeviceConfig):
        raise InputError(f"device must be a DeviceConfig; got {type(device).__name__}")
    if not isinstance(kernels, KernelConfig):
        raise InputError(f"kernels must be a KernelConfig; got {type(kernels).__name__}")
    known = (*SAPP_OPTIONS, *OP_OPTIONS)
    if isinstance(options, str) or not options or len(set(options)) != len(options) \
            or any(option not in known for option in options):
        raise InputError(f"options must be distinct names among {', '.join(map(repr, known))}; got {options!r}")
    t, c = parallel.tensor_parallel, parallel.context_parallel
    split = t * c if parallel.sequence_parallel else c
    for index, model in enumerate(models):
        where = f"models[{index}] ({model.name!r})"
        for field, value, divisor, by in (
                ("num_heads", model.num_heads, t, "tensor_parallel"),
                ("num_kv_heads", model.num_kv_heads, t, "tensor_parallel"),
                ("seq_length", model.seq_length, split, "the sequence split (context_parallel, "
                                                        "times tensor_parallel under sequence_parallel)"),
                ("experts", model.experts, parallel.expert_parallel, "expert_parallel")):
            if value % divisor:
                raise InputError(f"{where} {field}={value} is not a multiple of {by} = {divisor}")
        if index < len(models) - 1 and model.vocab_size:
            raise InputError(f"{where} vocab_size={model.vocab_size}; only the last stack has a vocabulary "
                             "(its token embedding is the head, its LM head the tail)")
        if index < len(models) - 1 and model.mtp_layers:
            raise InputError(f"{where} mtp_layers={model.mtp_layers}; only the last stack predicts tokens (its MTP "
                             "layers follow its last layer)")
        if index > 0 and model.patch_size:
            raise InputError(f"{where} patch_size={model.patch_size}; only the first stack embeds patches")
    if not models[-1].vocab_size:
        raise InputError(f"models[{len(models) - 1}] ({models[-1].name!r}) needs vocab_size > 0: "
                         "the last stack's LM head is the tail")
    if len(models) > 1 and not models[0].patch_size:
        raise InputError(f"models[0] ({models[0].name!r}) needs patch_size > 0: the head embeds the first "
                         "stack's input, and only the last stack has a vocabulary")
    names = [kind for model in models for kind, _, _ in kinds(model)] + ["embedding", "lm_head"]
    repeated = sorted({kind for kind in names if names.count(kind) > 1})
    if repeated:
        raise InputError(f"layer kind name(s) {', '.join(map(repr, repeated))} repeat; give each stack its "
                         "own name (and moe_name); 'embedding' and 'lm_head' are the head and tail")
    return tuple(option for option in known if option in options)
