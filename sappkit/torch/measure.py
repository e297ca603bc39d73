"""Measured layer tables: what a real PyTorch block keeps, holds and takes, per recompute option.

For each option (:mod:`sappkit.torch.options`) a block runs ``warmup``
forward-backward passes (the first allocates the parameters' gradients, which
later micro-batches accumulate into), ``repeats`` timed ones, one forward
whose saved tensors are counted and one forward-backward whose memory is
traced:

- ``activation_mb``: the distinct storages saved for the backward
  (``saved_tensors_hooks``; for op-level selective checkpointing also the op
  outputs its policy caches), parameters and buffers excluded. **Boundary**:
  a block counts its input when it keeps it (its first norm saves it, or a
  checkpoint keeps it to recompute from), and its output is counted by the
  block after it, so a stack keeps the sum of its blocks. Tensors passed in
  ``kwargs`` (rotary tables, masks) are shared by every layer and not counted.
- ``working_mb``: the backward's peak beyond what was live when it started
  (the incoming gradient, recomputed activations, gradient temporaries, the
  input's gradient): on CUDA the caching allocator's peak, on CPU the
  running sum of the profiler's memory events. For ``full`` the plain
  option's ``activation_mb`` is taken off, since
  :meth:`~sappkit.LayerTable.working_set_mb` adds it for a fully recomputed layer.
  Under ZeRO-3 the gathered weights and gradients are added, as
  :func:`sappkit.estimate_layers` does.
- ``param_mb``: :func:`sappkit.estimate_layers`' rules (dtype, fp32 gradients
  and optimizer state, ZeRO sharding) applied to the block's parameters.
- ``forward_time``, ``backward_time``: medians in ms (CUDA events on a GPU,
  the wall clock on CPU; ``LayerTable.device`` says which device). CPU times
  exercise the workflow; they do not plan a GPU run.
"""

from __future__ import annotations

import statistics
from functools import partial

import pandas as pd
import torch

from .._check import check_int
from ..columns import (
    ACTIVATION_MB, BACKWARD_TIME, BODY, COUNT, FORWARD_TIME, HEAD, KIND, MODULE, OPTION, PARAM_MB, ROLE, SAPP_OPTIONS,
    TAIL, WORKING_MB,
)
from ..errors import InputError
from ..layers.configs import ParallelConfig
from ..layers.param_memory import param_bytes
from ..layers.options import CUSTOM_OPTIONS
from ..layers.table import LayerTable
from ..layers.units import MS
from .options import DEFAULT_OPTIONS, option_specs, run_forward
from .probe import KeptStorages, backward_peak, elapsed_ms, tensors

__all__ = ["measure_layers"]

_MB = 2**20
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
#: How messages name each part.
_PART = {BODY: "block", HEAD: "head", TAIL: "tail"}


