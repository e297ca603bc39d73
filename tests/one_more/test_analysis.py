"""One more recomputed layer: brute force, empty results, refused settings, pricing once, frames, plot, CLI."""

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

import sappkit
import sappkit.one_more.analysis as alt
from sappkit import InputError, LayerTable, Partition, RecomputeAnalysis, alternatives, choose_recompute
from sappkit.one_more.result import ALTERNATIVE_COLUMNS, STAGE_COLUMNS, layer_ranges
from sappkit.pipeline.orders import stage_orders
from sappkit.recompute.choice import build_choice

MODES = ("off", "selective", "full")
OPTION_OF = {"off": "none", "selective": "selective", "full": "full"}


# --- small random models -----------------------------------------------------------------------------------------

def _kind_rows(rng, kind, count, module="model"):
    """none / selective / full rows: less memory costs more time; random extras for the peaks."""
    act = rng.integers(20, 60)
    extras = dict(memory_once_mb=float(rng.choice([0, 3])), working_mb=float(rng.integers(0, 20)),
                  first_working_mb=float(rng.integers(0, 30)), grad_mb=float(rng.choice([0, 7])))
    options = (("none", act, 2.0), ("selective", act * rng.uniform(0.2, 0.6), 2.0 + rng.uniform(0.1, 0.5)),
               ("full", rng.integers(1, 6), 3.0))
    return [dict(kind=kind, role="body", count=count, param_mb=100.0, option=o, forward_time=1.0,
                 backward_time=float(b), activation_mb=float(a), module=module, **extras) for o, a, b in options]


def _model(rng, *, kinds=1, tail=True, counts=None, module=None):
    counts = counts or [int(rng.integers(2, 6)) for _ in range(kinds)]
    rows = [dict(kind="embed", role="head", count=1, param_mb=50.0, option="none", forward_time=1.0,
                 backward_time=2.0, activation_mb=5.0)]
    for index, count in enumerate(counts):
        rows += _kind_rows(rng, f"k{index}", count, module=(module or ["model"] * kinds)[index])
    if tail:
        rows.append(dict(kind="head_out", role="tail", count=1, param_mb=60.0, option="none", forward_time=1.0,
                         backward_time=2.0, activation_mb=8.0, working_mb=4.0))
    return LayerTable(pd.DataFrame(rows), const_mb=10.0)


def _partition(rng, table, *, stages, chunks=1, micro_batches=None, less_memory=False):
    """The body layers in model order over the cells, at least one per cell."""
    cells = stages * chunks
    total = table.body_layers
    cuts = np.sort(rng.choice(np.arange(1, total), size=cells - 1, replace=False))
    per_cell = np.diff(np.concatenate(([0], cuts, [total])))
    order = [(c, s) for c in range(chunks) for s in range(stages)]
    kinds = [kind for kind in table.body_kinds for _ in range(table.count(kind))]
    rows, at = [], 0
    for (chunk, stage), count in zip(order, per_cell):
        rows += [dict(chunk=chunk, stage=stage, kind=kind, layers=1) for kind in kinds[at:at + count]]
        at += count
    return Partition(stages=stages, chunks=chunks, micro_batches=micro_batches or stages + int(rng.integers(0, 3)),
                     cells=pd.DataFrame(rows), less_memory=less_memory)


# --- an independent evaluation of a plan (docs/design.md "One memory model", chooser terms; more chunks: stepped) -

