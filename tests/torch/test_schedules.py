"""sappkit's step orders against the action lists torch.distributed.pipelining generates, and simulate on them."""

import re

import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, simulate
from sappkit.pipeline.orders import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, stage_orders
from sappkit.torch import schedule_orders
from sappkit.torch.schedules import PYTORCH_SCHEDULES

#: Every schedule both know, with the chunk counts to try.
SHARED = {"1f1b": (1,), "gpipe": (1,), "interleaved": (2, 3), "looped_bfs": (1, 2, 3), "zb_interleaved": (1, 2, 3),
          "zbv": (2,), "dualpipev_split": (2,)}
GRID = [(name, p, m, v) for name, chunks in SHARED.items() for v in chunks for p in range(2, 7)
        for m in range(1, 4 * p + 1)]


def runs_in_both(name, p, m, v) -> bool:
    """Shapes both run: PyTorch's 1F1B needs m >= p; sappkit's interleaved m >= p; DualPipeV 2p in both;
    interleaved ones in PyTorch need equal rounds (sappkit's zero-bubble interleaved too)."""
    if name == "dualpipev_split":
        return m >= 2 * p
    if name in ("1f1b", "interleaved"):
        return m >= p and (name == "1f1b" or m % max(1, m // p) == 0)
    return name != "zb_interleaved" or m % max(1, m // p) == 0


def costs(p, v, rng):
    frame = pd.DataFrame(dict(stage=np.tile(np.arange(p), v), chunk=np.repeat(np.arange(v), p)))
    return frame.assign(forward_time=rng.uniform(0.5, 2, len(frame)), backward_time=rng.uniform(1, 4, len(frame)),
                        activation_mb=rng.uniform(1, 10, len(frame)))


@pytest.mark.parametrize("name, p, m, v", [shape for shape in GRID if runs_in_both(*shape)])
def test_sappkits_orders_equal_pytorchs(name, p, m, v):
    ours, theirs = stage_orders(name, p, m, v), schedule_orders(name, p, m, v)
    if name == "1f1b":
        # Schedule1F1B.pipeline_order (what its visualiser draws) numbers the last stage's forwards from 1; its
        # runtime (_step_microbatches) runs micro-batches 0..m-1 on every stage, as sappkit does.
        theirs = (*theirs[:-1], tuple((ph, c, u - (ph == FORWARD)) for ph, c, u in theirs[-1]))
    if name == "interleaved" and m >= 2 * p and m % p:
        # PyTorch splits m into equal rounds; sappkit, as SAPP, gives the first group the remainder.
        assert ours != theirs
        return
    assert ours == theirs


@pytest.mark.parametrize("p, m", [(p, m) for p in range(2, 7) for m in range(2 * p, 4 * p + 1)])
def test_dualpipev_is_pytorchs_with_each_backward_whole(p, m):
    fused = tuple(tuple((BACKWARD if phase == BACKWARD_INPUT else phase, c, u) for phase, c, u in ops
                        if phase != BACKWARD_WEIGHT) for ops in schedule_orders("dualpipev_split", p, m, 2))
    assert stage_orders("dualpipev", p, m, 2) == fused


@pytest.mark.parametrize("name, p, m, v", [shape for shape in GRID[::3] if runs_in_both(*shape)])
def test_simulate_runs_every_order_pytorch_generates(rng, name, p, m, v):
    orders = schedule_orders(name, p, m, v)
    if name == "1f1b":  # its IR's last stage skips micro-batch 0 (see above): that stage runs as its runtime does
        orders = orders[:-1] + (stage_orders("1f1b", p, m)[-1],)
    sim = simulate(costs(p, v, rng), schedule=name, micro_batches=m, orders=orders)
    phases = sim.timeline.groupby("phase").size().to_dict()
    assert phases.get("forward") == p * v * m
    assert phases.get("backward", 0) + phases.get("backward_input", 0) == p * v * m
    assert phases.get("backward_weight", 0) == phases.get("backward_input", 0)


def test_overlapped_forward_backward_pairs_run_forward_then_backward():
    orders = schedule_orders("dualpipev_split", 2, 4, 2)
    # PyTorch's stage 0 runs (0F3;3B1)OVERLAP_F_B eighth: sappkit's forward of chunk 0 then backward of chunk 1.
    assert orders[0][7:9] == ((FORWARD, 0, 3), (BACKWARD, 1, 1))
    sim = simulate(costs(2, 2, np.random.default_rng(0)), schedule="dualpipev_split", micro_batches=4, orders=orders)
    pair = sim.timeline[sim.timeline["stage"] == 0].iloc[7:9]
    assert pair["end"].iloc[0] <= pair["start"].iloc[1]


@pytest.mark.parametrize("args, message", [
    (("pipedream", 4, 8), "name must be a schedule PyTorch runs, one of '1f1b', 'gpipe', 'interleaved', "
                          "'looped_bfs', 'zb_interleaved', 'zbv', 'dualpipev_split'; got 'pipedream'"),
    (("1f1b", 4, 8, 2), "chunks must be 1 for Schedule1F1B; got 2"),
    (("zbv", 4, 8, 3), "chunks must be 2 for ScheduleZBVZeroBubble; got 3"),
    (("zb_interleaved", 4, 9, 2), "PyTorch's ScheduleInterleavedZeroBubble refuses stages=4, micro_batches=9, "
                                  "chunks=2: Zero bubble requires the number of microbatches to be a multiple of "
                                  "the number of rounds (2), but got 9."),
    (("gpipe", 1, 8), "stages must be an int >= 2; got 1 (a pipeline needs at least two stages)"),
])
def test_bad_requests_are_refused(args, message):
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        schedule_orders(*args)


def test_every_pytorch_schedule_has_a_sappkit_name():
    assert set(PYTORCH_SCHEDULES) == set(SHARED)
