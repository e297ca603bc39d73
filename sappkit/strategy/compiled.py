"""Layer tables compiled once per shape, so that pricing a strategy costs a pipeline, not an estimate.

What a layer costs in time and activation memory depends on the model, the
device, the micro-batch, the tensor, context and expert degrees (and the
links their groups run on); not on the data-parallel degree or the ZeRO
stage, which only change what each device holds of the parameters. A
:class:`CompiledShape` holds the estimate of one such shape
(:func:`compile_shape`, cached), and :meth:`CompiledShape.table` puts any
``(dp, zero)``'s parameter memory into it in a few array operations (what
ZeRO 3 gathers joins the working sets beside the activations' own: the keys
and values all-gather context parallelism gathers). The
strategy search prices thousands of strategies over a handful of shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..columns import BACKWARD_TIME, BODY, FIRST_WORKING_MB, FORWARD_TIME, KIND, OPTION, PARAM_MB, ROLE, WORKING_MB
from ..hardware import Cluster, overlap_ms
from ..layers import KernelConfig, LayerTable, ParallelConfig, TransformerConfig, estimate_layers
from ..layers.comm import dense_sizes, expert_sizes, grad_sync_ms, optimizer_ms, zero3_comm_ms
from ..layers.param_memory import fsdp_working_bytes, param_bytes
from ..layers.timing import COMPUTE_MS, DP_COMM_MS, EXPERT_PARAMS, OPTIMIZER_MS, PARAMS, ZERO_COMM_MS

__all__ = ["CompiledShape", "compile_shape", "shape_key", "clear_cache", "zero3_passes", "DEFAULT_KERNELS"]

#: The kernels a strategy's layers run unless told otherwise: flash attention (every modern trainer runs flash or
#: cuDNN fused attention: Megatron-Core's and NeMo's default ``attention_backend``, torchtitan's SDPA), the rest as
#: :class:`~sappkit.layers.KernelConfig`'s defaults.
DEFAULT_KERNELS = KernelConfig(attention="flash")

_MB = 2**20
#: Compiled shapes kept (a search visits a few dozen shapes; each holds one small table).
_CACHE_SIZE = 512
_cache: dict = {}


@dataclass(frozen=True, eq=False)
class CompiledShape:
    """One shape's layer table (times, activations) and its per-kind parameters, for any ``(dp, zero)``."""

    models: tuple[TransformerConfig, ...]
    layers: LayerTable
    """The estimate at the parallel settings it was compiled with, without ZeRO: its working sets are the
    activations' alone (all-gather CP's keys and values, :mod:`sappkit.layers.cp_memory`), to which :meth:`table`
    adds what ZeRO 3 gathers of the parameters."""
    params: pd.DataFrame
    """Per kind: ``params`` and ``expert_params`` on one device (after tensor and expert splitting)."""
    tables: dict = field(default_factory=dict, repr=False)
    """The tables :meth:`table` made, per what they depend on."""

    def table(self, parallel: ParallelConfig, cluster: Cluster) -> LayerTable:
        """The layer table with ``parallel``'s parameter memory and its data-parallel costs on ``cluster`` (of this
        shape: the same links for the tensor, context and expert groups); made once per ``(dp, zero, reshard)`` and
        cluster."""
        key = (parallel.data_parallel, parallel.zero, parallel.reshard_after_forward, cluster)
        if key not in self.tables:
            self.tables[key] = self._table(parallel, cluster)
        return self.tables[key]

    def _table(self, parallel: ParallelConfig, cluster: Cluster) -> LayerTable:
        frame = self.layers.frame
        per_kind = self.params.loc[frame[KIND]]
        held, working, first = _param_bytes(per_kind[PARAMS].to_numpy(), per_kind[EXPERT_PARAMS].to_numpy(),
                                            (frame[ROLE] == BODY).to_numpy(), parallel)
        breakdown = self.layers.breakdown.copy()
        per_row = self.params.loc[breakdown[KIND]]
        pairs = list(zip(per_row[PARAMS].to_numpy(), per_row[EXPERT_PARAMS].to_numpy()))
        breakdown[DP_COMM_MS] = [grad_sync_ms(d, e, parallel, cluster) for d, e in pairs]
        breakdown[OPTIMIZER_MS] = [optimizer_ms(d, e, parallel, cluster) for d, e in pairs]
        times = _zero3_times(frame, breakdown, self.params, parallel, cluster)
        # The compiled working sets are the activations' (``layers``); the parameters' add to them.
        working_sets = {column: frame[column].to_numpy() + extra / _MB
                        for column, extra in ((WORKING_MB, working), (FIRST_WORKING_MB, first))}
        return self.layers.with_columns(**{PARAM_MB: held / _MB, **working_sets, **times}, breakdown=breakdown)


