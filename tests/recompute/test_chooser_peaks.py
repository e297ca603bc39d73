"""The chooser's second FSDP peak, host offload and interleaved stages: brute force and rule-by-rule cases."""

import itertools
import math
from fractions import Fraction

import pandas as pd
import pytest

from sappkit.layers.table import LayerTable
from sappkit.recompute import events
from sappkit.recompute.chooser import HostLink, choose_recompute, sweep_recompute
from sappkit.recompute.partition import Partition
from sappkit.recompute.pricing import price

from .test_chooser_cases import (
    _row, _stage_layers, brute_force_stages, check_reported_memory, layer_memory, limit_between, one_stage,
    random_partition, random_table, working_set,
)


def test_two_peaks_equal_brute_force(rng):
    for _ in range(20):
        frame = random_table(rng, grads=True, kinds=int(rng.integers(1, 3)), tail=bool(rng.integers(2)))
        table, part = random_partition(rng, frame, stages=int(rng.integers(2, 4)))
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        limit = limit_between(table, part, offered, rng, fsdp=True)
        choice = choose_recompute(table, part, memory_mb=limit, fsdp_holds_grads=True)
        expected = brute_force_stages(table, part, limit, offered, fsdp=True)
        if any(math.isinf(t) for t in expected):
            assert not choice.chosen
            continue
        assert choice.stages["time"].tolist() == pytest.approx(expected, rel=1e-9)
        check_reported_memory(choice, fsdp=True)


def test_the_second_peak_binds():
    rows = [dict(kind="b", role="body", count=4, param_mb=0, option=o, forward_time=1.0, backward_time=b,
                 activation_mb=a, first_working_mb=100, grad_mb=5) for o, a, b in (("none", 30, 2.0),
                                                                                  ("full", 2, 3.0))]
    rows.append(dict(kind="t", role="tail", count=1, param_mb=0, option="none", forward_time=1, backward_time=1,
                     activation_mb=0))
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    table, part = LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=2, cells=cells)
    # Warm-up peak of both plain: 60 + 60 + 30 = 150. As a later backward ends: half of that kept, 60,
    # 10 of gradients and the first layer's working set, plain 30 + 100: 200.
    plain = choose_recompute(table, part, memory_mb=150, fsdp_holds_grads=False)
    assert plain.layer_options["option"].tolist()[:2] == ["none", "none"]
    for flag in (True, None):  # the table states grad_mb and m = 2 > 1: the default charges the peak too
        choice = choose_recompute(table, part, memory_mb=150, fsdp_holds_grads=flag)
        assert choice.layer_options["option"].tolist()[:2] == ["full", "full"]
        assert choice.stages.at[0, "backward_mb"] == 4 + 10 + 130 and choice.stages.at[0, "memory_mb"] == 144
        check_reported_memory(choice, fsdp=True)


def test_the_second_peak_needs_gradients_accumulated_over_micro_batches():
    # SAPP charges the peak as a later micro-batch's backward ends only with gradient accumulation (m > 1). At
    # m = 1 stage 0 holds one micro-batch: warm-up 30 + 30 + 30 = 90 plain, and no second peak by default.
    rows = [dict(kind="b", role="body", count=4, param_mb=0, option=o, forward_time=1.0, backward_time=b,
                 activation_mb=a, first_working_mb=100, grad_mb=5) for o, a, b in (("none", 30, 2.0),
                                                                                  ("full", 2, 3.0))]
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    table, part = LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=1, cells=cells)
    default = choose_recompute(table, part, memory_mb=90)
    assert default.layer_options["option"].tolist() == ["none"] * 4
    assert default.stages["memory_mb"].tolist() == [90.0, 90.0] and default.stages["backward_mb"].isna().all()
    # The flag still forces it: (n - 1)/n = 0 of the activations, 10 of gradients, the first layer's 30 + 100.
    forced = choose_recompute(table, part, memory_mb=140, fsdp_holds_grads=True)
    assert forced.stages["backward_mb"].tolist() == [140.0, 140.0]
    assert not choose_recompute(table, part, memory_mb=139, fsdp_holds_grads=True).chosen
    # Without grad_mb in the table FSDP holds no gradients: no second peak at m = 2 either.
    bare = LayerTable(pd.DataFrame(rows).assign(grad_mb=0.0))
    two = Partition(stages=2, micro_batches=2, cells=cells)
    assert choose_recompute(bare, two, memory_mb=1e3).stages["backward_mb"].isna().all()


