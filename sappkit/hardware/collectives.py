"""What a collective costs on a link: latency plus bytes over bandwidth, times its algorithm's factor.

A ring collective over ``n`` ranks moves, per rank, a fraction of the buffer
that depends on the operation (the "bus bandwidth" factors of NVIDIA's
nccl-tests, ``doc/PERFORMANCE.md``), and takes one latency per ring step:

=================  =====================  ===========
operation          bytes per rank / ``B``  steps
=================  =====================  ===========
``all_reduce``     ``2 (n - 1) / n``        ``2 (n - 1)``
``reduce_scatter`` ``(n - 1) / n``          ``n - 1``
``all_gather``     ``(n - 1) / n``          ``n - 1``
``all_to_all``     ``(n - 1) / n``          ``n - 1``
``send_recv``      ``1``                    ``1``
=================  =====================  ===========

``B`` is the whole buffer (the reduced tensor; the gathered one; all a rank
sends in an all-to-all; the message of a send/receive). The time is
``factor · B / bandwidth + steps · latency``, at the bandwidth of the
slowest link the ring crosses (:meth:`sappkit.hardware.Cluster.link`).

**Overlap** (:func:`overlap_ms`) is a model, not a switch: a collective of
``c`` ms issued under compute of ``w`` ms hides ``min(c, w)`` of itself and
exposes the rest, ``max(0, c − w)``; while it runs it takes a share ``σ`` of
the device's SMs (:attr:`~sappkit.hardware.DeviceConfig.comm_sm_share`), so
the compute it hides under is slowed by ``σ · min(c, w)`` (to first order).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._check import check_choice, check_int, check_number

__all__ = ["Link", "COLLECTIVES", "collective_ms", "overlap_ms"]

#: Collective -> (bytes factor, ring steps) as functions of the ranks ``n``.
_ALGORITHM = {
    "all_reduce": (lambda n: 2 * (n - 1) / n, lambda n: 2 * (n - 1)),
    "reduce_scatter": (lambda n: (n - 1) / n, lambda n: n - 1),
    "all_gather": (lambda n: (n - 1) / n, lambda n: n - 1),
    "all_to_all": (lambda n: (n - 1) / n, lambda n: n - 1),
    "send_recv": (lambda n: 1.0, lambda n: 1),
}
#: The collectives :func:`collective_ms` prices.
COLLECTIVES = tuple(_ALGORITHM)


@dataclass(frozen=True)
class Link:
    """The link a rank group's collective runs on: what one device reaches per direction."""

    gbs: float
    """Bandwidth per device and direction a collective reaches, GB/s (1e9 bytes)."""
    latency_us: float
    """Latency of one ring step, µs."""


def collective_ms(kind: str, nbytes: float, ranks: int, link: Link) -> float:
    """The time of one collective over ``ranks`` ranks on ``link``, ms (0 for one rank or no bytes).

    Examples
    --------
    >>> link = Link(gbs=100.0, latency_us=10.0)
    >>> collective_ms("all_reduce", 1e9, 4, link)  # 2 * 3/4 * 10 ms + 6 steps of 10 us
    15.06
    >>> collective_ms("all_gather", 1e9, 1, link)
    0.0
    """
    check_choice("kind", kind, COLLECTIVES)
    ranks = check_int("ranks", ranks, minimum=1)
    nbytes = check_number("nbytes", nbytes, minimum=0)
    if (ranks == 1 and kind != "send_recv") or nbytes == 0:
        return 0.0
    factor, steps = _ALGORITHM[kind]
    return factor(ranks) * nbytes / (link.gbs * 1e6) + steps(ranks) * link.latency_us * 1e-3


def overlap_ms(comm_ms: float, window_ms: float, sm_share: float) -> tuple[float, float]:
    """A collective of ``comm_ms`` overlapped with ``window_ms`` of compute: (its exposed part, the compute's
    slowdown), ms (module docstring).

    Examples
    --------
    >>> overlap_ms(3.0, 10.0, 0.1)  # hidden under the compute, which it slows by 0.1 * 3 ms
    (0.0, 0.30000000000000004)
    >>> overlap_ms(12.0, 10.0, 0.1)  # 2 ms exposed; the compute slowed for the 10 ms it ran under
    (2.0, 1.0)
    """
    hidden = min(comm_ms, window_ms)
    return comm_ms - hidden, sm_share * hidden
