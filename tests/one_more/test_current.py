"""Reading and checking current, the plan the analysis extends: ranges, kinds, modes, offload, dimensions."""

import pandas as pd
import pytest

import sappkit
from sappkit import InputError, RecomputeAnalysis, choose_recompute

from ..bundled import MODES


@pytest.fixture(scope="module")
def small_analysis(small):
    table, part = small
    return RecomputeAnalysis(table, part, memory_mb=1e5, modes=MODES)


def _refused(analysis, current, message):
    with pytest.raises(InputError) as error:
        analysis.alternatives(current)
    assert str(error.value) == message


def _frame(rows):
    return pd.DataFrame(rows, columns=["first", "count", "kind", "mode"])


def test_refuses_bad_ranges(small_analysis):
    _refused(small_analysis, _frame([(0, 0, "b", "off"), (0, 4, "b", "off")]),
             "current range 0 has first=0, count=0; a range needs whole numbers first >= 0 and count >= 1")
    _refused(small_analysis, _frame([(-1, 2, "b", "off")]),
             "current range 0 has first=-1, count=2; a range needs whole numbers first >= 0 and count >= 1")
    _refused(small_analysis, _frame([(0, 3, "b", "off"), (2, 2, "b", "full")]),
             "current ranges 0 and 1 overlap at layer 2; each body layer belongs to one range")
    _refused(small_analysis, _frame([(0, 3, "b", "off")]),
             "current leaves 1 body layer(s) out (3); every body layer of the partition needs a mode")
    _refused(small_analysis, _frame([(0, 5, "b", "off")]),
             "current range 0 covers layers 0-4; the partition has body layers 0-3")
    _refused(small_analysis, _frame([(0, 2, "b", "off"), (2, 2, "c", "off")]),
             "current range 1 gives layer 2 kind 'c'; the partition places kind 'b' there")
    _refused(small_analysis, pd.DataFrame({"first": [0], "count": [4], "kind": ["b"]}),
             "current is missing column(s) 'mode'; a plan's ranges frame needs first, count, kind, mode")
    _refused(small_analysis, [("0", 4)], "current must be a RecomputeChoice or a ranges DataFrame; got list")


def test_refuses_modes_not_priced_offload_and_no_choice(small, small_analysis):
    table, part = small
    two = RecomputeAnalysis.from_pricing(choose_recompute(table, part, memory_mb=1e5, modes=("off", "full")).pricing)
    _refused(two, _frame([(0, 2, "b", "selective"), (2, 2, "b", "off")]),
             "current range 0 (layers 0-1) runs mode 'selective', which the analysis does not price; its modes "
             "are 'off', 'full'")
    fronts = choose_recompute(table, part, memory_mb=1e5)
    _refused(small_analysis, fronts, "current range 0 (layers 0-3) runs mode None; the analysis extends a choice of "
                                     "a mode per layer (choose_recompute(..., modes=..., per_layer=True))")
    wrong = _frame([(0, 4, "b", "off")]).assign(option="full")
    _refused(small_analysis, wrong, "current range 0 (layers 0-3) runs option 'full' under mode 'off'; the analysis "
                                    "prices mode 'off' as option 'none'")
    offloaded = _frame([(0, 4, "b", "off")]).assign(offloaded_mb=12.5)
    _refused(small_analysis, offloaded, "current range 0 (layers 0-3) offloads 12.5 MB per micro-batch to the host; "
                                        "the analysis turns layers up on the device and does not price offload "
                                        "(choose without a host link)")
    link = choose_recompute(table, part, memory_mb=300, modes=MODES, per_layer=True,
                            link=sappkit.HostLink(mb_per_time=1e6))
    assert link.ranges["offloaded_mb"].tolist() == [40.0, 0.0, 0.0, 0.0]
    _refused(small_analysis, link, "current range 0 (layers 0-0) offloads 40.0 MB per micro-batch to the host; the "
                                   "analysis turns layers up on the device and does not price offload (choose "
                                   "without a host link)")
    none = choose_recompute(table, part, memory_mb=10, modes=MODES, per_layer=True)
    _refused(small_analysis, none, f"current made no choice ({none.reason}); there is no plan to extend")


def test_refuses_other_dimensions(small):
    table, part = small
    choice = choose_recompute(table, part, memory_mb=1e5, modes=MODES, per_layer=True)
    at_tp4 = RecomputeAnalysis.from_pricing(choice.pricing, dimensions={"dp": 2, "tp": 4})
    plan = at_tp4.alternatives(choice)[0]
    assert plan.dimensions == (("dp", 2), ("tp", 4))
    at_tp2 = RecomputeAnalysis.from_pricing(choice.pricing, dimensions=(("dp", 2), ("tp", 2)))
    _refused(at_tp2, plan, "current was priced at dimensions (('dp', 2), ('tp', 4)), this analysis at (('dp', 2), "
                           "('tp', 2)); alternatives keep the strategy: build a RecomputeAnalysis at those dimensions")
    assert at_tp4.alternatives(plan) and at_tp2.alternatives(choice)


def test_refuses_bad_dimensions(small):
    table, part = small
    with pytest.raises(InputError) as error:
        RecomputeAnalysis(table, part, memory_mb=1e5, modes=MODES, dimensions=[("tp", 0)])
    assert str(error.value) == ("dimensions[0] is ('tp', 0); expected a (name, degree) pair with a degree >= 1, "
                                "e.g. ('tp', 4)")
    for dimensions, message in [
            ([("tp", 4), ("tp", 8)], "dimensions names 'tp' twice; give each parallel dimension once"),
            ({"": 4}, "dimensions[0] is ('', 4); expected a (name, degree) pair with a degree >= 1, e.g. ('tp', 4)"),
            ([("tp", True)], "dimensions[0] is ('tp', True); expected a (name, degree) pair with a degree >= 1, e.g. "
                             "('tp', 4)"),
            (4, "dimensions must be (name, degree) pairs or a mapping name -> degree, e.g. {'tp': 4}; got 4"),
            ("tp=4", "dimensions must be (name, degree) pairs or a mapping name -> degree, e.g. {'tp': 4}; got "
                     "'tp=4'")]:
        with pytest.raises(InputError) as error:
            RecomputeAnalysis(table, part, memory_mb=1e5, modes=MODES, dimensions=dimensions)
        assert str(error.value) == message