def _oracle(table, partition, *, fsdp):
    """A function: modes per body layer -> per stage (peak memory, body time), from first principles."""
    costs = {(kind, option): row.to_dict() for kind in table.body_kinds for option, row in table.rows(kind).iterrows()}
    head, tail = (None if row is None else row.to_dict() for row in (table.head, table.tail))
    body = partition.body
    p, v, m = partition.stages, partition.chunks, partition.micro_batches
    layers = list(zip(body["layer"], body["chunk"], body["stage"], body["kind"], body["in_flight"]))
    ends, firsts = {}, {}
    for layer, chunk, stage, _, _ in layers:
        if chunk == v - 1 and not (tail is not None and stage == p - 1):
            ends[stage] = layer
        firsts.setdefault(stage, layer)

    def evaluate(modes):
        warm, back, time = np.full(p, table.const_mb), np.full(p, table.const_mb), np.zeros(p)
        per_batch = np.zeros((v, p))
        for layer, chunk, s, kind, n in layers:
            option = OPTION_OF[modes[layer]]
            row, plain = costs[kind, option], costs[kind, "none"]
            kept = row["activation_mb"] * n + row["memory_once_mb"]
            run = plain if option == "full" else row
            warm[s] += row["param_mb"] + kept
            back[s] += row["param_mb"] + kept * (n - 1) / n + row["grad_mb"]
            if ends.get(s) == layer:
                warm[s] += run["activation_mb"] + run["memory_once_mb"] + row["working_mb"]
            if fsdp and firsts[s] == layer:
                back[s] += run["activation_mb"] + run["memory_once_mb"] + row["first_working_mb"]
            time[s] += row["forward_time"] + row["backward_time"]
            per_batch[chunk, s] += plain["activation_mb"]
        for row, (c, s) in ((head, (0, 0)), (tail, (v - 1, p - 1))):
            if row is None:
                continue
            n = partition.in_flight_counts[c, s]
            kept = row["activation_mb"] * n + row["memory_once_mb"]
            working = row["activation_mb"] + row["memory_once_mb"] + row["working_mb"] if row is tail else 0.0
            warm[s] += row["param_mb"] + kept + working
            back[s] += row["param_mb"] + kept * (n - 1) / n + row["grad_mb"]
            per_batch[c, s] += row["activation_mb"]
        if v == 2:  # SAPP's steady overhead stays in the second peak
            overhead = np.maximum(0.0, (m - p - np.arange(p)) * np.abs(per_batch[1] - per_batch[0]))
            back = back + overhead
        if v > 1:
            warm = _stepped_warm_up(modes)
        return (np.maximum(warm, back) if fsdp else warm), time

    def _stepped_warm_up(modes):
        # More chunks: the highest memory stepping each stage's order, a forward adding its cell's activation,
        # a backward holding its cell's last layer's working set (the tail's on its cell) while it runs.
        fixed, activation, working = np.full(p, table.const_mb), np.zeros((v, p)), np.zeros((v, p))
        for layer, chunk, s, kind, _ in layers:
            option = OPTION_OF[modes[layer]]
            row = costs[kind, option]
            run = costs[kind, "none"] if option == "full" else row
            fixed[s] += row["param_mb"] + row["memory_once_mb"]
            activation[chunk, s] += row["activation_mb"]
            working[chunk, s] = run["activation_mb"] + run["memory_once_mb"] + row["working_mb"]  # the cell's last
        for row, (c, s) in ((head, (0, 0)), (tail, (v - 1, p - 1))):
            if row is not None:
                fixed[s] += row["param_mb"] + row["memory_once_mb"]
                activation[c, s] += row["activation_mb"]
        if tail is not None:
            working[v - 1, p - 1] = tail["activation_mb"] + tail["memory_once_mb"] + tail["working_mb"]
        peaks = np.zeros(p)
        for s, ops in enumerate(stage_orders(partition.schedule, p, m, v, partition.less_memory)):
            held = 0.0
            for phase, chunk, _ in ops:
                held += activation[chunk, s] if phase == 0 else 0.0
                peaks[s] = max(peaks[s], held + (working[chunk, s] if phase == 1 else 0.0))
                held -= activation[chunk, s] if phase == 1 else 0.0
        return fixed + peaks

    return evaluate


def _key(body, modes, stages):
    return tuple(frozenset(Counter((k, modes[i]) for i, k in enumerate(body["kind"]) if body["stage"][i] == s).items())
                 for s in range(stages))


def _baseline_time(evaluate, count, limit):
    """Per stage, what time saved is measured against: the unconfigured partition (every layer off) where it
    fits, else the fastest single mode that fits, else every layer full."""
    fitting = []
    for mode in MODES:
        memory, time = evaluate([mode] * count)
        if (memory <= limit).all():
            fitting.append((time.sum(), mode, time))
    return min(fitting, key=lambda item: item[0])[2] if fitting else evaluate(["full"] * count)[1]