def measure_layers(block: torch.nn.Module, example, *, kwargs: dict | None = None, options=tuple(DEFAULT_OPTIONS),
                   kind: str | None = None, count: int = 1, module_name: str = "model", head=None, tail=None,
                   experts=(), parallel: ParallelConfig | None = None, repeats: int = 5,
                   warmup: int = 1) -> LayerTable:
    """A layer table measured on a real block and an example micro-batch (what is measured: module docstring).

    Parameters
    ----------
    block : torch.nn.Module
        One body layer, e.g. transformers' ``LlamaDecoderLayer``.
    example : Tensor or tuple
        The block's positional inputs for one micro-batch; floating-point
        tensors among them get gradients (they come from the previous block).
    kwargs : dict, optional
        Keyword inputs (rotary tables, masks): no gradients, not counted.
    options : sequence of str or mapping
        Names among ``none``, ``selective`` (core attention), ``full``, or a
        mapping name -> spec (:mod:`sappkit.torch.options`) for any named option.
    kind, count, module_name : str, int, str
        The body kind's name (default: the block's class name), its layers in
        the model, and the table's ``module``.
    head, tail : tuple, optional
        ``(module, example)`` or ``(module, example, kwargs)`` for the
        embedding and for the final norm, LM head and loss (the tail returns
        the loss), measured the same way with option ``none``.
    experts : sequence of str
        Submodules whose parameters are routed experts, e.g. ``("mlp.experts",)``:
        a device holds ``1 / (expert_parallel · expert_tensor_parallel)`` of them.
    parallel : ParallelConfig, optional
        ZeRO stage and the data- and expert-parallel degrees for ``param_mb``; its
        dtype must be the block's (default: all 1, ZeRO-1, the block's dtype).
    repeats, warmup : int
        Timed and untimed forward-backward passes per option.

    Returns
    -------
    LayerTable
        Memory in MB, times in ms, ``device`` set; the names ``options``
        gives beside SAPP's five are its ``custom_options``.

    Examples
    --------
    A linear layer keeps its input (fp32 here) whether or not it is recomputed:

    >>> table = measure_layers(torch.nn.Linear(64, 64), torch.randn(32, 64), options=("none", "full"), repeats=1)
    >>> (table.rows("Linear")["activation_mb"] * 2**20).tolist(), table.device
    ([8192.0, 8192.0], 'cpu')
    """
    specs = option_specs(options)
    count = check_int("count", count, minimum=1)
    runs = (check_int("warmup", warmup, minimum=1, why="the first pass allocates the gradients"),
            check_int("repeats", repeats, minimum=1))
    parts = [(BODY, _part("block", (block, example, kwargs)), kind, specs)]
    for role, given in ((HEAD, head), (TAIL, tail)):
        if given is not None:
            parts.append((role, _part(role, given), None, {"none": "none"}))
    rows = []
    for role, (module, args, extra), name, part_specs in parts:
        parallel_used = _parallel(module, parallel, role)
        dense, routed = _param_counts(module, experts if role == BODY else ())
        held, gathered = param_bytes(dense, routed / (parallel_used.expert_parallel
                                                      * parallel_used.expert_tensor_parallel), parallel_used)
        for option, spec in part_specs.items():
            measured = _measure(module, spec, args, extra, role, runs)
            rows.append({KIND: name or type(module).__name__, ROLE: role, COUNT: count if role == BODY else 1,
                         PARAM_MB: held / _MB, OPTION: option, **measured, MODULE: module_name,
                         WORKING_MB: measured[WORKING_MB] + gathered / _MB})
    frame = pd.DataFrame(rows)
    frame.attrs[CUSTOM_OPTIONS] = tuple(option for option in specs if option not in SAPP_OPTIONS)
    return LayerTable(_full_working(frame, specs), device=_device_name(_device(block, parts[0][1][1])), time_unit=MS)


def _part(name: str, given) -> tuple[torch.nn.Module, tuple, dict]:
    """``(module, positional inputs, keyword inputs)`` of a part, checked."""
    if not isinstance(given, tuple) or len(given) not in (2, 3):
        raise InputError(f"{name} must be (module, example) or (module, example, kwargs); got {given!r:.80}")
    module, example, extra = (*given, None)[:3]
    if not isinstance(module, torch.nn.Module):
        raise InputError(f"{name} module must be a torch.nn.Module; got {type(module).__name__}")
    args = example if isinstance(example, tuple) else (example,)
    if not any(isinstance(x, torch.Tensor) for x in args):
        raise InputError(f"{name} example must be a tensor or a tuple of inputs holding one; got {example!r:.80}")
    if extra is not None and not isinstance(extra, dict):
        raise InputError(f"{name} kwargs must be a dict; got {type(extra).__name__}")
    return module, args, extra or {}


def _measure(module, spec, args: tuple, kwargs: dict, role: str, runs: tuple[int, int]) -> dict:
    """Times, kept bytes and backward working memory of one part under one option."""
    device = _device(module, args)
    excluded = {t.untyped_storage().data_ptr() for t in (*module.parameters(), *module.buffers())}
    excluded |= {t.untyped_storage().data_ptr() for t in tensors(kwargs)}

    def forward(kept=None):
        inputs = tuple(x.detach().requires_grad_(True) if _differentiable(x) else x for x in args)
        return run_forward(module, spec, inputs, kwargs, kept)

    def backward(output):
        loss = _first_tensor(output, role)
        if role == TAIL:
            loss.backward()
        else:
            loss.backward(torch.ones_like(loss))

    warmup, repeats = runs
    for _ in range(warmup):
        backward(forward())
    times = {FORWARD_TIME: [], BACKWARD_TIME: []}
    for _ in range(repeats):
        output, forward_ms = elapsed_ms(forward, device)
        _, backward_ms = elapsed_ms(partial(backward, output), device)
        times[FORWARD_TIME].append(forward_ms)
        times[BACKWARD_TIME].append(backward_ms)
        del output
    kept = KeptStorages(excluded)
    with kept.saving():
        output = forward(kept)
    activation = kept.nbytes()
    del output
    working = backward_peak(forward, backward, device)
    return {FORWARD_TIME: statistics.median(times[FORWARD_TIME]),
            BACKWARD_TIME: statistics.median(times[BACKWARD_TIME]),
            ACTIVATION_MB: activation / _MB, WORKING_MB: working / _MB}


