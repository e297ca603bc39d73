"""The search's shared work: one layer table per shape, priced once, and what the bounds read of it.

A strategy's layer times and activations depend on its *shape*: the tensor,
context and expert degrees, the micro-batch size, sequence parallelism,
tensor-parallel communication overlap and the context-parallel kind
(:func:`sappkit.strategy.compiled.compile_shape`; the sequence is the
model's). The data-parallel degree and the ZeRO stage only change what each
device holds of the parameters. So the search compiles one table per shape
(:func:`price_shape`, run on the executor's workers), and ships it with the
strategies of that shape. :class:`ShapeCosts` is the little the bounds need
of a table: per body kind and recompute option its times and memory, the
head's and the tail's, and the parameters of one layer; under ZeRO 3 the
times gain the per-micro-batch gathers that the data-parallel degree sets
(:meth:`ShapeCosts.under`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ...columns import (ACTIVATION_MB, BACKWARD_TIME, BODY, FORWARD_TIME, HEAD, KIND, MEMORY_ONCE_MB, OPTION, ROLE,
                         SAPP_OPTIONS, TAIL)
from ...hardware import Cluster
from ...layers import KernelConfig, ParallelConfig, TransformerConfig
from ...layers.comm import zero3_comm_ms
from ...layers.timing import EXPERT_PARAMS, PARAMS
from ..compiled import CompiledShape, compile_shape, zero3_passes

__all__ = ["SHAPE_DIMENSIONS", "ShapeCosts", "PricedShape", "price_shape", "shape_parallel"]

#: The dimensions a layer table depends on (module docstring).
SHAPE_DIMENSIONS = ("tensor_parallel", "context_parallel", "expert_parallel", "expert_tensor_parallel",
                    "micro_batch_size", "sequence_parallel", "tp_comm_overlap", "cp_kind")


@lru_cache(maxsize=65536)
def shape_parallel(shape: tuple, data_parallel: int | None = None, zero: int = 1,
                   dtype: str = "bf16", fp8_recipe: str | None = None,
                   reshard_after_forward: bool = True) -> ParallelConfig:
    """The :class:`~sappkit.layers.ParallelConfig` of a shape (a tuple in :data:`SHAPE_DIMENSIONS` order) at
    ``data_parallel`` (default ``ep · etp``, a degree every expert layout divides; the shape's table does not
    depend on it), ``zero`` and ``reshard_after_forward`` (what a device holds of the parameters). Kept per
    argument: the bounds ask for every ``(dp, zero)`` of every shape, chunk after chunk."""
    t, cp, ep, etp, b, sp, overlap, kind = shape
    dp = int(ep) * int(etp) if data_parallel is None else int(data_parallel)
    return ParallelConfig(tensor_parallel=int(t), context_parallel=int(cp), expert_parallel=int(ep),
                          expert_tensor_parallel=int(etp), micro_batch_size=int(b), sequence_parallel=bool(sp),
                          data_parallel=dp, zero=int(zero), dtype=dtype, fp8_recipe=fp8_recipe,
                          tp_comm_overlap=bool(overlap), cp_kind=str(kind),
                          reshard_after_forward=bool(reshard_after_forward))


@dataclass(frozen=True)
class ShapeCosts:
    """What the bounds read of one shape's layer table (times in ms, memory in MB, parameters as counts).

    Per body kind (model order) and recompute option (:data:`~sappkit.columns.SAPP_OPTIONS` order) the
    ``[kind, option]`` arrays hold the option's times and memory, ``inf`` where a kind lacks the option.
    """

    counts: np.ndarray
    """Layers per body kind."""
    forward: np.ndarray
    """``[kind, option]``: forward time per micro-batch."""
    backward: np.ndarray
    """``[kind, option]``: backward time per micro-batch, recompute included."""
    activation: np.ndarray
    """``[kind, option]``: activation per micro-batch in flight."""
    once: np.ndarray
    """``[kind, option]``: memory kept once, whatever the micro-batches in flight."""
    dense_params: np.ndarray
    """Per body kind, the dense parameters of one layer on a device (after tensor splitting)."""
    expert_params: np.ndarray
    """Per body kind, the routed-expert parameters of one layer on a device (after expert splitting)."""
    head: tuple[float, float, float, float, float]
    """The head's (forward, backward, activation, memory kept once, dense parameters); zeros without one."""
    tail: tuple[float, float, float, float, float]
    """The tail's, as ``head``."""

    @classmethod
    def of(cls, compiled: CompiledShape) -> ShapeCosts:
        """The summary of a compiled shape's table (read from its columns as arrays: a search summarises every
        shape it meets)."""
        table = compiled.layers
        frame = table.frame
        kinds = list(table.body_kinds)
        role, kind, option = (frame[column].to_numpy() for column in (ROLE, KIND, OPTION))
        values = np.column_stack([frame[column].to_numpy(dtype=float)  # column by column: no frame is taken
                                  for column in (FORWARD_TIME, BACKWARD_TIME, ACTIVATION_MB, MEMORY_ONCE_MB)])
        arrays = np.full((values.shape[1], len(kinds), len(SAPP_OPTIONS)), np.inf)  # [column, kind, option]
        at_kind, at_option = {k: i for i, k in enumerate(kinds)}, {o: j for j, o in enumerate(SAPP_OPTIONS)}
        for row in np.flatnonzero(role == BODY):
            if option[row] in at_option:
                arrays[:, at_kind[kind[row]], at_option[option[row]]] = np.where(np.isnan(values[row]), np.inf,
                                                                                  values[row])
        at_param = {k: i for i, k in enumerate(compiled.params.index)}  # positions, not .loc per summary
        dense, experts = (compiled.params[column].to_numpy(dtype=float) for column in (PARAMS, EXPERT_PARAMS))
        body = [at_param[k] for k in kinds]

        def ends(end: str) -> tuple[float, float, float, float, float]:
            rows = np.flatnonzero(role == end)
            if not len(rows):
                return 0.0, 0.0, 0.0, 0.0, 0.0
            return (*(float(x) for x in values[rows[0]]), float(dense[at_param[kind[rows[0]]]]))

        return cls(counts=np.array([table.count(k) for k in kinds], dtype=float), forward=arrays[0],
                   backward=arrays[1], activation=arrays[2], once=arrays[3],
                   dense_params=dense[body], expert_params=experts[body], head=ends(HEAD),
                   tail=ends(TAIL))

    def under(self, parallel: ParallelConfig, cluster: Cluster) -> ShapeCosts:
        """The summary at ``parallel``'s ``dp`` and ZeRO stage: under ZeRO 3 every time with the layer's gathers and
        reduce-scatters per micro-batch overlapped in (:func:`~sappkit.strategy.compiled.zero3_passes`), as
        :meth:`CompiledShape.table <sappkit.strategy.compiled.CompiledShape.table>` puts them into the strategy's
        own table (the head and the tail hold no routed experts); below ZeRO 3 the summary itself."""
        if parallel.zero != 3:
            return self
        share = cluster.device.comm_sm_share

        def timed(forward: float, backward: float, comm: tuple[float, float]) -> tuple[float, float]:
            passes = zero3_passes(comm, forward, backward, share)
            return forward + sum(passes[0]), backward + sum(passes[1])

        forward, backward = self.forward.copy(), self.backward.copy()
        for k, (dense, experts) in enumerate(zip(self.dense_params, self.expert_params)):
            comm = zero3_comm_ms(dense, experts, parallel, cluster)
            for o in range(forward.shape[1]):
                forward[k, o], backward[k, o] = timed(self.forward[k, o], self.backward[k, o], comm)
        head, tail = ((*timed(end[0], end[1], zero3_comm_ms(end[4], 0.0, parallel, cluster)), *end[2:])
                      for end in (self.head, self.tail))
        return replace(self, forward=forward, backward=backward, head=head, tail=tail)


@dataclass(frozen=True)
class PricedShape:
    """A shape's compiled layer table and its summary, as shipped to the workers."""

    shape: tuple
    compiled: CompiledShape
    costs: ShapeCosts


def price_shape(models: tuple[TransformerConfig, ...], shape: tuple, cluster: Cluster, kernels: KernelConfig | None,
                dtype: str, fp8_recipe: str | None = None) -> PricedShape:
    """Compile one shape's layer table under every recompute option (the search's shared work; a worker runs it).

    Examples
    --------
    >>> from sappkit import TransformerConfig
    >>> from sappkit.hardware import Cluster
    >>> gpt = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048,
    ...                         vocab_size=32000)
    >>> priced = price_shape((gpt,), (2, 1, 1, 1, 1, True, False, "ring"), Cluster.preset("dgx-a100"), None, "bf16")
    >>> priced.costs.counts.tolist(), priced.costs.backward.shape
    ([8.0], (1, 5))
    """
    compiled = compile_shape(models, shape_parallel(shape, dtype=dtype, fp8_recipe=fp8_recipe), cluster, kernels=kernels,
                             options=SAPP_OPTIONS)
    return PricedShape(shape=shape, compiled=compiled, costs=ShapeCosts.of(compiled))