def _brute_force(partition, evaluate, current, limit):
    """Every single layer turned up to full that fits, grouped into distinct plans: those that free memory on the
    layer's stage, and how many free none."""
    body = partition.body
    base = _baseline_time(evaluate, len(body), limit)
    before, _ = evaluate(current)
    classes, freeing_none = [], []
    for layer in range(len(body)):
        if current[layer] == "full":
            continue
        modes = list(current)
        modes[layer] = "full"
        memory, time = evaluate(modes)
        if (memory > limit).any():
            continue
        plan = (_key(body, modes, partition.stages), memory, base - time)
        stage = body["stage"][layer]
        found = classes if before[stage] - memory[stage] > 1e-9 else freeing_none
        if not any(plan[0] == other[0] and np.allclose(plan[1], other[1]) and np.allclose(plan[2], other[2])
                   for other in found):
            found.append(plan)
    return classes, len(freeing_none)


def _case(rng, *, fsdp, chunks):
    stages, kinds = int(rng.integers(2, 4)), int(rng.integers(1, 3))
    counts = [int(rng.integers(2, 6)) for _ in range(kinds)]
    counts[-1] += max(0, stages * chunks + 1 - sum(counts))
    table = _model(rng, kinds=kinds, counts=counts, tail=bool(rng.integers(0, 2)))
    partition = _partition(rng, table, stages=stages, chunks=chunks,
                           micro_batches=stages + int(rng.integers(0, 3)),
                           less_memory=bool(chunks > 1 and rng.integers(0, 2)))
    current = [MODES[i] for i in rng.integers(0, 3, size=partition.layer_count)]
    evaluate = _oracle(table, partition, fsdp=fsdp)
    memory, _ = evaluate(current)
    limit = float(memory.max() + rng.choice([0.0, rng.uniform(0, 40)]))
    return table, partition, current, limit, evaluate


def _ranges(partition, modes):
    return pd.DataFrame({"first": np.arange(len(modes)), "count": 1, "kind": partition.body["kind"], "mode": modes})


def _groups(pricing):
    return [g for groups in pricing.groups for g in groups]


@pytest.mark.parametrize("seed", range(24))
def test_alternatives_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    fsdp, chunks = bool(seed % 2), 1 + (seed % 3 == 2)
    table, partition, current, limit, evaluate = _case(rng, fsdp=fsdp, chunks=chunks)
    analysis = RecomputeAnalysis(table, partition, memory_mb=limit, modes=MODES, fsdp_holds_grads=fsdp)
    found = alternatives(_ranges(partition, current), analysis=analysis)
    expected, left_out = _brute_force(partition, evaluate, current, limit)
    body = partition.body
    before, _ = evaluate(current)
    base = _baseline_time(evaluate, len(body), limit)
    assert len(found.plans) == len(expected) == len(found.frame)
    assert found.left_out == left_out
    matched = []
    for plan, row in zip(found.plans, found.frame.itertuples()):
        modes = plan.layer_options["mode"].tolist()
        memory, time = evaluate(modes)
        np.testing.assert_allclose(plan.stages["memory_mb"], memory, rtol=1e-12)
        np.testing.assert_allclose(plan.stages["time_saved"], base - time, rtol=1e-12)
        key = _key(body, modes, partition.stages)
        hits = [i for i, (k, m, saved) in enumerate(expected)
                if k == key and np.allclose(m, memory) and np.allclose(saved, base - time)]
        assert len(hits) == 1
        matched.append(hits[0])
        changed = [i for i in range(len(modes)) if modes[i] != current[i]]
        assert row.layers_changed == layer_ranges(changed)
        assert Counter(modes)["full"] == Counter(current)["full"] + 1
        assert row.memory_freed_mb == pytest.approx(before[row.stage] - memory[row.stage])
        assert row.memory_freed_mb > 0
        assert row.memory_mb == pytest.approx(memory.max())
        _check_canonical(analysis.pricing, plan, current)
    assert sorted(matched) == list(range(len(expected)))


def _check_canonical(pricing, plan, current):
    """The plan's frames are the chooser's own, and the group it turned up runs slower modes first."""
    reference = build_choice(pricing, plan.layer_options["option"].tolist())
    for name in ("ranges", "layer_options", "stages"):
        pd.testing.assert_frame_equal(getattr(plan, name), getattr(reference, name), rtol=1e-12)
    modes = plan.layer_options["mode"].tolist()
    for group in _groups(pricing):
        now = [modes[i] for i in group.layers]
        if now != [current[i] for i in group.layers]:
            time = {mode: pricing.cost(group.kind, OPTION_OF[mode])["time"] for mode in MODES}
            assert now == sorted(now, key=lambda mode: -time[mode])