def _full_working(frame: pd.DataFrame, specs: dict) -> pd.DataFrame:
    """Take the plain option's activation (:meth:`~sappkit.LayerTable.plain`) off what a fully recomputed
    layer's backward holds."""
    table = LayerTable(frame)
    kind = table.body_kinds[0]
    plain = table.rows(kind).at[table.plain(kind), ACTIVATION_MB]
    full = (frame[ROLE] == BODY) & frame[OPTION].isin([option for option, spec in specs.items() if spec == "full"])
    frame.loc[full, WORKING_MB] = (frame.loc[full, WORKING_MB] - plain).clip(lower=0.0)
    return frame


def _first_tensor(output, role: str) -> torch.Tensor:
    """The tensor a part's backward starts from: its output, or the first tensor of a tuple (the hidden states)."""
    tensor = output[0] if isinstance(output, (tuple, list)) and output else output
    if not isinstance(tensor, torch.Tensor) or not tensor.requires_grad:
        raise InputError(f"the {_PART[role]}'s forward must return a tensor that requires grad (or a tuple starting "
                         f"with one); got {type(tensor).__name__}")
    if role == TAIL and tensor.numel() != 1:
        raise InputError(f"the tail must return the loss, one number; got a tensor of shape {tuple(tensor.shape)}")
    return tensor


def _differentiable(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _param_counts(module: torch.nn.Module, experts) -> tuple[int, int]:
    """Dense and routed-expert parameter counts of ``module``."""
    if isinstance(experts, str):
        raise InputError(f"experts must be a sequence of submodule names; got the string {experts!r}")
    names = dict(module.named_modules())
    for name in experts:
        if name not in names or not name:
            raise InputError(f"experts names submodule {name!r}, which the block does not have")
    prefixes = tuple(f"{name}." for name in experts)
    dense = routed = 0
    for name, parameter in module.named_parameters():
        if name.startswith(prefixes):
            routed += parameter.numel()
        else:
            dense += parameter.numel()
    return dense, routed


def _parallel(module: torch.nn.Module, parallel: ParallelConfig | None, role: str) -> ParallelConfig:
    """``parallel`` checked against the module (its dtype, one device's shard), or the default for it."""
    dtypes = {p.dtype for p in module.parameters() if p.is_floating_point()}
    if len(dtypes) > 1 or (dtypes and next(iter(dtypes)) not in _DTYPES):
        raise InputError(f"the {_PART[role]}'s parameters must share one dtype among bfloat16, float16 and float32; "
                         f"got {sorted(map(str, dtypes))}")
    dtype = _DTYPES[dtypes.pop()] if dtypes else None
    if parallel is None:
        return ParallelConfig(dtype=dtype or "bf16")
    if not isinstance(parallel, ParallelConfig):
        raise InputError(f"parallel must be a ParallelConfig; got {type(parallel).__name__}")
    if dtype is not None and parallel.dtype != dtype:
        raise InputError(f"parallel.dtype is {parallel.dtype!r} but the {_PART[role]}'s parameters are "
                         f"{dtype!r}; give ParallelConfig(dtype={dtype!r})")
    if parallel.tensor_parallel != 1 or parallel.context_parallel != 1:
        raise InputError("measure_layers measures the block as it runs on one device: tensor_parallel and "
                         f"context_parallel must be 1; got {parallel.tensor_parallel} and "
                         f"{parallel.context_parallel} (measure the sharded block instead)")
    return parallel


def _device(module: torch.nn.Module, args: tuple) -> torch.device:
    for tensor in (*module.parameters(), *tensors(args)):
        return tensor.device
    return torch.device("cpu")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)
