"""What one cell may hold for :mod:`.search`'s search: its compositions and, per composition, staircases.

A cell's *composition* is its layers of each body kind. Its contents are
points of the composition's front (:func:`~sappkit.balancer.exact.segments.run_front`);
for a backward cap ``beta`` the lightest point under it is all memory
needs (memory grows with every cell's activation and charged working set;
a charged cell keeps one such staircase per working set).

A cell's *catalogue* holds every composition it may hold whatever the cap,
with the staircases of those built so far in one flat store
(:class:`Staircases`): a cap only filters it (:func:`cells_of`), and a
larger cap builds the compositions it adds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..cells import EPS, Cache, Front
from ..segments import per_kind, run_front, within
from ...setup import V_SHAPED, BalanceSetup
from ..stage_bounds import charged_chunks, fixed_memory, floor_weights

__all__ = ["Cell", "Staircases", "cells_of", "counts_of", "stage_key"]


@dataclass(frozen=True)
class Staircases:
    """Staircases of built compositions, flat: one segment per (composition, working-set group) of steps by
    backward ascending (the cell's fixed backward included), the least activation up to each step and the
    front point giving it."""

    groups: np.ndarray  # [group] working sets ascending
    segment: np.ndarray  # [composition, group] its segment, -1 where none
    start: np.ndarray  # [segment] its first step
    backward: np.ndarray  # [step]
    activation: np.ndarray  # [step]
    point: np.ndarray  # [step]

    @classmethod
    def empty(cls, compositions: int) -> Staircases:
        """No staircase yet, for a catalogue of ``compositions``."""
        return cls(np.zeros(0), np.full((compositions, 0), -1), np.zeros(0, int), np.zeros(0), np.zeros(0),
                   np.zeros(0, int))

    @cached_property
    def owner(self) -> np.ndarray:
        """Per step, its segment."""
        return np.repeat(np.arange(len(self.start)), np.diff(np.r_[self.start, len(self.backward)]))

    @cached_property
    def span(self) -> float:
        """More than four times any backward: segment ``k``'s steps shifted by ``k`` spans never overlap."""
        return 4.0 * (float(self.backward.max(initial=0.0)) + 1.0)

    @cached_property
    def _sorted(self) -> np.ndarray:
        """Every step's backward shifted by its segment's spans: ascending, for one :func:`np.searchsorted`."""
        return self.backward + self.owner * self.span

    def least(self, compositions: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per composition (row) and group: the least activation with backward <= ``beta`` (inf where none) and
        its step (-1)."""
        segment = self.segment[compositions]
        shifted = np.maximum(segment, 0) * self.span
        top = self.span / 4
        query = np.minimum(beta, top) + EPS * np.maximum(1.0, np.minimum(np.abs(beta), top))
        step = np.searchsorted(self._sorted, query[:, None] + shifted, side="right") - 1
        found = (segment >= 0) & (step >= self.start[np.maximum(segment, 0)])
        return np.where(found, self.activation[np.maximum(step, 0)], np.inf), np.where(found, step, -1)

    @cached_property
    def _reach(self) -> float:
        """More than four times any activation: segment ``k``'s activations shifted by ``k`` reaches never
        overlap."""
        return 4.0 * (float(np.abs(self.activation).max(initial=0.0)) + 1.0)

    @cached_property
    def _falling(self) -> np.ndarray:
        """Every step's activation negated and shifted by its segment's reaches: ascending (a staircase's least
        activation never grows along it), for one :func:`np.searchsorted`."""
        return self.owner * self._reach - self.activation

    def first_within(self, compositions: np.ndarray, groups: np.ndarray, room: np.ndarray) -> np.ndarray:
        """Per row, the least backward of the composition's staircase in working-set group ``groups`` (an index
        into :attr:`groups`) whose activation is at most ``room`` (inf where none is, or no such staircase)."""
        segment = self.segment[compositions, groups]
        known = segment >= 0
        segment, reach = np.maximum(segment, 0), self._reach
        bounded = np.clip(room, -reach / 4, reach / 4)
        query = segment * reach - bounded - EPS * np.maximum(1.0, np.abs(bounded))
        step = np.maximum(np.searchsorted(self._falling, query, side="left"), self.start[segment])
        end = np.r_[self.start[1:], len(self.backward)][segment]
        found = known & (step < end) & (room >= -reach / 4)
        return np.where(found, self.backward[np.minimum(step, len(self.backward) - 1)], np.inf)

    def extended(self, compositions: int, built: list[tuple[int, dict]]) -> Staircases:
        """These staircases with ``built``'s (composition, staircases per working set) appended, for a catalogue
        of ``compositions``."""
        groups = np.unique(np.r_[self.groups, [w for _, stairs in built for w in stairs]])
        segment = np.full((compositions, len(groups)), -1)
        segment[:, np.searchsorted(groups, self.groups)] = self.segment
        parts, first = [], len(self.start)
        for k, stairs in built:
            for w, part in stairs.items():
                segment[k, np.searchsorted(groups, w)] = first + len(parts)
                parts.append(part)
        sizes = np.array([len(backward) for backward, _, _ in parts], dtype=int)
        start = np.r_[self.start, len(self.backward) + np.r_[0, np.cumsum(sizes)][:-1]].astype(int)
        joined = [np.concatenate([old, *(part[i] for part in parts)]) for i, old in
                  enumerate((self.backward, self.activation, self.point))]
        return Staircases(groups, segment, start, *joined)


@dataclass(frozen=True)
class Cell:
    """What one cell may hold under a cap, per composition (layers of each kind): its term (what it adds to
    the stage's value beside its backward), parameters + memory kept once, and its staircases per
    working-set group (``working``), read from its catalogue's store (``rows``: each composition's row)."""

    layers: np.ndarray  # [composition, kind]
    forward: np.ndarray  # [composition]
    kept: np.ndarray  # [composition]
    rows: np.ndarray  # [composition]
    stairs: Staircases
    fronts: list

    @property
    def working(self) -> np.ndarray:
        return self.stairs.groups

    def least_activation(self, composition: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row and group: the least activation with backward <= ``beta`` (inf where none), and its step."""
        return self.stairs.least(self.rows[composition], beta)

    def first_within(self, composition: np.ndarray, group: np.ndarray, room: np.ndarray) -> np.ndarray:
        """Per row, the least backward whose least activation in working-set group ``group`` (an index into
        :attr:`working`) is at most ``room`` (inf where none is)."""
        return self.stairs.first_within(self.rows[composition], group, room)

    def mix(self, composition: int, step: int) -> np.ndarray:
        """Layers per option of the front point at ``step`` (from :meth:`least_activation`)."""
        return self.fronts[composition].mix[self.stairs.point[step]]

    @cached_property
    def _segments(self) -> np.ndarray:
        return self.stairs.segment[self.rows]

    @cached_property
    def quickest(self) -> np.ndarray:
        """Per composition, its least backward."""
        segment = self._segments
        first = np.where(segment >= 0, self.stairs.backward[self.stairs.start[np.maximum(segment, 0)]], np.inf)
        return first.min(axis=1, initial=np.inf)

    @cached_property
    def lightest(self) -> np.ndarray:
        """Per composition and group, its least activation (inf where none)."""
        segment = self._segments
        ends = np.r_[self.stairs.start[1:], len(self.stairs.backward)] - 1
        return np.where(segment >= 0, self.stairs.activation[ends[np.maximum(segment, 0)]], np.inf)

    @cached_property
    def values(self) -> np.ndarray:
        """Every backward of its compositions' steps, ascending, once each."""
        return np.unique(self._backward_of(self._segments))

    @cached_property
    def grid(self) -> np.ndarray:
        """:attr:`values` and 0: every backward cap worth pricing, ascending."""
        return np.union1d(self.values, [0.0])

    def steps(self, composition: int) -> np.ndarray:
        """Every backward of one composition's steps (unsorted, repeats across working-set groups)."""
        return self._backward_of(self._segments[composition])

    def _backward_of(self, segments: np.ndarray) -> np.ndarray:
        """Every backward of the steps of these segments (-1: none), in store order."""
        mine = np.zeros(len(self.stairs.start), bool)
        mine[segments[segments >= 0]] = True
        return self.stairs.backward[mine[self.stairs.owner]]


def counts_of(setup: BalanceSetup) -> tuple[int, int]:
    """Layers of each body kind, ``(n, 0)`` with one kind: the search always counts two."""
    return int(setup.counts[0]), int(setup.counts[1]) if len(setup.kinds) == 2 else 0


def _per_kind(setup: BalanceSetup, values: np.ndarray) -> np.ndarray:
    """:func:`~sappkit.balancer.exact.segments.per_kind` for the two kinds :func:`counts_of` counts."""
    return np.r_[per_kind(setup, values), np.zeros(2 - len(setup.kinds))]


def _term(setup: BalanceSetup, c: int, s: int, measure: str) -> tuple[np.ndarray, float]:
    """What cell ``(c, s)`` adds to its stage's value beside its backward, per layer of each kind and fixed:
    its forward (the stage time takes the largest), or under the split objective the last chunk's ``Fht + f_s
    / m * Fbody`` of ``L`` (0 on the other chunks)."""
    forward = _per_kind(setup, setup.forward)
    if measure != "split":
        return forward, float(setup.fixed_forward[c, s])
    if c < setup.chunks - 1:
        return np.zeros_like(forward), 0.0
    return setup.last_chunk_factors[s] / setup.slices * forward, float(setup.fixed_forward[c, s])


def _compositions(setup: BalanceSetup, c: int, s: int, holds) -> list[tuple[int, int]]:
    """Layers of each kind the cell may hold: ``holds`` is 0 or 1 (one kind), or ``"both"`` (the boundary
    cell: at least one layer of the first kind, the second's only where the cell may hold both)."""
    n0, n1 = counts_of(setup)
    if holds == "both":
        second = range(n1 + 1) if not (setup.schedule in V_SHAPED and c == 1) else range(1)
        return [(a, b) for a in range(1, n0 + 1) for b in second]
    low = 0 if (c, s) in setup.reserved else 1
    return [(n, 0) if holds == 0 else (0, n) for n in range(low, (n0, n1)[holds] + 1)]


def _staircases(cache: Cache, front: Front, key: tuple) -> dict:
    """Per working set of ``front`` (the run front :func:`_build` takes for ``key``): its points by backward
    ascending, the least activation up to each, and the point giving it; cached."""
    key = ("staircases", *key)
    if key not in cache.fronts:
        stairs = {}
        for w in np.unique(front.charged()):
            members = np.flatnonzero(front.charged() == w)
            members = members[np.argsort(front.backward[members], kind="stable")]
            least = np.minimum.accumulate(front.activation[members])
            newest = np.maximum.accumulate(np.where(front.activation[members] <= least, np.arange(len(members)), 0))
            stairs[float(w)] = (front.backward[members], least, members[newest])
        cache.fronts[key] = stairs
    return cache.fronts[key]


@dataclass
class _Catalogue:
    """Every composition cell ``(c, s)`` may hold, whatever the cap: its term (:func:`_term`), memory kept once,
    least value (term + least backward) and a lower bound on its stage's memory; and per composition built so
    far its least stage memory (nan until built), its front and its staircases (``stairs``)."""

    layers: np.ndarray  # [composition, kind]
    term: np.ndarray
    kept: np.ndarray
    least_value: np.ndarray
    bound_mb: np.ndarray
    least_mb: np.ndarray
    stairs: Staircases
    fronts: dict = field(default_factory=dict)


def _catalogue(setup: BalanceSetup, cache: Cache, c: int, s: int, holds, measure: str) -> _Catalogue:
    """Cell ``(c, s)``'s :class:`_Catalogue`, cached for every memory limit: what a cap only filters."""
    key = ("boundary", "catalogue", measure, c, s, holds)
    if key not in cache.stages:
        layers = np.array(_compositions(setup, c, s, holds), dtype=int).reshape(-1, 2)
        term_per, term_fixed = _term(setup, c, s, measure)
        term = layers @ term_per + term_fixed
        kept = layers @ _per_kind(setup, setup.param + setup.once)
        flight = floor_weights(setup, s)[0][c]
        bound_mb = fixed_memory(setup, s) + kept + flight * (layers @ _per_kind(setup, setup.activation))
        least_value = term + layers @ _per_kind(setup, setup.backward) + setup.fixed_backward[c, s]
        cache.stages[key] = _Catalogue(layers, term, kept, least_value, bound_mb, np.full(len(layers), np.nan),
                                       Staircases.empty(len(layers)))
    return cache.stages[key]


def _build(setup: BalanceSetup, cache: Cache, catalogue: _Catalogue, c: int, s: int, measure: str,
           compositions: np.ndarray) -> None:
    """Build the fronts of ``compositions`` (indices into ``catalogue``): their least stage memory, and their
    staircases added to the store."""
    if not compositions.size:
        return
    charge = c in charged_chunks(setup, s)
    flight, charged = (weights[c] for weights in floor_weights(setup, s))
    floor, fixed_backward = fixed_memory(setup, s), setup.fixed_backward[c, s]
    built = []
    for k in compositions.tolist():
        composition = tuple(int(n) for n in catalogue.layers[k])
        front = run_front(setup, composition, cache, working=charge, lightest=measure == "memory")
        catalogue.least_mb[k] = floor + catalogue.kept[k] + (flight * front.activation + charged
                                                             * front.charged()).min()
        catalogue.fronts[k] = front
        stairs = _staircases(cache, front, (composition, charge, measure == "memory"))
        built.append((k, {w: (backward + fixed_backward, least, point) for w, (backward, least, point)
                          in stairs.items()}))
    catalogue.stairs = catalogue.stairs.extended(len(catalogue.layers), built)


def _cell(setup: BalanceSetup, cache: Cache, c: int, s: int, holds, cap: float, measure: str) -> Cell:
    """The compositions of cell ``(c, s)`` that may stay under ``cap`` (``"time"``: their least forward +
    backward; ``"split"``: their least backward within ``cap / 2`` on a chunk but the last, their least ``L``
    term within ``cap`` on the last; ``"memory"``: their least memory on an otherwise empty stage), with their
    fronts and ``forward``, what they add to the stage's value beside the backward (:func:`_term`)."""
    cache.check_time()
    catalogue = _catalogue(setup, cache, c, s, holds, measure)
    limit = setup.memory_mb if measure != "memory" else cap
    room = cap / 2 if measure == "split" and c < setup.chunks - 1 else cap
    wanted = within(catalogue.bound_mb, limit)  # no point of a front past it fits: never built
    if measure != "memory":
        wanted &= within(catalogue.least_value, room)
    _build(setup, cache, catalogue, c, s, measure, np.flatnonzero(wanted & np.isnan(catalogue.least_mb)))
    chosen = np.flatnonzero(wanted & within(np.nan_to_num(catalogue.least_mb, nan=np.inf), limit))
    return Cell(catalogue.layers[chosen], catalogue.term[chosen], catalogue.kept[chosen], chosen, catalogue.stairs,
                [catalogue.fronts[k] for k in chosen.tolist()])


def stage_key(setup: BalanceSetup, *parts) -> tuple:
    """A key into the cache's stage entries: what the search keeps depends on the memory limit, which a cache
    outlives (:class:`~sappkit.balancer.exact.cells.Cache` serves every limit of one instance)."""
    return ("boundary", setup.memory_mb, *parts)


def cells_of(setup: BalanceSetup, cache: Cache, s: int, pattern: tuple, cap: float, measure: str) -> list[Cell]:
    """Stage ``s``'s cells under ``pattern`` and ``cap`` (:func:`_cell`), cached."""
    cells = []
    for c, holds in enumerate(pattern):
        key = stage_key(setup, "cell", measure, c, s, holds, round(cap, 9))
        if key not in cache.stages:
            cache.stages[key] = _cell(setup, cache, c, s, holds, cap, measure)
        cells.append(cache.stages[key])
    return cells
