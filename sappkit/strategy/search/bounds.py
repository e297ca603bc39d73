r"""Closed-form lower bounds on a strategy's peak memory and step time, over every placement and recompute choice.

Both hold for every placement of the body layers on the cells and every
recompute option each layer may run, so a strategy whose bound is out of
reach is out of reach for good (``tests/strategy/search/test_bounds.py``
checks them against evaluated and balanced strategies). Write
:math:`N_{s,k,o}` for the layers of body kind :math:`k` on stage :math:`s`
running option :math:`o` (:math:`L_k` layers of kind :math:`k` in all), and
read from the shape's table (:class:`~.shapes.ShapeCosts`) each option's
forward :math:`f`, backward :math:`b`, activation per micro-batch in flight
:math:`a` and memory kept once :math:`u`, and the parameters :math:`P_k` a
layer keeps under the strategy's ``dp`` and ZeRO stage.

**Memory.** At its peak a stage holds its parameters, what its layers keep
once, its constant and at least :math:`\max_c n_{c,s} A_{c,s}` of
activations (:math:`n_{c,s}` the cell's micro-batches in flight,
:func:`sappkit.pipeline.schedules.in_flight_counts`; :math:`A_{c,s}` its
activation per micro-batch, head and tail included). As :math:`\max_c n_c
A_c \ge \sum_c A_c / H_s`, :math:`H_s = \sum_c 1/n_{c,s}`; for the schedules
in :data:`SIMULTANEOUS` one event holds every cell's count at once, so
also :math:`\sum_c n_c A_c \ge \min_c n_c \sum_c A_c`. With :math:`\phi_s`
the larger factor, stage :math:`s` holds :math:`m_s \ge c_s + \sum_{k,o}
(P_k + u_{k,o} + \phi_s a_{k,o}) N_{s,k,o}`. For weights :math:`\lambda_s \ge 0` summing to one,
:math:`\max_s m_s \ge \sum_s \lambda_s m_s \ge C + \sum_{k,o} \mu_{k,o}
N_{k,o}` with :math:`\mu_{k,o} = \min_s \lambda_s (P_k + u_{k,o} +
\phi_s a_{k,o})` and :math:`N_{k,o} = \sum_s N_{s,k,o}`. The *memory bound* is
its least value, every layer on its lightest option (as SAPP's search
prunes, with full recompute); :math:`\lambda_s \propto 1 / (\bar P + \phi_s
\bar a)` makes it exact for one kind.

**Time.** Three families of lower bounds, each of the form
:math:`C + \sum_{k,o} \tau_{k,o} N_{k,o}`:

- *work*: the busiest stage runs at least the average: :math:`\tau = m (f +
  b) / p`, the head and the tail in :math:`C`;
- *one micro-batch's critical path*: its forward through every cell and its
  gradient back, :math:`\tau = f + g` (:math:`g = b`, or the input pass, at
  least half of it, for the schedules that split the backward), a pipeline
  transfer at every stage boundary;
- *stage paths*: stage :math:`s` waits for the first micro-batch's forward
  through the chunk-0 cells before it, runs its ops, and (schedules in
  :data:`DRAINED`) the last micro-batch's gradient then runs back down
  those cells. Weighted by :math:`\lambda_s`: :math:`\tau_{k,o} = \min_s
  (\lambda_s m (f + b) + [v = 1] \alpha \Lambda_{>s})`, :math:`\alpha` the
  fill and drain of a layer, :math:`\Lambda_{>s} = \sum_{j>s} \lambda_j`.
  For one chunk, geometric weights :math:`\lambda_s \propto q^{p-1-s}`,
  :math:`q = 1 - \alpha/(m w)`, give :math:`\alpha L/(1 - q^p)` (the
  bubble of ``(m + p - 1) / m``-like steps the work bound cannot see);
  with more chunks even weights, and every chunk-0 cell but the head's
  holds a layer.

A placement that fits has :math:`\sum_{k,o} \mu_{k,o} N_{k,o} \le M - C_m`,
so its step is at least the least :math:`C + \sum \tau N` under that
knapsack; by weak duality, for every :math:`y \ge 0`, at least
:math:`C + \sum_k L_k \min_o (\tau_{k,o} + y \mu_{k,o}) - y (M - C_m)`.
The bound takes the best :math:`y` among the knapsack's breakpoints (so the
recompute a tight memory forces is priced in). Without a pipeline the step
runs every micro-batch through the whole model: the work bound with
:math:`p = 1`. What the bounds leave out (the data-parallel reduction and
the optimizer step after the last op, working sets, transfers an op waits
for) only makes the true values larger.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...pipeline.schedules import SPLIT_BACKWARD, V_SHAPED, in_flight_counts, tail_cell
from .shapes import ShapeCosts

__all__ = ["DRAINED", "SIMULTANEOUS", "PerStrategy", "Bounds", "bounds", "gradient_time", "flight_counts",
           "stack_costs"]

#: Schedules whose every stage ends with the last micro-batch's gradient of its chunk-0 cell (so the gradient
#: still runs back down the stages before it); ``tests/strategy/search/test_bounds.py`` checks it on their orders.
DRAINED = ("1f1b", "gpipe", "interleaved", "looped_bfs", "dualpipev")
#: Schedules one of whose memory events holds every cell's micro-batches in flight at once, on every stage (the
#: same test checks it on their orders).
SIMULTANEOUS = ("1f1b", "gpipe", "interleaved", "looped_bfs", "dualpipev", "dualpipev_split")


@dataclass(frozen=True)
class PerStrategy:
    """What the bounds read, per strategy: arrays over strategies of one pipeline ``(schedule, p, v, m)``.

    ``forward``, ``backward``, ``activation`` and ``once`` are ``[strategy, kind, option]`` (the shape's
    :class:`~.shapes.ShapeCosts`); ``head`` and ``tail`` ``[strategy, 3]`` (forward, backward, activation);
    ``params`` ``[strategy, kind]`` the MB a layer keeps under the strategy's ``dp`` and ZeRO stage; ``head_mb``
    and ``tail_mb`` the head's and the tail's parameters and what they keep once; ``const_mb`` the table's
    per-stage constant; ``p2p_ms`` one transfer between stages; ``counts`` the layers per kind.
    """

    counts: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    activation: np.ndarray
    once: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    params: np.ndarray
    head_mb: np.ndarray
    tail_mb: np.ndarray
    const_mb: np.ndarray
    p2p_ms: np.ndarray

    @classmethod
    def gather(cls, stacked: dict[str, np.ndarray], shape_of: np.ndarray, **per_strategy) -> PerStrategy:
        """The arrays of strategies whose shapes are ``shape_of`` (positions in ``stacked``, :func:`stack_costs`
        of their shapes); ``per_strategy`` gives ``params``, ``head_mb``, ``tail_mb``, ``const_mb`` and
        ``p2p_ms``."""
        return cls(counts=stacked["counts"], **{name: array[shape_of] for name, array in stacked.items()
                                                if name != "counts"}, **per_strategy)


def stack_costs(costs: list[ShapeCosts]) -> dict[str, np.ndarray]:
    """Shapes' summaries as arrays over shapes, for :meth:`PerStrategy.gather`."""
    stacked = {name: np.stack([getattr(c, name) for c in costs]) for name in ("forward", "backward", "activation",
                                                                                "once")}
    ends = {name: np.array([getattr(c, name)[:3] for c in costs]) for name in ("head", "tail")}
    return {"counts": costs[0].counts, **stacked, **ends}