def assert_equals_brute_force(rng, trials, chunks, tail):
    """On ``trials`` random tables and partitions (``chunks()`` chunks, a tail where ``tail()``), the chooser's
    stage times equal brute force's, and it reports what it holds."""
    for _ in range(trials):
        frame = random_table(rng, once=True, kinds=int(rng.integers(1, 3)), tail=tail())
        table, part = random_partition(rng, frame, stages=int(rng.integers(2, 4)), chunks=chunks(), most=2)
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        limit = limit_between(table, part, offered, rng)
        choice = choose_recompute(table, part, memory_mb=limit)
        expected = brute_force_stages(table, part, limit, offered)
        if any(math.isinf(t) for t in expected):
            assert not choice.chosen
            continue
        assert choice.stages["time"].tolist() == pytest.approx(expected, rel=1e-9)
        check_reported_memory(choice)


def test_interleaved_equals_brute_force(rng):
    assert_equals_brute_force(rng, 12, chunks=lambda: 2, tail=lambda: True)


def test_interleaved_two_peaks_fit_and_are_never_better_than_brute_force(rng):
    for _ in range(10):
        frame = random_table(rng, grads=True)
        table, part = random_partition(rng, frame, stages=2, chunks=2, most=2)
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        limit = limit_between(table, part, offered, rng, fsdp=True)
        choice = choose_recompute(table, part, memory_mb=limit, fsdp_holds_grads=True)
        expected = brute_force_stages(table, part, limit, offered, fsdp=True)
        if choice.chosen:
            check_reported_memory(choice, fsdp=True)
            assert all(t >= e - 1e-9 for t, e in zip(choice.stages["time"], expected))


def test_interleaved_warm_up_peak_is_the_memory_events():
    rows = [dict(kind="b", role="body", count=6, param_mb=0, option=o, forward_time=1.0, backward_time=b,
                 activation_mb=a) for o, a, b in (("none", 10, 2.0), ("full", 1, 3.0))]
    cells = pd.DataFrame({"chunk": [0, 0, 1, 1], "stage": [0, 1, 0, 1], "kind": "b", "layers": [1, 1, 3, 1]})
    part = Partition(stages=2, micro_batches=5, chunks=2, cells=cells, configured="none")
    table = LayerTable(pd.DataFrame(rows))
    # m = 5 is no multiple of p = 2: the first group runs 3 micro-batches through both chunks, so stage 0's
    # first chunk-1 backward holds 3 of each chunk, one chunk-1 micro-batch more than in flight (3 and 2),
    # plus the working set of the cell's last layer (one plain micro-batch, 10 MB). Every layer plain:
    # 3 x 10 + 3 x 30 + 10 = 130 = in flight 90 + 30 + 10. Stage 1: 2 x 10 + 2 x 10 + 10 = 50 = 30 + 10 + 10.
    plain = price(table, part, memory_mb=10_000).evaluate(["none"] * 6)
    assert plain[["memory_mb", "activation_mb", "overhead_mb", "working_mb"]].values.tolist() == [
        [130.0, 90.0, 30.0, 10.0], [50.0, 30.0, 10.0, 10.0]]
    # Every layer full: 3 x 1 + 3 x 3 + 10 = 22 and 2 + 2 + 10 = 14.
    choice = choose_recompute(table, part, memory_mb=10_000, modes=("full",))
    assert choice.stages["memory_mb"].tolist() == [22.0, 14.0]
    assert choice.stages["overhead_mb"].tolist() == [3.0, 1.0]
    check_reported_memory(choice)


def _offload_case():
    """Stage 0: three plain-or-full layers at 2 micro-batches, the last ending warm-up."""
    rows = [dict(kind="b", role="body", count=4, param_mb=0, option=o, forward_time=1.0, backward_time=b,
                 activation_mb=a) for o, a, b in (("none", 10, 2.0), ("full", 1, 3.0))]
    rows.append(dict(kind="t", role="tail", count=1, param_mb=0, option="none", forward_time=1, backward_time=1,
                     activation_mb=0))
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": [3, 1]})
    return LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=2, cells=cells)