def test_chooser_choice_walks_a_path_pricing_once(monkeypatch):
    calls = []
    real = alt.price
    monkeypatch.setattr(alt, "price", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(7)
    table = _model(rng, kinds=2, counts=[6, 30])
    partition = _partition(rng, table, stages=6, micro_batches=8)
    full, _ = _oracle(table, partition, fsdp=False)(["full"] * partition.layer_count)
    plain, _ = _oracle(table, partition, fsdp=False)(["off"] * partition.layer_count)
    limit = float(full.max() + 0.6 * (plain.max() - full.max()))
    analysis = RecomputeAnalysis(table, partition, memory_mb=limit, modes=MODES)
    choice = choose_recompute(table, partition, memory_mb=limit, modes=MODES, per_layer=True)
    pd.testing.assert_frame_equal(analysis.pricing.stages, choice.pricing.stages)
    seen, current = len(analysis.alternatives(choice)), choice
    while seen < 200:
        found = alternatives(current, analysis=analysis)
        assert found.plans, f"the walk ran out of plans after {seen} alternatives"
        seen += len(found.plans)
        current = found.plans[0]
        assert current.trainer_plan()[0] in MODES
    assert len(calls) == 1
    found = alternatives(choice)
    assert len(calls) == 1 and found.plans[0].pricing is choice.pricing


def test_frame_columns_and_companion_frame():
    rng = np.random.default_rng(3)
    table = _model(rng, kinds=1, counts=[8])
    partition = _partition(rng, table, stages=3)
    current = ["off", "selective", "full", "off", "off", "selective", "off", "off"]
    memory, _ = _oracle(table, partition, fsdp=False)(current)
    analysis = RecomputeAnalysis(table, partition, memory_mb=float(memory.max()) + 100, modes=MODES)
    found = alternatives(_ranges(partition, current), analysis=analysis)
    assert tuple(found.frame.columns) == ALTERNATIVE_COLUMNS
    assert found.frame["alternative"].tolist() == list(range(len(found.plans)))
    assert tuple(found.stages.columns) == ("alternative", *STAGE_COLUMNS)
    for number, plan in enumerate(found.plans):
        long = found.stages[found.stages["alternative"] == number].drop(columns="alternative").reset_index(drop=True)
        pd.testing.assert_frame_equal(long, plan.stages)
    assert found.plans[-1] is found.plans[len(found.plans) - 1]
    assert found.plans[:2] == [found.plans[0], found.plans[1]]
    assert found.binding_stage == int(np.argmax(memory))
    assert found.current.layer_options["mode"].tolist() == current


def test_duplicates_are_dropped_and_custom_mode_names_work(small):
    table, part = small
    # from off, the layer that ends warm-up frees what any other layer frees (under full its working set is the
    # plain layer's, as it was under off): one plan per stage, not one per group
    analysis = RecomputeAnalysis(table, part, memory_mb=1e5, modes=MODES)
    assert len(analysis.pricing.groups[0]) == 2
    found = alternatives(_ranges(part, ["off"] * 4), analysis=analysis)
    assert found.frame[["stage", "from_mode", "layers_changed"]].values.tolist() == [[0, "off", "0"],
                                                                                    [1, "off", "2"]]
    renamed = RecomputeAnalysis(table, part, memory_mb=1e5, modes={"keep": "none", "full": "full"})
    frame = pd.DataFrame({"first": [0], "count": [4], "kind": ["b"], "mode": ["keep"]})
    found = alternatives(frame, analysis=renamed)
    assert found.frame["from_mode"].tolist() == ["keep", "keep"]
    assert found.plans[1].layer_options["option"].tolist() == ["none", "none", "full", "none"]


# --- empty results -----------------------------------------------------------------------------------------------

def test_empty_for_multimodal_schedule_modes_and_one_mode(small):
    rng = np.random.default_rng(1)
    vlm = _model(rng, kinds=2, counts=[2, 2], module=["vision", "language"])
    part = _partition(rng, vlm, stages=2)
    found = alternatives(_ranges(part, ["off"] * 4), analysis=RecomputeAnalysis(vlm, part, memory_mb=1e5, modes=MODES))
    assert not found.plans and found.frame.empty and found.reason.startswith("the model is multimodal")
    table, part = small
    dual = Partition(stages=2, chunks=2, schedule="dualpipev", micro_batches=4,
                     cells=pd.DataFrame({"chunk": [0, 0, 1, 1], "stage": [0, 1, 1, 0], "kind": "b", "layers": 1}))
    analysis = RecomputeAnalysis(table, dual, memory_mb=1e5, modes=MODES)
    assert analysis.alternatives(_ranges(dual, ["off"] * 4)) == []
    assert analysis.reason.startswith("schedule 'dualpipev' is not supported")
    no_full = RecomputeAnalysis(table, part, memory_mb=1e5, modes=("off", "selective"))
    assert no_full.alternatives(_ranges(part, ["off"] * 4)) == []
    assert no_full.reason == "'full' is not among the modes ('off', 'selective'), so no layer can be turned up to it"
    one_mode = choose_recompute(table, part, memory_mb=1e5, modes=MODES)
    found = alternatives(one_mode)
    assert found.plans == () and found.reason == ("current runs mode 'off' for every layer (a one-mode choice): "
                                                  "its runtime cannot turn up one layer")


def test_empty_when_nothing_can_be_turned_up_or_fit(small):
    table, part = small
    analysis = RecomputeAnalysis(table, part, memory_mb=1e5, modes=MODES)
    found = alternatives(_ranges(part, ["full"] * 4), analysis=analysis)
    assert not found.plans and found.reason == "every layer already runs 'full'"
    # the one layer to turn up ends warm-up: from selective, full adds the plain layer's working set
    current = ["full", "selective", "full", "full"]
    peak = float(analysis.pricing.evaluate([OPTION_OF[m] for m in current])["memory_mb"].max())
    tight = RecomputeAnalysis(table, part, memory_mb=peak, modes=MODES)
    found = alternatives(_ranges(part, current), analysis=tight)
    assert not found.plans and found.reason == "no plan with one more layer at 'full' fits"
    low = RecomputeAnalysis(table, part, memory_mb=peak - 1, modes=MODES)
    found = alternatives(_ranges(part, current), analysis=low)
    assert found.reason == f"current does not fit: stage 0 needs {peak:,.1f} MB against a limit of {peak - 1:,.1f} MB"


# --- refused settings (refused currents: test_current.py) --------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(modes=None), "modes is None; the analysis turns layers up to the mode 'full' of a runtime's modes: pass "
                       "modes=('off', 'selective', 'full') or a mapping mode -> option"),
    (dict(modes=()), "modes is empty; give at least one mode, e.g. modes=('off', 'selective', 'full')"),
    (dict(modes=("off", "partial")), "modes names an unknown mode 'partial'; the default modes are 'off', "
                                     "'selective', 'full' (pass a mapping mode -> option for others)"),
    (dict(modes=MODES, per_layer=False), "per_layer must be True for the analysis; got False (it extends a choice "
                                         "of a mode per layer)"),
    (dict(modes=MODES, link=1.0), "link must be None for the analysis; got 1.0 (it prices plans without offload, "
                                  "and refuses a plan that offloads)"),
    (dict(modes=MODES, budget=3), "RecomputeAnalysis got unknown option(s) 'budget'; it takes choose_recompute's "
                                  "fsdp_holds_grads, bucket_mb, per_layer, link"),
])
def test_refuses_bad_analysis_settings(small, kwargs, message):
    table, part = small
    with pytest.raises(InputError) as error:
        RecomputeAnalysis(table, part, memory_mb=1e5, **kwargs)
    assert str(error.value) == message