@dataclass(frozen=True)
class Bounds:
    """Per strategy, the least peak memory (MB) and the least step time (ms) it can reach."""

    memory_mb: np.ndarray
    time_ms: np.ndarray


@lru_cache(maxsize=4096)
def flight_counts(schedule: str, p: int, v: int, m: int) -> np.ndarray:
    """Micro-batches in flight ``[chunk, stage]`` as the bounds count them, kept for every pipeline the search
    meets: :func:`~sappkit.pipeline.schedules.in_flight_counts`, but for PyTorch's zero-bubble interleaved
    schedule, whose counts come from walking its whole order, ``min(m, p)``: the least any of its cells holds
    (``tests/strategy/search/test_bounds.py`` checks it on a grid), so its bounds stay bounds."""
    if schedule == "zb_interleaved":
        return np.full((v, p), float(min(m, p)))
    return in_flight_counts(schedule, p, m, v).astype(float)


@lru_cache(maxsize=4096)
def _flight(schedule: str, p: int, v: int, m: int) -> tuple[np.ndarray, int]:
    """Per stage, the least activation held per MB of activation on the stage, and the tail's stage: ``1 / H_s``,
    ``H_s = sum_c 1 / n_{c,s}``, or for :data:`SIMULTANEOUS` schedules ``min_c n_{c,s}`` where larger."""
    if p == 1:
        return np.ones(1), 0
    counts = flight_counts(schedule, p, v, m)
    factor = 1.0 / (1.0 / counts).sum(axis=0)
    if schedule in SIMULTANEOUS:
        factor = np.maximum(factor, counts.min(axis=0))
    return factor, tail_cell(schedule, p, v)[1]


def bounds(schedule: str, p: int, v: int, m: int, values: PerStrategy, memory_mb: float) -> Bounds:
    """The memory and time bounds of the module docstring for strategies of one pipeline shape."""
    factor, tail_stage = _flight(schedule, p, v, m)
    # memory: [strategy, stage, kind, option]
    slope = (values.params[:, None, :, None] + values.once[:, None]
             + values.activation[:, None] * factor[None, :, None, None])
    constant = np.repeat(values.const_mb[:, None], p, axis=1)
    constant[:, 0] += values.head_mb + values.head[:, 2] * factor[0]
    constant[:, tail_stage] += values.tail_mb + values.tail[:, 2] * factor[tail_stage]
    lightest = slope.min(axis=3)
    mean = (lightest * values.counts).sum(axis=2) / values.counts.sum()
    weights = (1.0 / mean) / (1.0 / mean).sum(axis=1, keepdims=True)
    mu = (weights[..., None, None] * slope).min(axis=1)                               # [strategy, kind, option]
    fixed = (weights * constant).sum(axis=1)
    least = np.maximum(fixed + (mu.min(axis=2) * values.counts).sum(axis=1), constant.max(axis=1))
    budget = memory_mb - fixed
    families = [_work(p, m, values)] if p == 1 else [_work(p, m, values), _trip(schedule, p, v, values),
                                                   _stage_paths(schedule, p, v, m, values, tail_stage)]
    time = np.max([_least_time(c, tau, mu, values.counts, budget) for c, tau in families], axis=0)
    return Bounds(least, time)