def test_offload_holds_what_the_backward_has_not_released_in_transit():
    table, part = _offload_case()
    fast = HostLink(100.0)
    # At 40 MB: layers 0 and 1 move all 10 MB; their copies back (20 MB) exceed what layer 2 releases (10),
    # so 10 MB stay in transit: 0 + 0 + 20 + 10 (working set) + 10 = 40; every layer plain, 9 time units.
    choice = choose_recompute(table, part, memory_mb=40, link=fast)
    assert choice.layer_options["offloaded_mb"].tolist() == [10.0, 10.0, 0.0, 0.0]
    assert choice.stages.at[0, "transit_mb"] == 10 and choice.stages.at[0, "memory_mb"] == 40
    assert choice.stages.at[0, "time"] == 9.0
    # At 39 MB the transit does not fit: layer 0 offloads alone and layer 2 plain releases enough (10 MB),
    # layer 1 fully recomputed: 0 + 2 + 20 + 10 = 32 MB, 10 time units, nothing in transit.
    choice = choose_recompute(table, part, memory_mb=39, link=fast)
    assert choice.layer_options["option"].tolist()[:3] == ["none", "full", "none"]
    assert choice.layer_options["offloaded_mb"].tolist()[:3] == [10.0, 0.0, 0.0]
    assert choice.stages.at[0, "transit_mb"] == 0 and choice.stages.at[0, "time"] == 10.0
    # Without the link the best at 39 MB recomputes two layers: 11 time units.
    assert choose_recompute(table, part, memory_mb=39).stages.at[0, "time"] == 11.0
    assert choice.ranges["offloaded_mb"].tolist() == [10.0, 0.0, 0.0]
    assert choice.to_records()[0] == {"first": 0, "count": 1, "kind": "b", "option": "none", "offloaded_mb": 10.0}
    check_reported_memory(choice, offloaded={0: 10}, transit={0: 0})


def test_offload_moves_only_what_the_copy_window_allows():
    table, part = _offload_case()
    # 4 MB per time unit: layer 0 has 2 time units of forward after it, so it moves 8 of its 10 MB; the
    # window is then spent and layer 1 moves nothing.
    choice = choose_recompute(table, part, memory_mb=36, link=HostLink(4.0))
    assert choice.layer_options["offloaded_mb"].tolist() == [8.0, 0.0, 0.0, 0.0]
    # Half the window moves 4 MB: worth it at 44 MB (12 + 2 + 20 + 10), where keeping everything needs two
    # layers fully recomputed.
    half = choose_recompute(table, part, memory_mb=44, link=HostLink(4.0, overlap=0.5))
    assert half.layer_options["offloaded_mb"].tolist()[0] == 4.0
    assert half.stages.at[0, "time"] == 10.0


def test_offload_costing_time_moves_no_more_than_needed():
    table, part = _offload_case()
    link = HostLink(100.0, time_per_mb=0.01)
    choice = choose_recompute(table, part, memory_mb=45, link=link)
    # Moving all 20 MB leaves 5 MB unused: layer 1 keeps 2.5 MB of its 10 per micro-batch instead.
    assert choice.layer_options["offloaded_mb"].tolist()[:2] == [10.0, 7.5]
    assert choice.stages.at[0, "memory_mb"] == 45
    assert choice.stages.at[0, "time"] == pytest.approx(9 + 2 * 17.5 * 0.01)
    check_reported_memory(choice, offloaded={0: 10, 1: 7.5}, transit={0: 10}, copy_time={0: 2 * 17.5 * 0.01})


def _offload_shares(table, layers, ending, link):
    forward = [_row(table, layer.kind, "none")["forward_time"] for layer in layers]
    shares, room = [], math.inf
    for i in range(ending):
        room = min(room, link.overlap * sum(forward[i + 1:]))
        share = min(_row(table, layers[i].kind, "none")["activation_mb"], room * link.mb_per_time)
        room = max(0.0, room - share / link.mb_per_time)
        if share <= 0:
            break
        shares.append(share)
    return shares


