"""One call that prices a strategy end to end: the layer table, the placement, the simulated step.

:func:`evaluate_strategy` compiles the model's layer table for the
strategy's shape (:mod:`sappkit.strategy.compiled`: per-op times and the
tensor, context and expert communication inside each layer), places the
layers (``even``: uniform layers per stage, as Megatron-LM does by default;
``balanced``: :func:`sappkit.balance` with the step objective), simulates the
pipeline and then adds what the schedule cannot overlap
(:mod:`sappkit.strategy.step`):

- **pipeline transfers**: each activation (forward) or gradient (backward)
  sent to another stage, a send/receive on the pipeline group's link. With
  ``overlap_p2p_comm`` (Megatron's switch) it only delays the op waiting for
  it (the simulator's ``p2p_time``); without, the sending stage also waits
  for it, as Megatron-LM's blocking send and receive did before 2023;

- **data parallelism**: each stage reduces its gradients over the
  data-parallel group. With ``overlap_grad_reduce`` (Megatron's switch) a
  chunk's reduction starts when the stage starts that chunk's last backward
  (its gradients come ready during it), the chunks' reductions one after the
  other; what runs past the stage's last op is exposed. Without it, all of it
  follows the stage's last op. ZeRO 1 and 2 then all-gather the updated
  weights: hidden behind the next step's forward with
  ``overlap_param_gather``, else exposed after the optimizer;
- the **optimizer step**, after the stage's gradients are reduced.

The step ends when the slowest stage has done all of that. Without a
pipeline (``p = 1``) the device runs its micro-batches one after the other.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .._check import check_choice, check_int, check_number, short
from ..columns import SAPP_OPTIONS
from ..errors import InputError
from ..hardware import Cluster
from ..layers import KernelConfig, TransformerConfig
from ..layers.comm import boundary_ms
from ..layers.flops import model_flops
from ..layers.op_sac import OP_OPTIONS
from ..limits import MAX_GLOBAL_BATCH, MAX_MEMORY_MB, MAX_TIME
from ..pipeline.schedules import TWO_DIRECTIONS
from .compiled import compile_shape
from .config import Strategy
from .legality import check_strategy_fits
from .result import StrategyEvaluation
from .step import price_pipeline, price_single_stage

__all__ = ["evaluate_strategy", "PLACEMENTS", "resolve_cluster", "resolve_model"]

#: How :func:`evaluate_strategy` places the layers.
PLACEMENTS = ("even", "balanced")


def evaluate_strategy(model, strategy: Strategy, *, cluster: Cluster | str = "dgx-h100", global_batch: int,
                      placement: str = "even", recompute: str | Sequence[str] | None = None,
                      memory_mb: float | None = None, kernels: KernelConfig | None = None) -> StrategyEvaluation:
    """Price one parallel strategy: step time, throughput, model TFLOP/s and MFU per device, stage memory.

    Parameters
    ----------
    model : TransformerConfig, sequence of them, or str
        The model's stacks in model order, or a preset name (:func:`sappkit.models.get`).
    strategy : Strategy
    cluster : Cluster or str
        The cluster (or a preset name, e.g. ``"dgx-h100"``); its device prices the ops.
    global_batch : int
        Samples per step; ``global_batch / (dp · b)`` micro-batches per pipeline.
    placement : {"even", "balanced"}
        ``even``: the body layers spread evenly (Megatron-LM's default), every one running ``recompute``;
        ``balanced``: :func:`sappkit.balance` (step objective) chooses layers and recompute per stage (not
        for ``dualpipe``, whose two copies the balancer does not place).
    recompute : str or sequence of str, optional
        ``even``: the one option every body layer runs (default ``"none"``); ``balanced``: the options it may
        choose among (default SAPP's five). ``"selective_op"`` is torchtitan's per-op checkpointing
        (:mod:`sappkit.layers.op_sac`).
    memory_mb : float, optional
        Device memory the stages must fit, MB (default the device's :attr:`~sappkit.hardware.DeviceConfig.usable_mb`:
        the memory the card reports less the reserve for the CUDA context and the allocator).
    kernels : KernelConfig, optional
        The kernels the layers run (default :data:`~sappkit.strategy.compiled.DEFAULT_KERNELS`: flash attention).

    The strategy is held to the rules the strategy search holds it to (:mod:`sappkit.strategy.legality`; tensor
    parallelism across nodes allowed), and its layers are compiled as the search compiles them (under every
    recompute option, even with one placed: a split backward's weight pass is the backward less its recompute,
    counted from the fastest option), so both price a strategy identically. A balanced placement among fewer
    options compiles those.

    Returns
    -------
    StrategyEvaluation

    Examples
    --------
    >>> from sappkit import Strategy, TransformerConfig
    >>> gpt = TransformerConfig(layers=24, hidden_size=2048, num_heads=16, ffn_size=8192,
    ...                         seq_length=2048, vocab_size=51200)
    >>> result = evaluate_strategy(gpt, Strategy(tensor_parallel=2, pipeline_parallel=4, data_parallel=4),
    ...                            cluster="dgx-a100", global_batch=256, recompute="selective")
    >>> result.plan.status, round(result.step_time / 1e3, 2), result.fits, round(result.mfu, 3)
    ('evaluated', 1.04, True, 0.428)
    """
    if not isinstance(strategy, Strategy):
        raise InputError(f"strategy must be a sappkit.Strategy; got {type(strategy).__name__}")
    models = resolve_model(model)
    cluster = resolve_cluster(cluster)
    placement = check_choice("placement", placement, PLACEMENTS)
    if placement == "balanced" and strategy.schedule in TWO_DIRECTIONS:
        raise InputError(f"placement='balanced' does not apply to schedule {strategy.schedule!r}: its second "
                         "model copy mirrors the first (rank s also holds stage p - 1 - s), which the balancer's "
                         "solvers do not model; give placement='even'")
    batch = check_int("global_batch", global_batch, minimum=1, maximum=MAX_GLOBAL_BATCH)
    m = check_strategy_fits(strategy, models, global_batch=batch, device=cluster.device)
    options = _options(placement, recompute)
    if cluster.devices is not None and strategy.devices > cluster.devices:
        raise InputError(f"the strategy needs {strategy.devices} devices; the cluster has {cluster.devices} "
                         f"({cluster.nodes} nodes of {cluster.devices_per_node})")
    limit = cluster.device.usable_mb if memory_mb is None else check_number(
        "memory_mb", memory_mb, minimum=0, strict=True, maximum=MAX_MEMORY_MB)
    parallel = strategy.parallel
    compiled = compile_shape(models, parallel, cluster, kernels=kernels,
                             options=options if placement == "balanced" else _compiled_options(options))
    layers = compiled.table(parallel, cluster)
    p2p = boundary_ms(models[-1], parallel, cluster, strategy.pipeline_parallel)
    if strategy.pipeline_parallel == 1:
        priced = price_single_stage(layers, strategy, cluster, micro_batches=m, option=options[0], memory_mb=limit)
    else:
        priced = price_pipeline(layers, strategy, cluster, micro_batches=m, options=options, placement=placement,
                                memory_mb=limit, p2p_ms=p2p)
    if not 0 < priced.step_time <= MAX_TIME:
        raise InputError(f"the strategy prices a step of {priced.step_time:.3g} ms, beyond what sappkit reports "
                         f"({MAX_TIME.cited} ms): check the device's and the cluster's overridden fields")
    flops = model_flops(*models, batch=batch)
    seconds = priced.step_time / 1e3
    tflops = flops / seconds / strategy.devices / 1e12
    return StrategyEvaluation(
        strategy=strategy, cluster=cluster, global_batch=batch, placement=placement, recompute=options,
        step_time=priced.step_time, tokens_per_second=batch * models[-1].seq_length / seconds,
        tflops_per_device=tflops, mfu=tflops / cluster.device.peak_tflops(strategy.dtype), model_flops=flops,
        stages=priced.stages, breakdown=priced.breakdown, plan=priced.plan, layers=layers, memory_mb=limit)


def resolve_model(model) -> tuple[TransformerConfig, ...]:
    """A model argument as its stacks: one config, several, or a preset name."""
    if isinstance(model, str):
        from ..models import get
        model = get(model)
    stacks = (model,) if isinstance(model, TransformerConfig) else tuple(model) if isinstance(model, Sequence) \
        else None
    if not stacks or not all(isinstance(stack, TransformerConfig) for stack in stacks):
        raise InputError(f"model must be a TransformerConfig, a sequence of them or a preset name; got "
                         f"{type(model).__name__}")
    return stacks


def resolve_cluster(cluster) -> Cluster:
    """A cluster argument as a :class:`Cluster` (a preset name or a hardware file is read)."""
    if isinstance(cluster, str | os.PathLike):
        return Cluster.preset(cluster)
    if not isinstance(cluster, Cluster):
        raise InputError("cluster must be a sappkit.hardware.Cluster, a preset name or a hardware file (.toml); "
                         f"got {type(cluster).__name__}")
    return cluster


def _options(placement: str, recompute) -> tuple[str, ...]:
    if recompute is None:
        return ("none",) if placement == "even" else SAPP_OPTIONS
    known = (*SAPP_OPTIONS, *OP_OPTIONS)
    if not isinstance(recompute, str | Sequence):
        raise InputError(f"recompute must be an option or a sequence of options among "
                         f"{', '.join(map(repr, known))}; got {short(recompute)}")
    chosen = (recompute,) if isinstance(recompute, str) else tuple(recompute)
    if not chosen or any(option not in known for option in chosen) or len(set(chosen)) != len(chosen):
        raise InputError(f"recompute must be distinct options among {', '.join(map(repr, known))}; "
                         f"got {short(recompute)}")
    if placement == "even" and len(chosen) != 1:
        raise InputError(f"recompute must be one option for placement='even' (every layer runs it); got {recompute!r}")
    return tuple(option for option in known if option in chosen)


def _compiled_options(options: tuple[str, ...]) -> tuple[str, ...]:
    """What an even placement compiles: SAPP's five (the search's), and an option beyond them it runs."""
    return (*SAPP_OPTIONS, *(option for option in options if option in OP_OPTIONS))
