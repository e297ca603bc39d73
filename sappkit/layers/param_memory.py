"""Bytes a device holds for a layer's parameters under ZeRO, and what its backward gathers under ZeRO-3 / FSDP.

The rules are :mod:`sappkit.layers.estimate`'s "Parameters"; the terms live
here, in one place, so the estimator, the strategy search's compiled tables,
the PyTorch measurements and the FSDP time model count the same bytes.
"""

from __future__ import annotations

from .configs import _BYTES, ParallelConfig

__all__ = ["param_bytes", "fsdp_working_bytes", "fp8_copy_bytes"]


def param_bytes(dense: float, experts: float, parallel: ParallelConfig, *, body: bool = True,
                frozen: bool = False) -> tuple[float, float]:
    """Bytes a device holds for ``dense`` and routed-``experts`` parameters, and the ZeRO-3 gathered working set.

    The module docstring's rules ("Parameters"); the counts are already split over tensor and expert parallelism.
    ``body``: the parameters are body layers', whose linear layers keep FP8 copies of their weights under
    ``dtype="fp8"`` (:func:`fp8_copy_bytes`; the embedding and the LM head run in BF16).

    Examples
    --------
    >>> param_bytes(1000, 0, ParallelConfig(data_parallel=4, zero=1))  # bf16 weight, fp32 gradient, Adam / 4
    (9000.0, 0.0)
    >>> param_bytes(1000, 0, ParallelConfig(data_parallel=4, zero=1, dtype="fp8"))  # and two FP8 copies
    (11000.0, 0.0)
    >>> param_bytes(1000, 0, ParallelConfig(data_parallel=4, zero=1), frozen=True)  # the weights alone
    (2000.0, 0.0)
    """
    w, g, o = _state_bytes(parallel, frozen)
    kept_gathered = parallel.zero == 3 and not parallel.reshard_after_forward
    copies = fp8_copy_bytes(parallel) if body else 0.0
    held = 0.0
    for params, shard in _shards(dense, experts, parallel):
        kept = {0: w + g + o, 1: w + g + o / shard, 2: w + (g + o) / shard, 3: (w + g + o) / shard}[parallel.zero]
        # Without resharding after the forward, every layer keeps its gathered weights until its backward.
        held += params * (kept + (w * (1 - 1 / shard) if kept_gathered else 0.0))
        held += params * copies if parallel.zero < 3 or kept_gathered else 0.0
    return held, fsdp_working_bytes(dense, experts, parallel, body=body, frozen=frozen)[0]


def fp8_copy_bytes(parallel: ParallelConfig) -> float:
    """Bytes per weight of the FP8 copies an FP8 run keeps across a step: Transformer Engine caches each linear
    layer's weight quantized rowwise and columnwise (1 byte each; ``mxfp8`` with one E8M0 scale per 32 elements of
    each), beside the BF16 weight (TE's ``performance_considerations`` docs: "Memory usage"); under ZeRO 3 only
    the gathered layers' (:func:`fsdp_working_bytes`). 0 without FP8."""
    if parallel.fp8_recipe is None:
        return 0.0
    return 2 + (2 / 32 if parallel.fp8_recipe == "mxfp8" else 0)


def fsdp_working_bytes(dense: float, experts: float, parallel: ParallelConfig, *,
                       body: bool = True, frozen: bool = False) -> tuple[float, float]:
    """Bytes a layer's backward holds beyond its shards under ZeRO-3 / FSDP that reshards: at the end of warm-up,
    and as the stage's first layer runs the stage's last backward (``working_mb``, ``first_working_mb``).

    The module docstring's "Parameters": at the end of warm-up the layer's
    gathered weights and whole gradient and the next layer's prefetched
    weights, ``(2w + g)·P·(1 − 1/D)``; on the first layer its own gathered
    weights and whole gradient, the second layer's whole gradient under
    reduction and its own reduce-scatter output, ``(w + 2g)·P·(1 − 1/D) +
    g·P/D``; without ``reshard_after_forward`` the weights stay gathered from
    the forward (:func:`param_bytes` holds them), so ``w`` drops out of both
    but the prefetch. Zero below stage 3. Counts already split over tensor and expert
    parallelism; ``D`` per part as :func:`param_bytes` has it. Under ``dtype="fp8"`` a resharding body layer's
    working set adds its FP8 weight copies (:func:`fp8_copy_bytes`).

    Examples
    --------
    >>> fsdp_working_bytes(1000, 0, ParallelConfig(data_parallel=4, zero=3))  # bf16 w = 2, fp32 g = 4
    (6000.0, 8500.0)
    """
    if parallel.zero != 3:
        return 0.0, 0.0
    w, g, _ = _state_bytes(parallel, frozen)
    # Without resharding the gathered weights are held already (param_bytes): a layer's backward adds its whole
    # gradient and the next layer's prefetched weights, the first layer the two gradients and the output.
    own = w if parallel.reshard_after_forward else 0
    # The gathered layer's FP8 copies (without resharding param_bytes holds every layer's).
    copies = fp8_copy_bytes(parallel) if body and parallel.reshard_after_forward else 0.0
    working = first = 0.0
    for params, shard in _shards(dense, experts, parallel):
        working += params * ((own + w + g) * (1 - 1 / shard) + copies)
        first += params * ((own + 2 * g) * (1 - 1 / shard) + g / shard + copies)
    return working, first


def _state_bytes(parallel: ParallelConfig, frozen: bool = False) -> tuple[int, int, int]:
    """Bytes per parameter of weight, gradient and optimizer state (module docstring, "Parameters"); a frozen
    parameter has weights only."""
    w = _BYTES[parallel.dtype]
    return (w, 0, 0) if frozen else (w, 4, (12 if w == 2 else 8))


def _shards(dense: float, experts: float, parallel: ParallelConfig) -> tuple[tuple[float, int], ...]:
    """``(parameters, D)`` of the dense and the routed-expert parts."""
    ranks = parallel.data_parallel * parallel.context_parallel
    expert_ranks = ranks * parallel.tensor_parallel // (parallel.expert_parallel * parallel.expert_tensor_parallel)
    return (dense, ranks), (experts, expert_ranks)