def test_alternatives_needs_prices(small):
    table, part = small
    with pytest.raises(InputError) as error:
        alternatives(_ranges(part, ["off"] * 4))
    assert str(error.value) == ("choice is a DataFrame, which carries no prices; pass "
                                "analysis=RecomputeAnalysis(...) to price its layers")
    with pytest.raises(InputError) as error:
        alternatives(choose_recompute(table, part, memory_mb=1e5))
    assert str(error.value) == ("the pricing has no modes (it offers each kind's front); the analysis turns layers "
                                "up to the mode 'full': price with modes=('off', 'selective', 'full')")
    with pytest.raises(InputError) as error:
        alternatives(_ranges(part, ["off"] * 4), analysis="analysis")
    assert str(error.value) == "analysis must be a sappkit.RecomputeAnalysis; got str"
    with pytest.raises(InputError) as error:
        RecomputeAnalysis.from_pricing(part)
    assert str(error.value) == "pricing must be a sappkit.recompute.pricing.Pricing; got Partition"


# --- plot, dashboard logic, command line -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def walk_start(small):
    table, part = small
    choice = choose_recompute(table, part, memory_mb=290, modes=MODES, per_layer=True)
    return RecomputeAnalysis.from_pricing(choice.pricing), choice


def test_plot_alternatives(walk_start):
    analysis, choice = walk_start
    found = alternatives(choice, analysis=analysis)
    ax = sappkit.plot_alternatives(found.frame, labels=1)
    labels = [text.get_text() for text in ax.texts]
    most = found.frame.loc[found.frame["memory_freed_mb"].idxmax()]
    assert labels == ["current", f"s{most.stage} b ({most.from_mode})"]
    points = np.concatenate([collection.get_offsets() for collection in ax.collections[1:]])
    np.testing.assert_allclose(sorted(map(tuple, points)),
                               sorted(map(tuple, found.frame[["time_cost", "memory_freed_mb"]].to_numpy())))
    ringed = sappkit.plot_alternatives(found.frame, peak_mb=choice.memory_mb, labels=1)
    lower = found.frame[found.frame["memory_mb"] < choice.memory_mb]
    on_top = [c for c in ringed.collections if c.get_zorder() == 4]
    assert sum(len(c.get_offsets()) for c in on_top) == len(lower) > 0 and len(ringed.texts) == 2
    empty = sappkit.plot_alternatives(found.frame.iloc[:0])
    assert empty.get_title() == "no alternative fits" and [t.get_text() for t in empty.texts] == ["current"]
    with pytest.raises(InputError) as error:
        sappkit.plot_alternatives(found.frame.drop(columns="time_cost"))
    assert str(error.value) == ("frame is missing column(s) 'time_cost'; a sappkit.alternatives frame needs stage, "
                                "kind, from_mode, memory_freed_mb, time_cost")


