"""Step orders that split the backward: an input-gradient pass ``I`` and a weight-gradient pass ``W``.

The orders ``torch.distributed.pipelining`` runs (PyTorch 2.13), rebuilt from
their rules; ``tests/torch/test_schedules.py`` checks them against PyTorch's
own action lists. An op is ``(phase, chunk, unit)`` as in
:mod:`sappkit.pipeline.orders`; ``I`` passes the gradient on to the stage
before, ``W`` only needs its own ``I`` and fills bubbles.

- **zb_interleaved** (``ScheduleInterleavedZeroBubble``, ZB1P of Qi et al.,
  "Zero Bubble Pipeline Parallelism", 2024): micro-batches run in rounds of
  ``r = m / max(1, m // p)``; stage ``s`` warms up with ``(v - 1) r + p - 1
  - s`` forwards (1 per stage of distance, where interleaved 1F1B takes 2),
  then runs ``F I`` pairs, each followed, from the ``s``-th pair on, by the
  oldest ``W`` still owed; the cool-down runs ``I`` (and ``W``) and the
  owed ``W`` end the step.
- **zbv** (``ScheduleZBVZeroBubble``, ZB-V, the V of two chunks): ``F0 x
  (2(p - s) - 1)``, ``(F1 F0) x s``, ``(F1 I1 W1) x (p - s)``, then ``F0 I0
  W0 F1 I1 W1`` until every forward ran, ``(I0 I1) x s``, ``(I0 W0) x (p -
  s)``, the owed ``W1`` and ``W0``; built for ``max(m, 2p - 1)`` micro-batches
  and cut to ``m``.
- **dualpipev_split** (``ScheduleDualPipeV``): DualPipeV's eight steps with
  the backward split where it fills bubbles: step 3 ``I1 W F1``, steps 4 and 5
  overlap a forward with a whole backward (here run one after the other:
  ``F B``), step 6 turns to ``I`` half-way, step 7 ``W I0``, step 8 the owed
  ``W`` (each ``W`` the oldest owed).
- **dualpipe** (DeepSeek's DualPipe, arXiv 2412.19437 section 3.2.1;
  ``DualPipe.step`` in github.com/deepseek-ai/DualPipe at commit 3da1bbe,
  ``dualpipe/dualpipe.py``): the same eight steps, on ``p / 2`` half-ranks
  and ``m / 2`` micro-batches a direction. Rank ``s`` and rank ``p - 1 - s``
  run the order of DualPipeV's stage ``h = min(s, p - 1 - s)`` of ``p / 2``;
  the order's first chunk is the direction that enters at the rank's own end
  of the pipeline (chunk 0, the forward direction, on the first half of the
  ranks; chunk 1, the reverse direction, on the second). Units count within
  a direction, ``0..m/2 - 1``. Each overlapped forward-backward pair runs
  the forward then the backward and passes both outputs on when both end, as
  ``_forward_backward_chunk`` sends them; its backward waits for its own
  input after the forward (the source waits for both before the pair).
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

import numpy as np

from .phases import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, HOLDS

__all__ = ["zb_interleaved", "zbv", "dualpipev_split", "dualpipe", "rounds", "zb_interleaved_in_flight"]


def rounds(p: int, m: int) -> int:
    """Micro-batches per round of PyTorch's interleaved schedules: ``m / max(1, m // p)``.

    Examples
    --------
    >>> rounds(4, 8), rounds(4, 6), rounds(4, 3)
    (4, 6, 3)
    """
    return m // max(1, m // p)


class _Counters:
    """Next unit of each (phase, chunk), and the weight passes owed in the order their ``I`` ran."""

    def __init__(self):
        self.next: dict[tuple[int, int], int] = {}
        self.owed: deque[tuple[int, int]] = deque()
        self.ops: list[tuple[int, int, int]] = []

    def run(self, phase: int, chunk: int) -> None:
        # A whole backward and an input pass share one counter: both take the next gradient.
        key = (BACKWARD_INPUT if phase == BACKWARD else phase, chunk)
        unit = self.next.get(key, 0)
        self.next[key] = unit + 1
        self.ops.append((phase, chunk, unit))
        if phase == BACKWARD_INPUT:
            self.owed.append((chunk, unit))

    def weight(self) -> None:
        """The oldest owed weight pass, if any."""
        if self.owed:
            chunk, unit = self.owed.popleft()
            self.ops.append((BACKWARD_WEIGHT, chunk, unit))


def zb_interleaved(p: int, m: int, v: int, s: int) -> tuple:
    """Stage ``s``'s order under PyTorch's interleaved zero-bubble schedule (module docstring)."""
    group = rounds(p, m)
    total = m * v
    warmup = min((v - 1) * group + p - 1 - s, total)

    def forward_chunk(op: int) -> int:
        return (op // group) % v

    def backward_chunk(op: int) -> int:
        return v - 1 - ((op - warmup) // group) % v

    counters = _Counters()
    for op in range(warmup + total):
        if op < total:
            counters.run(FORWARD, forward_chunk(op))
        if op >= warmup:
            counters.run(BACKWARD_INPUT, backward_chunk(op))
            if op - warmup >= s:
                counters.weight()
    while counters.owed:
        counters.weight()
    return tuple(counters.ops)


@lru_cache(maxsize=64)
def zb_interleaved_in_flight(p: int, m: int, v: int) -> np.ndarray:
    """Peak units each cell ``[chunk, stage]`` holds under ``zb_interleaved``, walking each stage's order.

    Examples
    --------
    >>> zb_interleaved_in_flight(4, 8, 2).tolist()
    [[8, 8, 8, 8], [4, 4, 4, 4]]
    """
    peaks = np.zeros((v, p), dtype=int)
    for s in range(p):
        held = [0] * v
        for phase, chunk, _ in zb_interleaved(p, m, v, s):
            held[chunk] += HOLDS[phase]
            peaks[chunk, s] = max(peaks[chunk, s], held[chunk])
    peaks.flags.writeable = False
    return peaks


def zbv(p: int, m: int, s: int) -> tuple:
    """Stage ``s``'s order under PyTorch's ZB-V schedule (module docstring).

    Each weight pass takes the next unit of its chunk: right after its ``I``
    until the cool-down, in order after it.
    """
    units = max(m, 2 * p - 1)
    ops: list[tuple[int, int, int]] = []
    done = {(phase, chunk): 0 for phase in (FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT) for chunk in (0, 1)}

    def run(*pattern: tuple[int, int]) -> None:
        for phase, chunk in pattern:
            ops.append((phase, chunk, done[phase, chunk]))
            done[phase, chunk] += 1

    f0, f1, i0, i1, w0, w1 = ((phase, chunk) for phase in (FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)
                              for chunk in (0, 1))
    run(*[f0] * (2 * (p - s) - 1))
    run(*[f1, f0] * s)
    run(*[f1, i1, w1] * (p - s))
    while done[f1] < done[f0] or done[f0] < units:
        run(*([f0] if done[f0] < units else []), i0, w0, f1, i1, w1)
    run(*[i0, i1] * s)
    run(*[i0, w0] * (p - s))
    run(*[w1] * (done[i1] - done[w1]))
    run(*[w0] * (done[i0] - done[w0]))
    return tuple(op for op in ops if op[2] < m)


def dualpipev_split(p: int, m: int, s: int) -> tuple:
    """Stage ``s``'s order under PyTorch's DualPipeV schedule (module docstring)."""
    return _eight_steps(p, m, s)[0]


def _eight_steps(p: int, m: int, s: int) -> tuple[tuple, frozenset]:
    """DualPipeV's eight steps for stage ``s``: the order, and the positions of the ops that run overlapped
    with the op after them (each pair of DualPipe's ``_forward_backward_chunk``; on the middle stage,
    ``s = p - 1``, step 4 runs its first forward and backward apart)."""
    counters = _Counters()
    f0, f1, b0, b1 = (FORWARD, 0), (FORWARD, 1), (BACKWARD, 0), (BACKWARD, 1)
    run = counters.run
    paired = []
    for _ in range(2 * (p - s - 1)):
        run(*f0)
    for _ in range(s + 1):
        run(*f0)
        run(*f1)
    for _ in range(p - s - 1):
        run(BACKWARD_INPUT, 1)
        counters.weight()
        run(*f1)
    for i in range(m - 2 * p + s + 1):
        if i or s < p - 1:
            paired.append(len(counters.ops))
        run(*f0)
        run(*b1)
        paired.append(len(counters.ops))
        run(*f1)
        run(*b0)
    for _ in range(p - s - 1):
        run(*b1)
        paired.append(len(counters.ops))
        run(*f1)
        run(*b0)
    split = False
    for i in range(s + 1):
        # Half-way through step 6 the backward turns to input passes: on odd stages before B1, even after.
        split = split or (i == (s + 1) // 2 and s % 2 == 1)
        run(BACKWARD_INPUT if split else BACKWARD, 1)
        split = split or (i == (s + 1) // 2 and s % 2 == 0)
        run(BACKWARD_INPUT if split else BACKWARD, 0)
    for _ in range(p - s - 1):
        counters.weight()
        run(BACKWARD_INPUT if split else BACKWARD, 0)
    for _ in range(s + 1):
        counters.weight()
    return tuple(counters.ops), frozenset(paired)

def dualpipe(p: int, m: int, s: int) -> tuple[tuple, frozenset]:
    """Rank ``s``'s order under DualPipe (module docstring), and the positions of the ops that run overlapped
    with the op after them: DualPipeV's on the half-ranks, chunks swapped on the second half of the ranks,
    where the reverse direction enters.

    Examples
    --------
    >>> order, paired = dualpipe(4, 8, 3)
    >>> order[:4]  # the last rank starts the reverse direction: chunk 1 first
    ((0, 1, 0), (0, 1, 1), (0, 1, 2), (0, 0, 0))
    >>> [order[i][:2] + order[i + 1][:2] for i in sorted(paired)][:2]  # F1 with B0, then F0 with B1
    [(0, 1, 1, 0), (0, 0, 1, 1)]
    """
    half_rank = min(s, p - 1 - s)
    order, paired = _eight_steps(p // 2, m // 2, half_rank)
    if s < p // 2:
        return order, paired
    return tuple((phase, 1 - chunk, unit) for phase, chunk, unit in order), paired
