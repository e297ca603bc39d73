"""Zero-bubble orders from PyTorch's rules, worked by hand on two stages; their invariants over a grid."""

import pytest

from sappkit.pipeline.zero_bubble import dualpipe, dualpipev_split, zb_interleaved, zb_interleaved_in_flight, zbv

NAMES = {"F": 0, "B": 1, "I": 2, "W": 3}


def ops(text: str) -> tuple:
    """``"F0.1 I1.0"`` -> ``((0, 0, 1), (2, 1, 0))``: phase, chunk, unit."""
    return tuple((NAMES[op[0]], int(op[1]), int(op[3:])) for op in text.split())


def test_two_stage_orders_worked_by_hand():
    # p = 2, m = 4. Interleaved zero bubble: stage 0 warms up with (v-1)·r + p-1 = 5 forwards; stage 1 with 4
    # and owes its first weight pass one step (its index) longer.
    assert zb_interleaved(2, 4, 2, 0) == ops("F0.0 F0.1 F1.0 F1.1 I1.0 W1.0 F0.2 I1.1 W1.1 F0.3 I0.0 W0.0 F1.2 "
                                             "I0.1 W0.1 F1.3 I1.2 W1.2 I1.3 W1.3 I0.2 W0.2 I0.3 W0.3")
    assert zb_interleaved(2, 4, 2, 1) == ops("F0.0 F0.1 F1.0 I1.0 F1.1 I1.1 W1.0 F0.2 I0.0 W1.1 F0.3 I0.1 W0.0 "
                                             "F1.2 I1.2 W0.1 F1.3 I1.3 W1.2 I0.2 W1.3 I0.3 W0.2 W0.3")
    # ZB-V: stage 0 takes 2p - 1 = 3 forwards of chunk 0 first; stage 1 (the V's tip) one, then pairs.
    assert zbv(2, 4, 0) == ops("F0.0 F0.1 F0.2 F1.0 I1.0 W1.0 F1.1 I1.1 W1.1 F0.3 I0.0 W0.0 F1.2 I1.2 W1.2 "
                               "I0.1 W0.1 F1.3 I1.3 W1.3 I0.2 W0.2 I0.3 W0.3")
    assert zbv(2, 4, 1) == ops("F0.0 F1.0 F0.1 F1.1 I1.0 W1.0 F0.2 I0.0 W0.0 F1.2 I1.1 W1.1 F0.3 I0.1 W0.1 "
                               "F1.3 I1.2 W1.2 I0.2 I1.3 I0.3 W0.2 W1.3 W0.3")
    # DualPipeV: overlapped pairs run forward then backward; stage 1 splits from the middle of step 6.
    assert dualpipev_split(2, 4, 0) == ops("F0.0 F0.1 F0.2 F1.0 I1.0 W1.0 F1.1 F0.3 B1.1 F1.2 B0.0 B1.2 F1.3 "
                                           "B0.1 B1.3 I0.2 W0.2 I0.3 W0.3")
    assert dualpipev_split(2, 4, 1) == ops("F0.0 F1.0 F0.1 F1.1 F0.2 B1.0 F1.2 B0.0 F0.3 B1.1 F1.3 B0.1 B1.2 "
                                           "B0.2 I1.3 I0.3 W1.3 W0.3")


def test_dualpipe_orders_worked_by_hand_from_the_eight_steps():
    # p = 4, m = 8: two half-ranks, 4 micro-batches a direction. Rank 0 (half-rank 0): step 1 F0 x 2, step 2
    # F0 F1, step 3 I1 W F1, step 4 F0 B1 F1 B0 (both pairs overlapped), step 5 B1 F1 B0, step 6 B1 then I0
    # (from half-way on, even half-rank: after B1), step 7 W I0, step 8 W.
    rank_0 = ops("F0.0 F0.1 F0.2 F1.0 I1.0 W1.0 F1.1 F0.3 B1.1 F1.2 B0.0 B1.2 F1.3 B0.1 B1.3 I0.2 W0.2 I0.3 W0.3")
    assert dualpipe(4, 8, 0) == (rank_0, frozenset({7, 9, 12}))
    # Rank 3 enters the reverse direction: rank 0's order with the chunks swapped.
    assert dualpipe(4, 8, 3) == (tuple((phase, 1 - chunk, unit) for phase, chunk, unit in rank_0),
                                 frozenset({7, 9, 12}))
    # Rank 1, a middle rank (half-rank 1): step 2 twice, step 4 twice with its first F0 B1 apart, step 6 turning
    # to input passes before B1 of its second round (odd half-rank), step 8 the two owed W.
    rank_1 = ops("F0.0 F1.0 F0.1 F1.1 F0.2 B1.0 F1.2 B0.0 F0.3 B1.1 F1.3 B0.1 B1.2 B0.2 I1.3 I0.3 W1.3 W0.3")
    assert dualpipe(4, 8, 1) == (rank_1, frozenset({6, 8, 10}))
    assert dualpipe(4, 8, 2)[0] == tuple((phase, 1 - chunk, unit) for phase, chunk, unit in rank_1)


GRID = ([("zb_interleaved", p, m, v) for p in (2, 3, 5) for v in (1, 2, 3) for m in range(1, 3 * p + 1)
         if m % max(1, m // p) == 0]
        + [("zbv", p, m, 2) for p in (2, 3, 5) for m in range(1, 3 * p + 1)]
        + [("dualpipev_split", p, m, 2) for p in (2, 3, 5) for m in range(2 * p, 3 * p + 1)]
        + [("dualpipe", p, m, 2) for p in (2, 4, 6) for m in range(2 * p, 3 * p + 1, 2)])
BUILD = {"zb_interleaved": lambda p, m, v, s: zb_interleaved(p, m, v, s), "zbv": lambda p, m, v, s: zbv(p, m, s),
         "dualpipev_split": lambda p, m, v, s: dualpipev_split(p, m, s),
         "dualpipe": lambda p, m, v, s: dualpipe(p, m, s)[0]}


@pytest.mark.parametrize("schedule, p, m, v", GRID)
def test_every_unit_runs_forward_then_its_backward_or_input_then_weight(schedule, p, m, v):
    for s in range(p):
        done = {}
        for phase, chunk, unit in BUILD[schedule](p, m, v, s):
            done.setdefault((chunk, unit), []).append(phase)
        units = m // 2 if schedule == "dualpipe" else m  # DualPipe's units count within a direction
        assert sorted(done) == [(c, u) for c in range(v) for u in range(units)]
        assert {tuple(phases) for phases in done.values()} <= {(0, 1), (0, 2, 3)}


def test_zb_interleaved_in_flight_counts_the_walk():
    # One round (m < 2p) holds m on the first chunks and min(m, p) on the last.
    assert zb_interleaved_in_flight(4, 6, 3).tolist() == [[6] * 4, [6] * 4, [4] * 4]
