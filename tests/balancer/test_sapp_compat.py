"""``sapp_compat=True`` reproduces SAPP's pipeline balancer's own counts where they differ from sappkit's.

Each expected number is SAPP's formula worked by hand on a small case (its
``compute_activation_nums`` and ``compute_activation_seq_nums`` for the
in-flight counts, its time and parameter sums for the DualPipeV tail).
"""

import pandas as pd
import pytest

from sappkit import InputError, balance, plan_from_offsets
from sappkit.balancer.sapp_compat import sapp_in_flight
from sappkit.balancer.setup import make_setup
from sappkit.pipeline.schedules import in_flight_counts

BODY = [dict(kind="block", role="body", count=8, param_mb=100, option="none", forward_time=1.0,
             backward_time=2.0, activation_mb=10.0)]
ENDS = [dict(kind="emb", role="head", count=1, param_mb=50, option="none", forward_time=0.5, backward_time=0.5,
             activation_mb=0.0),
        dict(kind="out", role="tail", count=1, param_mb=50, option="none", forward_time=3.0, backward_time=6.0,
             activation_mb=0.0)]


def test_1f1b_at_fewer_micro_batches_than_stages_charges_sapps_p_minus_s():
    # p = 4, m = 2, two layers a stage: SAPP charges 2 x 10 x (4 - s), sappkit 2 x 10 x min(4 - s, 2).
    common = dict(stages=4, micro_batches=2, memory_mb=1e4, offset=0, working_set=False)
    sapp = plan_from_offsets(pd.DataFrame(BODY), sapp_compat=True, **common)
    ours = plan_from_offsets(pd.DataFrame(BODY), **common)
    assert sapp.stages["memory_mb"].tolist() == [280.0, 260.0, 240.0, 220.0]
    assert ours.stages["memory_mb"].tolist() == [240.0, 240.0, 240.0, 220.0]


def test_at_m_below_p_sapps_counts_leave_no_plan_where_sappkits_fit():
    # 270 MiB: SAPP's stage s takes n layers with 100 n + 10 n (4 - s) <= 270, i.e. 1, 2, 2, 2 = 7 < 8 layers;
    # with the cap every stage takes 2 (120 n <= 270), 8 in all.
    sapp = balance(pd.DataFrame(BODY), stages=4, micro_batches=2, memory_mb=270, working_set=False,
                   sapp_compat=True)
    ours = balance(pd.DataFrame(BODY), stages=4, micro_batches=2, memory_mb=270, working_set=False)
    assert (sapp.status, sapp.memory_needed_mb, sapp.binding_stage) == ("infeasible", 280.0, 0)
    assert sapp.notes == ("sapp_compat: SAPP's pipeline balancer's counts (1F1B and one-chunk SeqPipe in flight "
                          "uncapped at m, DualPipeV's tail time on its last stage); the simulator runs the schedule "
                          "as it runs",)
    assert ours.status == "optimal" and ours.stages["layers"].tolist() == [2, 2, 2, 2]


@pytest.mark.parametrize("schedule, m, k, sapp, ours", [
    ("1f1b", 2, 1, [[4, 3, 2, 1]], [[2, 2, 2, 1]]),
    ("1f1b", 8, 1, [[4, 3, 2, 1]], [[4, 3, 2, 1]]),
    # one-chunk SeqPipe: p - s + k - 1 slices, uncapped; sappkit caps at m k = 2.
    ("seqpipe", 1, 2, [[5, 4, 3, 2]], [[2, 2, 2, 2]]),
])
def test_sapp_in_flight_drops_the_cap_only_where_sapp_has_none(schedule, m, k, sapp, ours):
    assert sapp_in_flight(schedule, 4, m, seq_split=k).tolist() == sapp
    assert in_flight_counts(schedule, 4, m, seq_split=k).tolist() == ours


@pytest.mark.parametrize("schedule, chunks, m, less", [("interleaved", 2, 4, False), ("interleaved", 3, 4, True),
                                                      ("dualpipev", 2, 8, False), ("seqpipe", 2, 4, False)])
def test_sapp_in_flight_is_sappkits_where_sapp_caps_too(schedule, chunks, m, less):
    assert (sapp_in_flight(schedule, 4, m, chunks, less).tolist()
            == in_flight_counts(schedule, 4, m, chunks, less).tolist())


def test_dualpipev_tail_time_on_the_last_stage_and_its_memory_on_stage_zero():
    table = pd.DataFrame(BODY + ENDS)
    common = dict(stages=2, micro_batches=4, chunks=2, schedule="dualpipev", memory_mb=1e4, working_set=False)
    sapp, ours = make_setup(table, sapp_compat=True, **common), make_setup(table, **common)
    # Head 0.5 on (0, 0) both ways; the tail's 3 forward on (1, 1) in SAPP's, on (1, 0) in sappkit's.
    assert sapp.fixed_forward.tolist() == [[0.5, 0.0], [0.0, 3.0]]
    assert ours.fixed_forward.tolist() == [[0.5, 0.0], [3.0, 0.0]]
    assert (sapp.tail.chunk, sapp.tail.stage) == (ours.tail.chunk, ours.tail.stage) == (1, 0)
    # Three layers on (0, 0) and (1, 0), one on (0, 1) and (1, 1): stage 1 runs 2 x 3 + 3 + 6 = 15 under SAPP's
    # charge, 6 under sappkit's; stage 0 holds 6 layers' 600 MiB plus head and tail, 700 MiB, both ways.
    plan = balance(table, sapp_compat=True, **common)
    assert plan.assignment["layers"].tolist() == [3, 1, 1, 3]
    assert plan.stages["time"].tolist() == [19.0, 15.0] and plan.stages["param_mb"].tolist() == [700.0, 200.0]


@pytest.mark.parametrize("arguments, message", [
    (dict(), "sapp_compat=True reproduces SAPP's pipeline balancer, which charges no working set: "
             "pass working_set=False with it"),
    (dict(working_set=False, schedule="zbv", chunks=2, micro_batches=8),
     "sapp_compat=True applies to SAPP's schedules '1f1b', 'interleaved', 'dualpipev', 'seqpipe'; "
     "got schedule 'zbv'"),
    (dict(working_set=False, objective="step"),
     "sapp_compat=True applies to the 'sapp' objective (SAPP's own time model); got objective 'step'"),
    (dict(working_set=False, sapp_compat="yes"), "sapp_compat must be a bool; got 'yes'"),
])
def test_sapp_compat_refuses_what_sapp_has_no_numbers_for(arguments, message):
    arguments = {"stages": 4, "micro_batches": 4, "sapp_compat": True, **arguments}
    with pytest.raises(InputError) as error:
        balance(pd.DataFrame(BODY), memory_mb=1e4, **arguments)
    assert str(error.value) == message