def _work(p: int, m: int, values: PerStrategy) -> tuple[np.ndarray, np.ndarray]:
    ends = values.head[:, :2].sum(axis=1) + values.tail[:, :2].sum(axis=1)
    return m * ends / p, m * (values.forward + values.backward) / p


def gradient_time(schedule: str, backward):
    """A cell's gradient op on the critical path: the backward, or at least half of it when the schedule splits it
    into an input and a weight pass (the input pass keeps the recompute and half the rest)."""
    return backward / 2 if schedule in SPLIT_BACKWARD else backward


def _trip(schedule: str, p: int, v: int, values: PerStrategy) -> tuple[np.ndarray, np.ndarray]:
    crossings = 2 * (p - 1) if schedule in V_SHAPED else p * v - 1
    ends = sum(end[:, 0] + gradient_time(schedule, end[:, 1]) for end in (values.head, values.tail))
    return ends + 2 * crossings * values.p2p_ms, values.forward + gradient_time(schedule, values.backward)


def _stage_paths(schedule: str, p: int, v: int, m: int, values: PerStrategy,
                 tail_stage: int) -> tuple[np.ndarray, np.ndarray]:
    drained = schedule in DRAINED
    fill = values.forward + (gradient_time(schedule, values.backward) if drained else 0.0)   # [strategy, kind, option]
    layer = values.forward + values.backward
    s = np.arange(p)
    head = values.head[:, 0] + (values.head[:, 1] if drained else 0.0)
    constant = head[:, None] + (2 if drained else 1) * s[None, :] * values.p2p_ms[:, None]  # [strategy, stage]
    constant[:, 0] = m * (values.head[:, 0] + values.head[:, 1])
    constant[:, tail_stage] += m * (values.tail[:, 0] + values.tail[:, 1])
    if v == 1:  # geometric weights from the fastest options' fill per unit of work
        fastest = np.where(np.isfinite(layer), layer, np.inf).argmin(axis=2)[..., None]
        ratio = ((np.take_along_axis(fill, fastest, 2)[..., 0] * values.counts).sum(axis=1)
                 / (m * (np.take_along_axis(layer, fastest, 2)[..., 0] * values.counts).sum(axis=1)))
        weights = (1.0 - np.minimum(ratio, 1.0))[:, None] ** (p - 1 - s)[None, :]
    else:
        weights = np.ones((len(layer), p))
    weights = weights / weights.sum(axis=1, keepdims=True)
    after = weights[:, ::-1].cumsum(axis=1)[:, ::-1] - weights                         # Lambda_{>s}
    tau = weights[..., None, None] * m * layer[:, None]                           # [strategy, stage, kind, option]
    if v == 1:
        tau = tau + after[..., None, None] * fill[:, None]
        mandatory = 0.0
    else:
        mandatory = fill.reshape(len(fill), -1).min(axis=1) * after[:, 1:].sum(axis=1)
    return (constant * weights).sum(axis=1) + mandatory, tau.min(axis=1)


def _least_time(constant, tau: np.ndarray, mu: np.ndarray, counts: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """``constant + min sum tau N`` over layers ``N`` per (kind, option) that fill the kinds' counts and keep
    ``sum mu N <= budget``, bounded from below by its Lagrangian dual at the knapsack's breakpoints."""
    finite = np.isfinite(tau) & np.isfinite(mu)
    tau, mu = np.where(finite, tau, np.inf), np.where(finite, mu, np.inf)
    # the breakpoints: the multipliers y at which a kind's cheapest option in tau + y mu changes, one per pair of
    # options (i < j) whose tau and mu differ in opposite directions: y = (tau_i - tau_j) / (mu_j - mu_i) > 0
    first, second = np.triu_indices(tau.shape[2], 1)
    d_tau = tau[:, :, first] - tau[:, :, second]
    d_mu = mu[:, :, second] - mu[:, :, first]
    with np.errstate(divide="ignore", invalid="ignore"):
        ys = np.where(((d_mu > 0) & (d_tau > 0)) | ((d_mu < 0) & (d_tau < 0)), d_tau / d_mu, 0.0).reshape(len(mu), -1)
    ys = np.concatenate([np.zeros((len(mu), 1)), ys], axis=1)                           # [strategy, y]
    priced = tau[:, None] + ys[:, :, None, None] * mu[:, None]                          # [strategy, y, kind, option]
    dual = (priced.min(axis=3) * counts).sum(axis=2) - ys * budget[:, None]
    return constant + dual.max(axis=1)