def test_walk_steps_and_dashboard(walk_start):
    from sappkit.widgets.alternatives import AlternativesDashboard, one_more, step_back, walk_step

    analysis, choice = walk_start
    start = walk_step(analysis, [choice])
    assert start.shown is choice and start.labels[0][1] is None and len(start.labels) == len(start.found.plans) + 1
    picked = walk_step(analysis, [choice], pick=1)
    assert picked.shown is picked.found.plans[1]
    assert picked.summary().splitlines()[2:] == [
        f"baseline: {choice.baseline}",
        f"trainer plan (HyperParallel activation_checkpoint): mode = {picked.shown.trainer_plan()[0]!r}, layers = "
        f"{picked.shown.trainer_plan()[1]}"]
    on = one_more(picked)
    assert on.path == (choice, picked.found.plans[1]) and on.pick is None
    assert on.found.current is picked.found.plans[1]
    assert step_back(on).path == (choice,) and step_back(start).path == (choice,)
    with pytest.raises(InputError) as error:
        one_more(start)
    assert str(error.value) == "one more from here needs an alternative picked; pick one of the alternatives first"
    with pytest.raises(InputError) as error:
        walk_step(analysis, [choice], pick=99)
    assert str(error.value) == (f"pick must be an alternative number from 0 to {len(start.found.plans) - 1}, "
                                "or None; got 99")
    dashboard = AlternativesDashboard(choice, analysis=analysis)
    assert dashboard.more.disabled and dashboard.back.disabled
    dashboard.picker.value = 0
    assert dashboard.last.pick == 0 and not dashboard.more.disabled
    dashboard.more.click()
    assert len(dashboard.last.path) == 2 and dashboard.picker.value is None and not dashboard.back.disabled
    dashboard.back.click()
    assert dashboard.last.path == (choice,)