def _zero3_times(frame: pd.DataFrame, breakdown: pd.DataFrame, params: pd.DataFrame, parallel: ParallelConfig,
                 cluster: Cluster) -> dict:
    """ZeRO 3's per-micro-batch gathers and reduce-scatters (:func:`~sappkit.layers.comm.zero3_comm_ms`), each
    overlapped with its layer's forward or backward (:func:`~sappkit.hardware.overlap_ms`): the frame's times with
    the exposed parts and the slowdowns added, and (in ``breakdown``, in place) ``zero_comm_ms``, the exposed
    parts, with the slowdowns in ``compute_ms``."""
    share = cluster.device.comm_sm_share
    added = {}
    for kind, option, forward, backward in zip(frame[KIND], frame[OPTION], frame[FORWARD_TIME], frame[BACKWARD_TIME]):
        comm = zero3_comm_ms(params.at[kind, PARAMS], params.at[kind, EXPERT_PARAMS], parallel, cluster)
        added[(kind, option)] = zero3_passes(comm, forward, backward, share)
    breakdown[ZERO_COMM_MS] = [sum(p[0] for p in added[key]) for key in zip(breakdown[KIND], breakdown[OPTION])]
    breakdown[COMPUTE_MS] += [sum(p[1] for p in added[key]) for key in zip(breakdown[KIND], breakdown[OPTION])]
    keys = list(zip(frame[KIND], frame[OPTION]))
    return {FORWARD_TIME: frame[FORWARD_TIME].to_numpy() + [sum(added[key][0]) for key in keys],
            BACKWARD_TIME: frame[BACKWARD_TIME].to_numpy() + [sum(added[key][1]) for key in keys]}


def zero3_passes(comm: tuple[float, float], forward: float, backward: float,
                 sm_share: float) -> list[tuple[float, float]]:
    """A layer's ZeRO 3 collectives per micro-batch (``comm``: :func:`~sappkit.layers.comm.zero3_comm_ms`'s forward
    and backward) overlapped with its forward and its backward: per pass, (the exposed part, the compute's
    slowdown), both added to the pass's time (:func:`~sappkit.hardware.overlap_ms`).

    Examples
    --------
    >>> zero3_passes((3.0, 12.0), 10.0, 10.0, 0.1)
    [(0.0, 0.30000000000000004), (2.0, 1.0)]
    """
    return [overlap_ms(c, window, sm_share) for c, window in zip(comm, (forward, backward))]


def _param_bytes(dense: np.ndarray, experts: np.ndarray, body: np.ndarray,
                 parallel: ParallelConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: held bytes, and the working sets at the end of warm-up and on the first layer (as
    :func:`sappkit.estimate_layers` prices them; ``body`` marks the body layers' rows)."""
    rows = list(zip(dense, experts, body))
    held = np.array([param_bytes(d, e, parallel, body=bool(b))[0] for d, e, b in rows])
    working = np.array([fsdp_working_bytes(d, e, parallel, body=bool(b)) for d, e, b in rows]).reshape(-1, 2)
    return held, working[:, 0], working[:, 1]


def clear_cache() -> None:
    """Forget every compiled shape (the next :func:`compile_shape` of each estimates again)."""
    _cache.clear()


def shape_key(models: tuple, parallel: ParallelConfig, cluster: Cluster, kernels: KernelConfig,
              options: tuple) -> tuple:
    """What a shape's times and activations depend on: everything but ``dp`` and ZeRO, and its groups' links."""
    links = (cluster.group(dense_sizes(parallel), "tp"), cluster.group(dense_sizes(parallel), "cp"),
             cluster.group(expert_sizes(parallel), "ep"))
    base = replace(parallel, data_parallel=1, zero=0, expert_parallel=1, expert_tensor_parallel=1,
                   reshard_after_forward=True, expert_imbalance=1.0)
    return (models, base, parallel.expert_parallel, parallel.expert_tensor_parallel, parallel.expert_imbalance,
            cluster.device, kernels, options, links)


def compile_shape(models: tuple[TransformerConfig, ...], parallel: ParallelConfig, cluster: Cluster, *,
                  kernels: KernelConfig | None = None, options: tuple[str, ...]) -> CompiledShape:
    """The compiled shape of ``models`` under ``parallel`` on ``cluster`` (cached per :func:`shape_key`); ``kernels``
    default :data:`DEFAULT_KERNELS`.

    Examples
    --------
    >>> gpt = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096,
    ...                         seq_length=2048, vocab_size=32000)
    >>> cluster = Cluster.preset("dgx-a100")
    >>> one = compile_shape((gpt,), ParallelConfig(tensor_parallel=2, data_parallel=4), cluster,
    ...                     options=("none",))
    >>> two = compile_shape((gpt,), ParallelConfig(tensor_parallel=2, data_parallel=16, zero=0), cluster,
    ...                     options=("none",))
    >>> one is two, one.table(ParallelConfig(tensor_parallel=2, data_parallel=16, zero=0), cluster).frame.equals(
    ...     estimate_layers(gpt, parallel=ParallelConfig(tensor_parallel=2, data_parallel=16, zero=0),
    ...                     cluster=cluster, options=("none",), kernels=DEFAULT_KERNELS).frame)
    (True, True)
    """
    kernels = DEFAULT_KERNELS if kernels is None else kernels
    key = shape_key(models, parallel, cluster, kernels, options)
    compiled = _cache.get(key)
    if compiled is None:
        # Without ZeRO the estimate's working sets hold no parameters: table() adds each (dp, zero)'s.
        free = replace(parallel, zero=0, reshard_after_forward=True)
        layers = estimate_layers(*models, parallel=free, cluster=cluster, kernels=kernels, options=options)
        params = layers.breakdown.drop_duplicates(KIND).set_index(KIND)[[PARAMS, EXPERT_PARAMS]]
        compiled = CompiledShape(models=models, layers=layers, params=params)
        if len(_cache) >= _CACHE_SIZE:
            _cache.pop(next(iter(_cache)))
        _cache[key] = compiled
    return compiled
