"""Recompute options as PyTorch runs them: a block's forward with nothing, everything or a part checkpointed.

An option's *spec* says what its forward recomputes in the backward:

- ``"none"``: nothing;
- ``"full"``: the whole block (``torch.utils.checkpoint``, non-reentrant);
- ``"core_attention"``: every ``torch.nn.functional.scaled_dot_product_attention``
  call in the block (Megatron's selective recompute: Q, K and V are kept,
  the attention core is recomputed);
- a list of submodule names: those submodules, each checkpointed;
- a list of ``OpOverload`` or a policy ``(ctx, op, *args, **kwargs) ->
  CheckpointPolicy``: op-level selective checkpointing of the whole block
  (``create_selective_checkpoint_contexts``, the way torchtitan expresses it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from ..errors import InputError
from .probe import KeptStorages

__all__ = ["CORE_ATTENTION", "DEFAULT_OPTIONS", "option_specs", "run_forward"]

CORE_ATTENTION = "core_attention"
#: The options measured by default and what each recomputes.
DEFAULT_OPTIONS = {"none": "none", "selective": CORE_ATTENTION, "full": "full"}
_SAVED = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)


def option_specs(options) -> dict[str, object]:
    """Check ``options`` (names among the defaults, or a mapping name -> spec); return name -> spec.

    Examples
    --------
    >>> option_specs(("none", "selective"))
    {'none': 'none', 'selective': 'core_attention'}
    >>> option_specs({"attention": ["self_attn"]})
    {'attention': ['self_attn']}
    """
    if isinstance(options, Mapping):
        specs = dict(options)
    elif isinstance(options, Sequence) and not isinstance(options, str):
        unknown = [name for name in options if name not in DEFAULT_OPTIONS]
        if unknown:
            raise InputError(f"options entry {unknown[0]!r} needs a spec saying what it recomputes; give options "
                             f"as a mapping, e.g. {{{unknown[0]!r}: ['self_attn']}} (names alone may be "
                             f"{', '.join(map(repr, DEFAULT_OPTIONS))})")
        specs = {name: DEFAULT_OPTIONS[name] for name in options}
    else:
        raise InputError(f"options must be a sequence of option names or a mapping name -> spec; got {options!r}")
    if not specs or len(specs) != len(set(specs)):
        raise InputError(f"options must name at least one option, each once; got {options!r}")
    for name, spec in specs.items():
        if not isinstance(name, str) or not name:
            raise InputError(f"options names must be non-empty strings; got {name!r}")
        if not _valid_spec(spec):
            raise InputError(f"options[{name!r}] must be 'none', 'full', {CORE_ATTENTION!r}, a list of submodule "
                             "names, a list of OpOverloads or a selective-checkpoint policy function; "
                             f"got {spec!r}")
    return specs


def _valid_spec(spec) -> bool:
    if isinstance(spec, str):
        return spec in ("none", "full", CORE_ATTENTION)
    if isinstance(spec, (list, tuple)) and spec:
        return all(isinstance(x, str) for x in spec) or all(isinstance(x, torch._ops.OpOverload) for x in spec)
    return callable(spec)


def run_forward(block: torch.nn.Module, spec, args: tuple, kwargs: dict, kept: KeptStorages | None = None):
    """Run ``block``'s forward as option ``spec`` does; ``kept`` also counts what a policy caches."""
    if spec == "none":
        return block(*args, **kwargs)
    if spec == "full":
        return checkpoint(block, *args, use_reentrant=False, **kwargs)
    if spec == CORE_ATTENTION:
        with _CheckpointedAttention() as mode:
            output = block(*args, **kwargs)
        if not mode.calls:
            raise InputError(f"option spec {CORE_ATTENTION!r} recomputes the calls of "
                             "torch.nn.functional.scaled_dot_product_attention, and the block made none (an "
                             "attention written in plain ops, such as transformers' 'eager' implementation?); "
                             "name the submodules to recompute or give a selective-checkpoint policy instead")
        return output
    if isinstance(spec, (list, tuple)) and isinstance(spec[0], str):
        return _with_checkpointed_submodules(block, spec, args, kwargs)
    contexts = partial(create_selective_checkpoint_contexts, _counting_policy(spec, kept))
    return checkpoint(block, *args, use_reentrant=False, context_fn=contexts, **kwargs)


class _CheckpointedAttention(TorchFunctionMode):
    """Run every scaled-dot-product attention under a non-reentrant checkpoint; count the calls."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self.calls += 1
            return checkpoint(func, *args, use_reentrant=False, **kwargs)
        return func(*args, **kwargs)


def _with_checkpointed_submodules(block, names, args, kwargs):
    modules = dict(block.named_modules())
    missing = [name for name in names if name not in modules or not name]
    if missing:
        children = ", ".join(repr(name) for name in list(modules)[1:9])
        raise InputError(f"option spec names submodule {missing[0]!r}, which the block does not have; "
                         f"its submodules include {children}")
    # An instance attribute shadows the class's forward for the call, and goes again afterwards.
    own = {name: vars(modules[name]).get("forward") for name in names}
    try:
        for name in names:
            modules[name].forward = partial(checkpoint, modules[name].forward, use_reentrant=False)
        return block(*args, **kwargs)
    finally:
        for name in names:
            if own[name] is None:
                del modules[name].forward
            else:
                modules[name].forward = own[name]


def _counting_policy(spec, kept: KeptStorages | None) -> Callable:
    """The spec as a selective-checkpoint policy that also counts the outputs it keeps."""
    if isinstance(spec, (list, tuple)):
        ops = frozenset(spec)

        def policy(ctx, op, *args, **kwargs):
            return CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
    else:
        policy = spec

    def counting(ctx, op, *args, **kwargs):
        decision = policy(ctx, op, *args, **kwargs)
        saved = decision in _SAVED if isinstance(decision, CheckpointPolicy) else bool(decision)
        if saved and kept is not None:
            kept.cache(ctx.op_output)
        return decision

    return counting