def test_command_line(capsys):
    from sappkit.cli import main

    assert main(["alternatives", "data/llama2_70b.json", "--stages", "8", "--micro-batches", "16",
                 "--memory", "60000", "--dimensions", "dp=4,tp=8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("the plan to start from (sappkit choose --per-layer): simulated step time ")
    count = int(next(line for line in out if "plan(s) with one more layer at 'full'" in line).split()[0])
    header = next(number for number, line in enumerate(out) if line.split()[:3] == ["#", "stage", "kind"])
    assert len(out) == header + 1 + count and max(map(len, out)) <= 100
    assert main(["alternatives", "data/llama2_70b.json", "--stages", "8", "--micro-batches", "16", "--memory", "60000",
                 "--dimensions", "tp"]) == 2
    assert capsys.readouterr().err == "sappkit alternatives: --dimensions entry 'tp' is not NAME=DEGREE (e.g. tp=4)\n"
    assert main(["alternatives", "data/llama2_70b.json", "--stages", "8", "--micro-batches", "16", "--memory", "60000",
                 "--offsets", "missing.yaml"]) == 2
    assert capsys.readouterr().err == ("sappkit alternatives: missing.yaml: no such file; expected a MindFormers YAML "
                                       "with offset and recompute lists (--offsets)\n")


def test_plans_that_free_no_memory_are_left_out_and_counted(deepseek, capsys):
    """DeepSeek-V3 on 16 stages: stage 12's layer that ends warm-up, turned from selective to full, holds 332 MB
    more (it rebuilds the plain layer for its backward) and costs time: no row offers it."""
    from sappkit.cli import main

    part = Partition.from_assignment(sappkit.even_assignment(deepseek, stages=16), stages=16, micro_batches=32)
    choice = choose_recompute(deepseek, part, memory_mb=70_000, modes=MODES, per_layer=True)
    found = alternatives(choice)
    assert (found.frame["memory_freed_mb"] > 0).all() and found.left_out == 1
    assert main(["alternatives", "data/deepseek_v3.json", "--stages", "16", "--micro-batches", "32", "--memory",
                 "70000", "--sort", "freed-per-cost", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["left_out"] == 1 and min(row["memory_freed_mb"] for row in document["alternatives"]) > 0
    # one value per cell: the layers changed read as ranges, in the frame and in a CSV
    assert {type(value) for value in found.frame["layers_changed"]} == {str}
    assert "35-36" in found.frame["layers_changed"].tolist()
    assert main(["alternatives", "data/deepseek_v3.json", "--stages", "16", "--micro-batches", "32", "--memory",
                 "70000", "--format", "csv"]) == 0
    assert '"(' not in capsys.readouterr().out


def test_command_line_reads_the_offsets_choose_reads(tmp_path, capsys):
    """``--offsets`` places the layers (and configures recompute) exactly as ``sappkit choose --offsets`` does."""
    from sappkit.cli import main

    path = tmp_path / "plan.yaml"
    path.write_text("model:\n  model_config:\n    offset: [1, 0, 0, 0, 0, 0, 0, -1]\n"
                    "recompute_config:\n  recompute: [4, 4, 4, 4, 4, 4, 4, 4]\n")
    shape = ["data/llama2_70b.json", "--stages", "8", "--micro-batches", "16", "--memory", "60000",
             "--offsets", str(path)]
    assert main(["choose", *shape, "--per-layer", "--format", "json"]) == 0
    chosen = json.loads(capsys.readouterr().out)
    table = sappkit.read_layers_json("data/llama2_70b.json")
    part = Partition.from_offsets(table, stages=8, micro_batches=16, offset=[1, 0, 0, 0, 0, 0, 0, -1],
                                  recompute=[4] * 8)
    choice = choose_recompute(table, part, memory_mb=60000, modes=MODES, per_layer=True)
    assert chosen["ranges"] == [dict(record, offloaded_mb=0.0) for record in choice.to_records()]
    assert main(["alternatives", *shape, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    mode, overrides = choice.trainer_plan()
    found = alternatives(choice)
    assert document["trainer_plan"] == {"mode": mode, "layers": overrides}
    assert (document["binding_stage"], len(document["alternatives"])) == (found.binding_stage, len(found.frame))
    assert document["time_saved"] == pytest.approx(choice.time_saved)
    assert document["baseline"] == choice.baseline == "the configured recompute"
    assert main(["alternatives", *shape, "--modes", "off,selective"]) == 0
    assert " ".join(capsys.readouterr().out.split()).endswith(
        "no alternative: 'full' is not among the modes ('off', 'selective'), so no layer can be turned up to it")
