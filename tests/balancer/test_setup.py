"""The balancer takes the schedules PyTorch runs: memory is their orders' simulated peak, the step is simulated."""

import pandas as pd
import pytest

from sappkit import balance
from sappkit.balancer.setup import make_setup

ROWS = [dict(kind="block", role="body", count=12, param_mb=100, option=option, forward_time=1.0,
             backward_time=backward, activation_mb=activation)
        for option, backward, activation in (("none", 2.0, 40.0), ("full", 3.0, 4.0))]
TABLE = pd.DataFrame(ROWS + [dict(kind="embed", role="head", count=1, param_mb=50, option="none", forward_time=0.5,
                                  backward_time=1.0, activation_mb=5.0),
                             dict(kind="lm", role="tail", count=1, param_mb=80, option="none", forward_time=1.0,
                                  backward_time=2.0, activation_mb=20.0)])
NOTE = ("{}: memory = the peak over the step order's memory events, as simulated; time: the sapp "
        "objective's closed form stands in for the schedule, the step objective is its simulated step")


@pytest.mark.parametrize("schedule, chunks", [("gpipe", 1), ("looped_bfs", 2), ("zb_interleaved", 2), ("zbv", 2),
                                              ("dualpipev_split", 2)])
@pytest.mark.parametrize("objective", ["sapp", "step"])
def test_a_plan_for_the_schedules_pytorch_runs_fits_when_simulated(schedule, chunks, objective):
    plan = balance(TABLE, stages=3, micro_batches=6, chunks=chunks, schedule=schedule, memory_mb=1500,
                   objective=objective)
    assert plan.has_plan and plan.notes == (NOTE.format(schedule),)
    if objective == "sapp":
        assert plan.status == "optimal"
    else:
        assert plan.objective == plan.step_time == pytest.approx(plan.simulate().step_time, rel=1e-9)
    # The plan's memory is the simulated peak, stage by stage.
    simulated = plan.simulate().stages["memory_mb"]
    assert simulated.to_numpy() == pytest.approx(plan.stages["memory_mb"].to_numpy(), abs=1e-6)
    assert (plan.stages["memory_mb"] <= 1500).all()


def test_v_shapes_reserve_the_head_and_tail_cells_on_stage_zero_and_drop_the_seeds_terms():
    for schedule in ("zbv", "dualpipev_split"):
        setup = make_setup(TABLE, stages=3, micro_batches=6, chunks=2, schedule=schedule, memory_mb=1500)
        assert setup.reserved == {(0, 0), (1, 0)} and (setup.tail.chunk, setup.tail.stage) == (1, 0)
        assert not setup.overhead_active
    interleaved = make_setup(TABLE, stages=3, micro_batches=3, chunks=2, schedule="zb_interleaved", memory_mb=1500)
    assert not interleaved.bottleneck_split and not interleaved.overhead_active