def _brute_force_offload(table, part, limit, offered, link):
    """Per stage the least time over every offloaded prefix and every option of the rest (1 MB buckets)."""
    best = []
    tail = table.tail is not None
    for s, layers in enumerate(_stage_layers(part)):
        ending = len(layers) - 1 if layers and not (s == part.stages - 1 and tail) else len(layers)
        shares = _offload_shares(table, layers, ending, link)
        least = math.inf
        for count in range(len(shares) + 1):
            moved = {layer.layer: Fraction(share) for layer, share in zip(layers, shares[:count])}
            for picks in itertools.product(*(offered[layer.kind] for layer in layers[count:])):
                options = {layer.layer: "none" for layer in layers[:count]}
                options |= {layer.layer: pick for layer, pick in zip(layers[count:], picks)}
                n = layers[0].in_flight
                kept = [layer_memory(table, layer.kind, options[layer.layer], n,
                                     offloaded=moved.get(layer.layer, Fraction(0))) for layer in layers]
                released = [sum(kept[j:]) / n for j in range(len(layers) + 1)]
                back = [moved[layers[i].layer] + (moved[layers[i + 1].layer] if i + 1 < count else 0)
                        for i in range(count)]
                returns = all(b <= released[min(i + 2, len(layers))] for i, b in enumerate(back))
                transit = 0 if returns or not count else max(moved.values())
                charged = list(kept)
                if ending < len(layers):
                    charged[-1] += working_set(table, layers[-1].kind, options[layers[-1].layer])
                warm, _, time = one_stage(table, part, s, layers, options, offloaded=moved)
                fixed = warm - sum(charged)
                if sum(math.ceil(c) for c in charged) + math.ceil(transit) <= math.floor(limit - fixed):
                    least = min(least, time)
        best.append(least)
    return best


@pytest.mark.parametrize("mb_per_time", [3.0, 25.0, 1000.0])
def test_offload_equals_brute_force(rng, mb_per_time):
    link = HostLink(mb_per_time, overlap=float(rng.choice([0.5, 1.0])))
    for _ in range(12):
        frame = random_table(rng, once=True)
        table, part = random_partition(rng, frame, stages=int(rng.integers(2, 4)), most=4)
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        limit = limit_between(table, part, offered, rng) - int(rng.integers(0, 40))
        choice = choose_recompute(table, part, memory_mb=limit, link=link)
        expected = _brute_force_offload(table, part, limit, offered, link)
        if any(math.isinf(t) for t in expected):
            assert not choice.chosen
            continue
        assert choice.chosen, choice.reason
        assert choice.stages["time"].tolist() == pytest.approx(expected, rel=1e-9)
        offloaded = dict(zip(choice.layer_options["layer"], choice.layer_options["offloaded_mb"]))
        check_reported_memory(choice, offloaded=offloaded, transit=dict(enumerate(choice.stages["transit_mb"])))


def test_offload_per_layer_reports_mode_off_and_sweeps(rng):
    table, part = _offload_case()
    choice = choose_recompute(table, part, memory_mb=40, link=HostLink(100.0), modes=("off", "full"),
                              per_layer=True)
    assert choice.layer_options["mode"].tolist() == ["off", "off", "off", "off"]
    assert choice.trainer_plan() == ("off", {})
    curve = sweep_recompute(table, part, memory_mb=[10, 39, 40, 60], link=HostLink(100.0))
    # Stage 1 runs its one layer plain (3 time units) and the tail (2) throughout; stage 0 as above, and at
    # 60 MB it still needs the offload (70 MB plain).
    assert curve["feasible"].tolist() == [False, True, True, True]
    assert curve["time"].tolist()[1:] == [10.0 + 5.0, 9.0 + 5.0, 9.0 + 5.0]


def test_interleaved_memory_events_equal_brute_force(rng):
    # Two and three chunks, m from p to 2p (multiples of p and not), heads, tails, working sets.
    assert_equals_brute_force(rng, 16, chunks=lambda: int(rng.integers(2, 4)), tail=lambda: bool(rng.integers(2)))


def test_interleaved_knapsacks_per_event_fit_and_are_never_better_than_brute_force(rng, monkeypatch):
    # Without enumerating small stages: one knapsack per event and their surrogates.
    monkeypatch.setattr(events, "_ENUMERATION_BUDGET", 0)
    for _ in range(16):
        frame = random_table(rng, once=True, kinds=int(rng.integers(1, 3)), tail=bool(rng.integers(2)))
        table, part = random_partition(rng, frame, stages=int(rng.integers(2, 4)), chunks=int(rng.integers(2, 4)),
                                       most=2)
        offered = {kind: table.front(kind) for kind in table.body_kinds}
        limit = limit_between(table, part, offered, rng)
        choice = choose_recompute(table, part, memory_mb=limit)
        expected = brute_force_stages(table, part, limit, offered)
        if choice.chosen:
            check_reported_memory(choice)
            assert all(t >= e - 1e-9 for t, e in zip(choice.stages["time"], expected))
